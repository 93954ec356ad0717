// libFuzzer target for the NVMe core's capsule handling (NvmfQueue::plan and execute). A script drives a fresh
// target with two NVM subsystems (RAM namespaces behind a backend that aborts on any access outside its size or off
// its block size) through up to six queues. The input is a list of steps; the first byte of each, modulo 10:
//   0 [slot][qid][sq_size]      open a queue in a slot (closing the one there)
//   1 [slot]                    close the queue in a slot
//   2 [slot][which][kato][sqsize]  a well-formed admin Connect: which % 4 picks the subsystem (NVM, restricted,
//                                  discovery, unknown), which & 4 the other host
//   3 [slot][cntlid][which]     a well-formed I/O Connect to the last controller made (cntlid byte 0) or another
//   4 [slot][selector]          Property Set CC: enable (Linux's value), shutdown, disable, or CC from the selector
//   5 [slot][capsule lo][capsule hi][64 SQE bytes]  a raw command; in-capsule length (0..8191)
//   6 [slot][template][n][n x (offset, byte)]  one of the commands Linux sends, with n bytes of its SQE patched
//     (5 and 6 are followed by [m][m bytes] of host data, m <= 64, when the plan asks for host-to-controller data)
//   7 [step]                    the clock moves (step * 100 ms) and the target ticks
//   8 [slot]                    take the held commands of a queue
//   9 [slot][size lo][size hi][64 SQE bytes]  execute() without plan(), with any data size
// Oracles (abort()): a refused plan moves nothing; a plan never asks for more than MDTS, never in-capsule data on the
// admin queue or beyond the capsule, never less than it moves; a result's data fits the plan; the SQ head stays in
// the queue; no backend access leaves its namespace. NVMF_FUZZ_TRACE=1 prints each command's opcode and status
// (to check what a seed reaches: make_seeds.py writes the seeds).
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "apps/nvmf/nvme/nvmf_target.h"

namespace {

using namespace uroce::nvmf;

constexpr std::size_t kSlots = 6;
constexpr uint8_t kMdts = 5;
constexpr uint64_t kMaxTransfer = uint64_t{4096} << kMdts;
constexpr const char* kNvmNqn = "nqn.2024-01.io.uroce:fuzz";
constexpr const char* kRestrictedNqn = "nqn.2024-01.io.uroce:restricted";
constexpr const char* kHostNqn = "nqn.2014-08.org.nvmexpress:uuid:fuzz-host";
constexpr const char* kOtherHostNqn = "nqn.2014-08.org.nvmexpress:uuid:other-host";

void check(bool ok) {
  if (!ok) std::abort();
}

const bool kTrace = std::getenv("NVMF_FUZZ_TRACE") != nullptr;  // NOLINT(concurrency-mt-unsafe): once, at load
void trace(const char* what, const NvmfQueue& queue, uint8_t opcode, NvmeStatus status) {
  if (kTrace) std::fprintf(stderr, "%s qid %u opcode 0x%02x: status 0x%04x\n", what, queue.qid(), opcode, status);
}

// RAM with a guard: every access inside the namespace and in whole blocks.
class CheckedRam final : public Backend {
 public:
  CheckedRam(uint64_t size, uint32_t block) : ram_(make_ram_backend(size)), size_(size), block_(block) {}
  [[nodiscard]] uint64_t size() const override { return size_; }
  [[nodiscard]] int submit(const BackendRequest& request) override {
    if (request.op != BackendOp::kFlush) guard(request.offset, request.length);
    return ram_->submit(request);
  }
  [[nodiscard]] std::size_t poll(std::span<BackendCompletion> out) override { return ram_->poll(out); }
  [[nodiscard]] std::string describe() const override { return "checked " + ram_->describe(); }

 private:
  void guard(uint64_t offset, uint64_t length) const {
    check(offset <= size_ && length <= size_ - offset);
    check(offset % block_ == 0 && length % block_ == 0);
  }
  std::unique_ptr<Backend> ram_;
  uint64_t size_;
  uint32_t block_;
};

TargetConfig fuzz_config() {
  TargetConfig config;
  SubsystemConfig nvm;
  nvm.nqn = kNvmNqn;
  nvm.namespaces.push_back({.nsid = 1, .block_size = 512, .backend = std::make_shared<CheckedRam>(64 * 1024, 512)});
  nvm.namespaces.push_back({.nsid = 3, .block_size = 4096, .backend = std::make_shared<CheckedRam>(16 * 4096, 4096)});
  config.subsystems.push_back(nvm);
  SubsystemConfig restricted;
  restricted.nqn = kRestrictedNqn;
  restricted.allowed_hosts = {kOtherHostNqn};
  restricted.namespaces.push_back({.nsid = 7, .block_size = 512, .backend = std::make_shared<CheckedRam>(4096, 512)});
  config.subsystems.push_back(restricted);
  config.ports.push_back({.ipv6 = false, .address = "198.18.0.100", .port = 4420});
  config.limits.mdts = kMdts;
  config.limits.max_io_queues = 4;
  return config;
}

class Script {
 public:
  Script(const uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  [[nodiscard]] bool done() const { return at_ >= size_; }
  uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }
  uint16_t u16() { return static_cast<uint16_t>(byte() | byte() << 8); }
  void fill(std::span<uint8_t> out) {
    for (uint8_t& b : out) b = byte();
  }
  // Host data: [n][n bytes] from the script (n <= 64), then a pattern.
  void host_data(std::span<uint8_t> out) {
    const std::size_t n = byte() % 65;
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = i < n ? byte() : static_cast<uint8_t>(n + i);
    for (std::size_t i = out.size(); i < n; ++i) (void)byte();
  }

 private:
  const uint8_t* data_;
  std::size_t size_;
  std::size_t at_ = 0;
};

struct Slot {
  std::unique_ptr<NvmfQueue> queue;
  uint16_t sq_size = 1;
};

using SqeBytes = std::array<uint8_t, kSqeSize>;

void put16(SqeBytes& s, std::size_t at, uint16_t v) {
  s[at] = static_cast<uint8_t>(v);
  s[at + 1] = static_cast<uint8_t>(v >> 8);
}
void put32(SqeBytes& s, std::size_t at, uint32_t v) {
  for (std::size_t i = 0; i < 4; ++i) s[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
SqeBytes sqe(uint8_t opcode, uint16_t cid) {
  SqeBytes s{};
  s[0] = opcode;
  s[1] = 0x40;
  put16(s, 2, cid);
  s[39] = 0x40;  // the null keyed SGL
  return s;
}
void keyed(SqeBytes& s, uint32_t length) {
  put32(s, 32, length & 0xFFFFFF);
  put32(s, 35, 0xABCD);
  s[39] = 0x4F;
}
void in_capsule(SqeBytes& s, uint32_t length) {
  put32(s, 32, length);
  s[39] = 0x01;
}

// Linux's commands; returns the in-capsule length the capsule carries.
std::size_t make_template(uint8_t which, SqeBytes& s) {
  switch (which % 16) {
    case 0:
      s = sqe(0x06, 1);
      s[40] = 0x01;  // Identify (CNS patchable)
      keyed(s, 4096);
      return 0;
    case 1:
      s = sqe(0x02, 2);
      put32(s, 4, 0xFFFFFFFF);
      put32(s, 40, 0x02 | 1U << 15 | 127U << 16);  // SMART, 512 bytes
      keyed(s, 512);
      return 0;
    case 2:
      s = sqe(0x02, 3);
      put32(s, 40, 0x70 | 1U << 15 | 255U << 16);  // discovery header
      keyed(s, 1024);
      return 0;
    case 3:
      s = sqe(0x02, 4);
      put32(s, 40, 0x70 | 1U << 15 | 1023U << 16);  // discovery entries from LPO 1024
      put32(s, 48, 1024);
      keyed(s, 4096);
      return 0;
    case 4:
      s = sqe(0x09, 5);
      put32(s, 40, 0x07);
      put32(s, 44, 3 | 3 << 16);  // Number of Queues
      return 0;
    case 5:
      s = sqe(0x09, 6);
      put32(s, 40, 0x0F);
      put32(s, 44, 5000);  // KATO
      return 0;
    case 6:
      s = sqe(0x0C, 7);  // AER
      return 0;
    case 7:
      s = sqe(0x18, 8);  // Keep Alive
      return 0;
    case 8:
      s = sqe(0x02, 9);
      put32(s, 4, 1);
      put32(s, 48, 7);  // Read 8 blocks
      keyed(s, 4096);
      return 0;
    case 9:
      s = sqe(0x01, 10);
      put32(s, 4, 1);
      put32(s, 48, 7);  // Write 8 blocks in the capsule
      in_capsule(s, 4096);
      return 4096;
    case 10:
      s = sqe(0x08, 11);
      put32(s, 4, 1);
      put32(s, 48, 15);  // Write Zeroes
      return 0;
    case 11:
      s = sqe(0x09, 12);
      put32(s, 4, 1);
      put32(s, 40, 1);
      put32(s, 44, 4);  // DSM deallocate, two ranges in the capsule
      in_capsule(s, 32);
      return 32;
    case 12:
      s = sqe(0x00, 13);
      put32(s, 4, 0xFFFFFFFF);  // Flush all
      return 0;
    case 13:
      s = sqe(0x7F, 14);
      s[4] = 0x04;
      put32(s, 44, 0x1C);  // Property Get CSTS
      return 0;
    case 14:
      s = sqe(0x02, 15);
      put32(s, 4, 3);
      put32(s, 40, 15);  // Read the last 4 KiB block of namespace 3
      keyed(s, 4096);
      return 0;
    default:
      s = sqe(0x01, 16);
      put32(s, 4, 3);
      put32(s, 40, 14);
      put32(s, 48, 1);  // Write two 4 KiB blocks
      keyed(s, 8192);
      return 0;
  }
}

// plan() then execute(), with the oracles.
void run(Slot& slot, const SqeBytes& s, std::size_t in_capsule_length, Script& script, uint64_t now) {
  NvmfQueue& queue = *slot.queue;
  const CommandPlan plan = queue.plan(s, in_capsule_length);
  check(queue.sq_head() < slot.sq_size);
  trace("plan   ", queue, s[0], plan.status);
  if (plan.status != kStatusSuccess) {
    check(plan.length == 0 && plan.direction == DataDirection::kNone);
    const auto cqe = make_cqe({.status = plan.status, .dw0 = 0, .dw1 = 0, .data_length = 0, .held = false},
                              queue.sq_head(), queue.qid(), command_id(s));
    check((cqe[14] | cqe[15] << 8) == (plan.status << 1 & 0xFFFF));
    return;
  }
  check(plan.length <= kMaxTransfer);
  if (plan.direction != DataDirection::kNone) {
    check(plan.sgl.length >= plan.length);
    if (plan.sgl.kind == SglKind::kInCapsule) check(queue.qid() != 0 && plan.sgl.length <= in_capsule_length);
  }
  std::vector<uint8_t> data(plan.length);  // exactly: ASan sees any write past it
  if (plan.direction == DataDirection::kHostToController) script.host_data(data);
  const CommandResult result = queue.execute(s, data, now);
  trace("execute", queue, s[0], result.status);
  check(!result.pending);  // RAM completes every request within submit()
  check(result.data_length <= plan.length);
  if (result.data_length != 0) check(plan.direction == DataDirection::kControllerToHost);
}

}  // namespace

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer names the entry point
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  NvmfTarget target(fuzz_config());
  std::array<Slot, kSlots> slots;
  Script script(data, size);
  uint64_t now = 1000;
  uint16_t last_cntlid = 0;
  auto slot_at = [&](uint8_t b) -> Slot* {
    Slot& slot = slots[b % kSlots];
    return slot.queue ? &slot : nullptr;
  };
  auto connect = [&](Slot& slot, uint16_t qid, uint16_t sqsize, uint32_t kato, uint16_t cntlid, uint8_t which) {
    SqeBytes s = sqe(0x7F, 0x77);
    s[4] = 0x01;
    put16(s, 42, qid);
    put16(s, 44, sqsize);
    put32(s, 48, kato);
    keyed(s, kConnectDataSize);
    const char* nqns[] = {kNvmNqn, kRestrictedNqn, kDiscoveryNqn, "nqn.2024-01.io.uroce:unknown"};
    const std::string subnqn = nqns[which % 4];
    const std::string hostnqn = (which & 4) != 0 ? kOtherHostNqn : kHostNqn;
    const CommandPlan plan = slot.queue->plan(s, 0);
    if (plan.status != kStatusSuccess) return;
    std::vector<uint8_t> d(plan.length, 0);
    check(d.size() == kConnectDataSize);
    d[16] = static_cast<uint8_t>(cntlid);
    d[17] = static_cast<uint8_t>(cntlid >> 8);
    std::memcpy(d.data() + 256, subnqn.data(), subnqn.size());
    std::memcpy(d.data() + 512, hostnqn.data(), hostnqn.size());
    const CommandResult result = slot.queue->execute(s, d, now);
    trace("connect", *slot.queue, s[0], result.status);
    if (result.status == kStatusSuccess && qid == 0) last_cntlid = static_cast<uint16_t>(result.dw0);
  };

  while (!script.done()) {
    const uint8_t step = script.byte();
    switch (step % 10) {
      case 0: {
        Slot& slot = slots[script.byte() % kSlots];
        const uint16_t qid = script.byte() % 6;
        slot.queue.reset();
        slot.sq_size = std::max<uint16_t>(script.byte(), 1);
        slot.queue = target.open_queue(qid, slot.sq_size);
        break;
      }
      case 1:
        slots[script.byte() % kSlots].queue.reset();
        break;
      case 2:
        if (Slot* slot = slot_at(script.byte())) {
          const uint8_t which = script.byte();
          const uint32_t kato = script.byte() * 100U;
          connect(*slot, slot->queue->qid(), script.byte() % 40, kato, 0xFFFF, which);
        }
        break;
      case 3:
        if (Slot* slot = slot_at(script.byte())) {
          const uint8_t cntlid = script.byte();
          connect(*slot, slot->queue->qid(), 31, 0, cntlid == 0 ? last_cntlid : cntlid, script.byte());
        }
        break;
      case 4:
        if (Slot* slot = slot_at(script.byte())) {
          const uint8_t selector = script.byte();
          const uint32_t values[] = {0x00460001, 0x00464001, 0x00460000, 0x00000001};
          SqeBytes s = sqe(0x7F, 0x55);
          s[4] = 0x00;
          put32(s, 44, 0x14);
          put32(s, 48, selector < 4 ? values[selector] : selector * 0x01010101U);
          run(*slot, s, 0, script, now);
        }
        break;
      case 5:
        if (Slot* slot = slot_at(script.byte())) {
          const std::size_t in_capsule_length = script.u16() % 8192;
          SqeBytes s{};
          script.fill(s);
          run(*slot, s, in_capsule_length, script, now);
        }
        break;
      case 6:
        if (Slot* slot = slot_at(script.byte())) {
          SqeBytes s{};
          const std::size_t in_capsule_length = make_template(script.byte(), s);
          for (unsigned n = script.byte() % 8; n > 0; --n) {
            const uint8_t offset = script.byte() % kSqeSize;
            s[offset] = script.byte();
          }
          run(*slot, s, in_capsule_length, script, now);
        }
        break;
      case 7:
        now += uint64_t{script.byte()} * 100;
        target.tick(now);
        break;
      case 8:
        if (Slot* slot = slot_at(script.byte())) (void)slot->queue->take_held();
        break;
      default:
        if (Slot* slot = slot_at(script.byte())) {
          std::vector<uint8_t> buffer(script.u16() % (kMaxTransfer + 1));
          SqeBytes s{};
          script.fill(s);
          const CommandResult result = slot->queue->execute(s, buffer, now);
          check(result.data_length <= buffer.size());
        }
        break;
    }
  }
  for (Slot& slot : slots) slot.queue.reset();  // queues go before the target
  const TargetCounters& counters = target.counters();
  check(counters.controllers_destroyed <= counters.controllers_created);
  return 0;
}
