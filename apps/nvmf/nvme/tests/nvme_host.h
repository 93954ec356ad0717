// Test players for the NVMe core: SQEs built the way Linux's nvme-rdma host builds them (PSDT 01b, a keyed SGL
// 0x4F for data, the null keyed SGL 0x40 for none, in-capsule 0x01 for small writes on I/O queues), and a Host that
// stands in for the host and the transport at once: it runs plan(), moves the data plan() asked for, runs
// execute(), and keeps what came back (polling the target until a command a backend runs has finished).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "apps/nvmf/nvme/nvmf_target.h"

namespace uroce::nvmf::testing {

inline constexpr const char* kSubsystemNqn = "nqn.2024-01.io.uroce:test";
inline constexpr const char* kRestrictedNqn = "nqn.2024-01.io.uroce:restricted";
inline constexpr const char* kHostNqn = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
inline constexpr const char* kOtherHostNqn = "nqn.2014-08.org.nvmexpress:uuid:99999999-2222-3333-4444-555555555555";

// Status values as the CQE carries them (without the phase bit): Linux's NVME_SC_* | NVME_STATUS_DNR.
inline constexpr NvmeStatus kInvalidOpcode = 0x4001;
inline constexpr NvmeStatus kInvalidField = 0x4002;
inline constexpr NvmeStatus kInternal = 0x0006;
inline constexpr NvmeStatus kInvalidNamespace = 0x400B;
inline constexpr NvmeStatus kCommandSequenceError = 0x400C;
inline constexpr NvmeStatus kSglDataLengthInvalid = 0x400F;
inline constexpr NvmeStatus kSglTypeInvalid = 0x4011;
inline constexpr NvmeStatus kSglOffsetInvalid = 0x4016;
inline constexpr NvmeStatus kKeepAliveInvalid = 0x401A;
inline constexpr NvmeStatus kLbaOutOfRange = 0x4080;
inline constexpr NvmeStatus kAsyncLimit = 0x4105;
inline constexpr NvmeStatus kCommandSizeLimitExceeded = 0x4183;
inline constexpr NvmeStatus kConnectIncompatibleFormat = 0x4180;
inline constexpr NvmeStatus kConnectInvalidParameters = 0x4182;
inline constexpr NvmeStatus kConnectInvalidHost = 0x4184;

inline void put16(std::span<uint8_t> b, std::size_t at, uint16_t v) {
  for (std::size_t i = 0; i < 2; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void put32(std::span<uint8_t> b, std::size_t at, uint32_t v) {
  for (std::size_t i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void put64(std::span<uint8_t> b, std::size_t at, uint64_t v) {
  for (std::size_t i = 0; i < 8; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint16_t get16(std::span<const uint8_t> b, std::size_t at) {
  return static_cast<uint16_t>(b[at] | b[at + 1] << 8);
}
inline uint32_t get32(std::span<const uint8_t> b, std::size_t at) {
  return static_cast<uint32_t>(get16(b, at)) | static_cast<uint32_t>(get16(b, at + 2)) << 16;
}
inline uint64_t get64(std::span<const uint8_t> b, std::size_t at) {
  return get32(b, at) | static_cast<uint64_t>(get32(b, at + 4)) << 32;
}
inline std::string text(std::span<const uint8_t> b, std::size_t at, std::size_t n) {
  return {reinterpret_cast<const char*>(b.data() + at), n};
}

struct Sqe {
  std::array<uint8_t, kSqeSize> bytes{};
  Sqe(uint8_t opcode, uint16_t cid) {
    bytes[0] = opcode;
    bytes[1] = 0x40;  // NVME_CMD_SGL_METABUF
    put16(bytes, 2, cid);
    null_sgl();
  }
  Sqe& nsid(uint32_t v) {
    put32(bytes, 4, v);
    return *this;
  }
  Sqe& cdw(unsigned n, uint32_t v) {
    put32(bytes, std::size_t{4} * n, v);
    return *this;
  }
  Sqe& keyed(uint32_t length, uint32_t key = 0x1234, bool invalidate = true, uint64_t address = 0x7f0000001000) {
    put64(bytes, 24, address);
    put32(bytes, 32, length & 0xFFFFFF);
    put32(bytes, 35, key);
    bytes[39] = invalidate ? 0x4F : 0x40;
    return *this;
  }
  Sqe& null_sgl() {
    std::memset(bytes.data() + 24, 0, 16);
    bytes[39] = 0x40;
    return *this;
  }
  Sqe& in_capsule(uint32_t length, uint64_t offset = 0) {
    std::memset(bytes.data() + 24, 0, 16);
    put64(bytes, 24, offset);
    put32(bytes, 32, length);
    bytes[39] = 0x01;
    return *this;
  }
  Sqe& sgl_type(uint8_t type) {
    bytes[39] = type;
    return *this;
  }
};

// Fabrics.
inline Sqe connect_sqe(uint16_t qid, uint16_t sqsize, uint32_t kato_ms, uint16_t cid = 1) {
  Sqe s(0x7F, cid);
  s.bytes[4] = 0x01;
  put16(s.bytes, 42, qid);
  put16(s.bytes, 44, sqsize);
  put32(s.bytes, 48, kato_ms);
  s.keyed(kConnectDataSize);
  return s;
}
inline std::vector<uint8_t> connect_data(uint16_t cntlid, const std::string& subnqn, const std::string& hostnqn) {
  std::vector<uint8_t> d(kConnectDataSize, 0);
  for (std::size_t i = 0; i < 16; ++i) d[i] = static_cast<uint8_t>(0xA0 + i);  // host ID
  put16(d, 16, cntlid);
  std::memcpy(d.data() + 256, subnqn.data(), subnqn.size());
  std::memcpy(d.data() + 512, hostnqn.data(), hostnqn.size());
  return d;
}
inline Sqe property_get(uint32_t offset, bool eight_bytes, uint16_t cid = 2) {
  Sqe s(0x7F, cid);
  s.bytes[4] = 0x04;
  s.bytes[40] = eight_bytes ? 1 : 0;
  put32(s.bytes, 44, offset);
  return s;
}
inline Sqe property_set(uint32_t offset, uint64_t value, uint16_t cid = 3) {
  Sqe s(0x7F, cid);
  s.bytes[4] = 0x00;
  put32(s.bytes, 44, offset);
  put64(s.bytes, 48, value);
  return s;
}
// Admin.
inline Sqe identify(uint8_t cns, uint32_t nsid = 0, uint16_t cid = 4) {
  return Sqe(0x06, cid).nsid(nsid).cdw(10, cns).keyed(4096);
}
inline Sqe get_log_page(uint8_t lid, uint32_t bytes, uint64_t offset = 0, uint32_t nsid = 0xFFFFFFFF,
                        uint16_t cid = 5) {
  const uint32_t numd = bytes / 4 - 1;
  return Sqe(0x02, cid)
      .nsid(nsid)
      .cdw(10, lid | 1U << 15 | (numd & 0xFFFF) << 16)  // RAE, NUMDL
      .cdw(11, numd >> 16)                              // NUMDU
      .cdw(12, static_cast<uint32_t>(offset))
      .cdw(13, static_cast<uint32_t>(offset >> 32))
      .keyed(bytes);
}
inline Sqe set_features(uint8_t fid, uint32_t value, uint16_t cid = 6) {
  return Sqe(0x09, cid).cdw(10, fid).cdw(11, value);
}
inline Sqe get_features(uint8_t fid, uint16_t cid = 7) { return Sqe(0x0A, cid).cdw(10, fid); }
// NVM I/O.
inline Sqe rw(uint8_t opcode, uint32_t nsid, uint64_t slba, uint32_t blocks, uint16_t cid = 8) {
  return Sqe(opcode, cid)
      .nsid(nsid)
      .cdw(10, static_cast<uint32_t>(slba))
      .cdw(11, static_cast<uint32_t>(slba >> 32))
      .cdw(12, (blocks - 1) & 0xFFFF);
}

struct Exchange {
  CommandPlan plan;
  CommandResult result;
  std::vector<uint8_t> data;  // controller-to-host data, data_length bytes
  uint16_t sq_head = 0;
  [[nodiscard]] NvmeStatus status() const { return result.status; }
};

// The host and the transport of one queue.
class Host {
 public:
  Host(NvmfTarget& target, uint16_t qid, uint16_t sq_size = 32)
      : target_(&target), queue(target.open_queue(qid, sq_size)) {}

  // Plans, moves `h2c` when the plan asks for host-to-controller data (in the capsule or by RDMA READ), executes.
  Exchange run(const Sqe& sqe, std::span<const uint8_t> h2c = {}, std::size_t in_capsule_length = 0) {
    Exchange x;
    x.plan = queue->plan(sqe.bytes, in_capsule_length);
    x.sq_head = queue->sq_head();
    if (x.plan.status != kStatusSuccess) {
      x.result.status = x.plan.status;
      return x;
    }
    std::vector<uint8_t> buffer(x.plan.length, 0xEE);
    if (x.plan.direction == DataDirection::kHostToController)
      std::memcpy(buffer.data(), h2c.data(), std::min<std::size_t>(h2c.size(), buffer.size()));
    x.result = queue->execute(sqe.bytes, buffer, now, ++tag_);
    if (x.result.pending) x.result = wait_for(tag_);
    buffer.resize(x.result.data_length);
    x.data = std::move(buffer);
    return x;
  }
  Exchange connect(uint16_t qid, uint16_t sqsize, uint32_t kato, uint16_t cntlid, const std::string& subnqn,
                   const std::string& hostnqn = kHostNqn) {
    const std::vector<uint8_t> data = connect_data(cntlid, subnqn, hostnqn);
    return run(connect_sqe(qid, sqsize, kato), data);
  }
  // Connect, then what nvme_enable_ctrl does: CAP, CC.EN, CSTS.
  uint16_t connect_and_enable(uint32_t kato, const std::string& subnqn = kSubsystemNqn) {
    const Exchange c = connect(0, 31, kato, 0xFFFF, subnqn);
    if (c.status() != kStatusSuccess) return 0;
    (void)run(property_set(0x14, 0x00460001));
    return static_cast<uint16_t>(c.result.dw0);
  }

  // Polls the target until the backend I/O of command `tag` finished (at most 30 s: a backend that never
  // answers fails the test as Internal Error instead of hanging it).
  CommandResult wait_for(uint32_t tag) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      (void)target_->poll();
      std::array<CompletedCommand, 8> done;
      const std::size_t n = queue->reap(done);
      for (std::size_t i = 0; i < n; ++i) {
        if (done[i].tag == tag) return done[i].result;
        finished.push_back(done[i]);
      }
      if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    CommandResult timed_out;
    timed_out.status = 0x0006;
    return timed_out;
  }

 private:
  NvmfTarget* target_;
  uint32_t tag_ = 0;

 public:
  std::unique_ptr<NvmfQueue> queue;
  std::vector<CompletedCommand> finished;  // other commands' completions wait_for() met
  uint64_t now = 1000;
};

inline TargetConfig test_config() {
  TargetConfig config;
  SubsystemConfig sub;
  sub.nqn = kSubsystemNqn;
  sub.serial = "SN42";
  sub.namespaces.push_back({.nsid = 1, .block_size = 512, .backend = make_ram_backend(1 << 20)});
  sub.namespaces.push_back({.nsid = 3, .block_size = 4096, .backend = make_ram_backend(uint64_t{64} * 4096)});
  config.subsystems.push_back(sub);
  SubsystemConfig restricted;
  restricted.nqn = kRestrictedNqn;
  restricted.allowed_hosts = {kOtherHostNqn};
  restricted.namespaces.push_back({.nsid = 1, .block_size = 512, .backend = make_ram_backend(4096)});
  config.subsystems.push_back(restricted);
  config.ports.push_back({.ipv6 = false, .address = "198.18.0.100", .port = 4420});
  config.ports.push_back({.ipv6 = true, .address = "fd00::100", .port = 4421});
  return config;
}

}  // namespace uroce::nvmf::testing
