// uroce-nvmf-perf: an NVMe-over-Fabrics RDMA initiator and load generator on the NDK API, in the spirit of SPDK's
// spdk_nvme_perf (its option names: -q -o -w -M -t -a -P -r -L): it connects a controller through the connection
// manager (nvmf_host.h: Fabrics Connect, CC.EN, CSTS.RDY, Identify, the I/O queues' Connects), then keeps -q
// commands in flight on each I/O queue, reads and writes of -o bytes, random or sequential, for -t seconds,
// its data in its own registered memory (keyed SGLs), and prints IOPS, MiB/s and latency percentiles from a
// histogram. -V writes a pattern that names each block's unit and generation and checks every read against it.
//
//   uroce-nvmf-perf -r 'trtype:RDMA adrfam:IPv4 traddr:198.18.0.2 trsvcid:4420 subnqn:NQN' [options]
//   uroce-nvmf-perf --in-process [options]   # and a uroce target in this process, on the last port
//
// --in-process runs uroce's own target (the RAM backend, or --file) in this process, listening on the
// configuration's last port (the embedded default joins its two ports with a ring link); the initiator uses the
// first. During the measurement the initiator's thread also polls the target, so the two share one core.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "api/ndk.h"
#include "apps/common/cm_connection.h"
#include "apps/common/tool_setup.h"
#include "apps/nvmf/file_backend.h"
#include "apps/nvmf/latency_histogram.h"
#include "apps/nvmf/nvmf_config.h"
#include "apps/nvmf/nvmf_host.h"
#include "apps/nvmf/rdma_transport.h"

using namespace uroce;
using namespace uroce::ndk;
using namespace uroce::nvmf;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kTool = "uroce-nvmf-perf";

void usage(FILE* out) {
  std::fprintf(out,
               "usage: uroce-nvmf-perf (-r TRID | --in-process) [options]\n"
               "  An NVMe-oF RDMA initiator and load generator (spdk_nvme_perf's options).\n"
               "  -r TRID        'trtype:RDMA adrfam:IPv4 traddr:ADDR trsvcid:4420 subnqn:NQN'\n"
               "  -q DEPTH       commands in flight per I/O queue (default 32)\n"
               "  -o BYTES       I/O size, a multiple of the block size (default 4096)\n"
               "  -w PATTERN     read, write, randread, randwrite, rw, randrw (default randread)\n"
               "  -M PERCENT     reads in rw/randrw (default 50)\n"
               "  -t SECONDS     measured time (default 10)\n"
               "  -a SECONDS     warm-up before it, not counted (default 0)\n"
               "  -P QUEUES      I/O queues (default 1)\n"
               "  -V, --verify   write a pattern and check every read of it (reads first fill the span; after a run\n"
               "                 that wrote, every unit written is read back and checked)\n"
               "  -L             print the latency histogram too\n"
               "  --nsid N       the namespace (default 1)\n"
               "  --span-mb N    use only the first N MiB of the namespace\n"
               "  --hostnqn NQN  the host NQN (default a fixed uuid NQN)\n"
               "  --kato MS      keep-alive timeout asked in Connect (default 0: none)\n"
               "  --timeout S    each connection and admin step (default 10)\n"
               "  --in-process   run uroce's target here on the last port (with -r, only subnqn and trsvcid count)\n"
               "  --ram-mb N     --in-process: the RAM namespace's size (default 256)\n"
               "  --file PATH    --in-process: a file namespace instead (--file-size-mb N creates or extends it)\n"
               "  --wait-pid PID after the run, stop polling and wait for PID to end before closing the ports\n"
               "                 (two processes over net_memif: the target may close its end safely)\n"
               "  -h, --help\n"
               "%s",
               apps::kConfigOptionsHelp);
}

enum class Pattern : uint8_t { kRead, kWrite, kMixed };

struct Options {
  std::string trid;
  uint32_t depth = 32;
  uint32_t io_size = 4096;
  std::string workload = "randread";
  Pattern pattern = Pattern::kRead;
  bool random = true;
  uint32_t read_percent = 50;
  uint64_t seconds = 10;
  uint64_t warmup = 0;
  uint16_t queues = 1;
  bool verify = false;
  bool histogram = false;
  uint32_t nsid = 1;
  uint64_t span_mb = 0;
  std::string hostnqn;
  uint32_t kato_ms = 0;
  uint64_t timeout_s = 10;
  bool in_process = false;
  uint64_t ram_mb = 256;
  std::string file;
  uint64_t file_size_mb = 0;
  int wait_pid = 0;
  // From -r.
  std::string traddr;
  uint16_t trsvcid = kDefaultPort;
  std::string subnqn = kDefaultNqn;
};

bool complain(const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", kTool, message.c_str());
  return false;
}

bool parse_trid(Options& o) {
  std::size_t at = 0;
  while (at < o.trid.size()) {
    const std::size_t end = std::min(o.trid.find(' ', at), o.trid.size());
    const std::string token = o.trid.substr(at, end - at);
    at = end + 1;
    if (token.empty()) continue;
    const std::size_t colon = token.find(':');
    if (colon == std::string::npos) return complain("-r: '" + token + "' is not KEY:VALUE");
    std::string key = token.substr(0, colon);
    const std::string value = token.substr(colon + 1);
    std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::tolower(c); });
    if (key == "trtype") {
      if (value != "RDMA" && value != "rdma") return complain("-r: trtype '" + value + "': only RDMA");
    } else if (key == "adrfam") {
      if (value != "IPv4" && value != "IPv6" && value != "ipv4" && value != "ipv6")
        return complain("-r: adrfam '" + value + "': IPv4 or IPv6");
    } else if (key == "traddr") {
      o.traddr = value;
    } else if (key == "trsvcid") {
      const std::optional<uint64_t> port = apps::parse_number(kTool, "-r trsvcid", value.c_str(), 1, 65535);
      if (!port) return false;
      o.trsvcid = static_cast<uint16_t>(*port);
    } else if (key == "subnqn") {
      o.subnqn = value;
    } else if (key == "hostnqn") {
      o.hostnqn = value;
    } else {
      return complain("-r: unknown key '" + key + "' (trtype, adrfam, traddr, trsvcid, subnqn, hostnqn)");
    }
  }
  return true;
}

std::optional<Options> parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        complain(arg + " needs a value");
        return nullptr;
      }
      return argv[++i];
    };
    auto number = [&](uint64_t min, uint64_t max) -> std::optional<uint64_t> {
      const char* v = value();
      if (v == nullptr) return std::nullopt;
      return apps::parse_number(kTool, arg, v, min, max);
    };
    auto set = [&](auto& out, uint64_t min, uint64_t max) {
      const std::optional<uint64_t> v = number(min, max);
      if (v) out = static_cast<std::remove_reference_t<decltype(out)>>(*v);
      return v.has_value();
    };
    bool ok = true;
    if (arg == "-h" || arg == "--help") {
      usage(stdout);
      std::exit(0);  // NOLINT(concurrency-mt-unsafe): before any thread
    } else if (arg == "-r") {
      const char* v = value();
      ok = v != nullptr;
      if (ok) o.trid = v;
    } else if (arg == "-q") {
      ok = set(o.depth, 1, 1024);
    } else if (arg == "-o") {
      ok = set(o.io_size, 512, 16u << 20);
    } else if (arg == "-w") {
      const char* v = value();
      ok = v != nullptr;
      if (ok) o.workload = v;
    } else if (arg == "-M") {
      ok = set(o.read_percent, 0, 100);
    } else if (arg == "-t") {
      ok = set(o.seconds, 1, 86400);
    } else if (arg == "-a") {
      ok = set(o.warmup, 0, 3600);
    } else if (arg == "-P") {
      ok = set(o.queues, 1, 64);
    } else if (arg == "-V" || arg == "--verify") {
      o.verify = true;
    } else if (arg == "-L" || arg == "-LL") {
      o.histogram = true;
    } else if (arg == "--nsid") {
      ok = set(o.nsid, 1, 0xFFFFFFFE);
    } else if (arg == "--span-mb") {
      ok = set(o.span_mb, 1, uint64_t{1} << 30);
    } else if (arg == "--hostnqn") {
      const char* v = value();
      ok = v != nullptr;
      if (ok) o.hostnqn = v;
    } else if (arg == "--kato") {
      ok = set(o.kato_ms, 0, 3600000);
    } else if (arg == "--timeout") {
      ok = set(o.timeout_s, 1, 3600);
    } else if (arg == "--in-process") {
      o.in_process = true;
    } else if (arg == "--ram-mb") {
      ok = set(o.ram_mb, 1, 1u << 20);
    } else if (arg == "--file") {
      const char* v = value();
      ok = v != nullptr;
      if (ok) o.file = v;
    } else if (arg == "--file-size-mb") {
      ok = set(o.file_size_mb, 1, uint64_t{1} << 30);
    } else if (arg == "--wait-pid") {
      ok = set(o.wait_pid, 1, 4194304);
    } else {
      ok = complain("unknown option '" + arg + "' (see --help)");
    }
    if (!ok) return std::nullopt;
  }
  const std::string& w = o.workload;
  if (w == "read" || w == "randread") {
    o.pattern = Pattern::kRead;
  } else if (w == "write" || w == "randwrite") {
    o.pattern = Pattern::kWrite;
  } else if (w == "rw" || w == "randrw") {
    o.pattern = Pattern::kMixed;
  } else {
    complain("-w '" + w + "': read, write, randread, randwrite, rw or randrw");
    return std::nullopt;
  }
  o.random = w.rfind("rand", 0) == 0;
  if (o.io_size % 512 != 0) return complain("-o: a multiple of 512 bytes"), std::nullopt;
  if (!parse_trid(o)) return std::nullopt;
  if (!o.in_process && o.traddr.empty()) return complain("-r with traddr, or --in-process (see --help)"), std::nullopt;
  if (!o.in_process && (!o.file.empty() || o.file_size_mb != 0))
    return complain("--file goes with --in-process"), std::nullopt;
  return o;
}

// uroce's target in this process: a thread polls it while the initiator connects and disconnects; during the
// measurement the initiator's thread polls it instead (poll_here), so initiator and target share one core.
class InProcessTarget {
 public:
  static std::unique_ptr<InProcessTarget> start(Adapter& adapter, const Options& o, const std::string& address,
                                                std::string& error) {
    TargetConfig config;
    SubsystemConfig sub;
    sub.nqn = o.subnqn;
    NamespaceConfig ns;
    ns.nsid = o.nsid;
    if (o.file.empty()) {
      ns.backend = make_ram_backend(o.ram_mb << 20);
    } else {
      FileBackendOptions f;
      f.path = o.file;
      f.create_size = o.file_size_mb << 20;
      auto opened = open_file_backend(f);
      if (auto* e = std::get_if<std::string>(&opened)) return error = "--file: " + *e, nullptr;
      ns.backend = std::get<std::shared_ptr<Backend>>(opened);
    }
    std::printf("%s: in-process target %s namespace %u: %s\n", kTool, o.subnqn.c_str(), o.nsid,
                ns.backend->describe().c_str());
    sub.namespaces.push_back(ns);
    config.subsystems.push_back(sub);
    const std::optional<sockaddr_storage> listen = apps::parse_socket_address(address, o.trsvcid);
    if (!listen) return error = "the target's address '" + address + "'", nullptr;
    config.ports.push_back(PortAddress{listen->ss_family == AF_INET6, address, o.trsvcid});
    config.limits.max_queue_size = 1024;  // -q up to 1024 (the admin queue stays at 32)
    config.limits.max_io_queues = 64;
    if (const std::optional<std::string> problem = NvmfTarget::validate(config)) return error = *problem, nullptr;
    std::unique_ptr<InProcessTarget> t(new InProcessTarget());
    t->target_ = std::make_unique<NvmfTarget>(config);
    t->transport_ = RdmaTransport::start(adapter, *t->target_, {*listen}, error);
    if (!t->transport_) return nullptr;
    t->run_thread();
    return t;
  }
  ~InProcessTarget() {
    stop_thread();
    transport_.reset();  // every queue disconnected first
    target_.reset();
  }
  InProcessTarget(const InProcessTarget&) = delete;
  InProcessTarget& operator=(const InProcessTarget&) = delete;

  void poll_here() { (void)transport_->poll(); }
  void run_thread() {
    stop_ = false;
    thread_ = std::thread([this] {
      for (unsigned idle = 0; !stop_.load(std::memory_order_relaxed);) {
        if (transport_->poll()) {
          idle = 0;
        } else if (++idle > 256) {
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
      }
    });
  }
  void stop_thread() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  [[nodiscard]] const RdmaTransport& transport() const { return *transport_; }
  [[nodiscard]] const NvmfTarget& target() const { return *target_; }

 private:
  InProcessTarget() = default;
  std::unique_ptr<NvmfTarget> target_;
  std::unique_ptr<RdmaTransport> transport_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
};

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count());
}

// The verification pattern: every 8-byte word names its unit, the unit's write generation and its place.
uint64_t pattern_word(uint64_t unit, uint32_t generation, std::size_t word) {
  return ((unit << 24) ^ (uint64_t{generation} * 0x9E3779B97F4A7C15ULL)) + word;
}

struct Slot {
  Sqe sqe{};
  uint8_t* data = nullptr;
  uint64_t unit = 0;
  uint64_t start_ns = 0;
  uint32_t generation = 0;
  bool read = false;
  bool busy = false;
};

struct QueueState {
  HostQueue* queue = nullptr;
  std::vector<Slot> slots;
  uint32_t outstanding = 0;
};

class Workload {
 public:
  Workload(const Options& o, HostController& c, InProcessTarget* target)
      : o_(o), target_(target), blocks_per_io_(o.io_size / c.block_size) {
    const uint64_t span_blocks = o.span_mb != 0 ? std::min(c.blocks, (o.span_mb << 20) / c.block_size) : c.blocks;
    units_ = span_blocks / blocks_per_io_;
    if (o_.verify) {
      generation_.assign(units_, 0);
      unit_busy_.assign(units_, false);
    }
    for (auto& q : c.io_queues()) {
      QueueState s;
      s.queue = q.get();
      s.slots.resize(o.depth);
      for (uint32_t i = 0; i < o.depth; ++i) {
        Slot& slot = s.slots[i];
        slot.data = q->data().data() + std::size_t{i} * o.io_size;
        slot.sqe = host_sqe(0x02, static_cast<uint16_t>(i), o.nsid);
        set_cdw(slot.sqe, 12, blocks_per_io_ - 1);
        set_keyed_sgl(slot.sqe, q->address_of(slot.data), o.io_size, q->remote_key());
      }
      queues_.push_back(std::move(s));
    }
  }

  [[nodiscard]] uint64_t units() const { return units_; }

  // Writes every unit once in order (the pattern -V checks reads against): not measured.
  bool prefill() {
    prefill_ = true;
    const bool ok = phase(Clock::now() + std::chrono::hours(24));
    prefill_ = false;
    return ok;
  }

  // -V after a run that wrote: reads back every unit written, once and in order, and checks it (not measured), so
  // a write-only run is verified too.
  bool read_back() {
    read_back_ = true;
    const bool ok = phase(Clock::now() + std::chrono::hours(24));
    read_back_ = false;
    return ok;
  }
  [[nodiscard]] uint64_t units_written() const {
    return static_cast<uint64_t>(
        std::count_if(generation_.begin(), generation_.end(), [](uint32_t g) { return g != 0; }));
  }

  // Warm-up, then the measurement, then waiting for what is in flight.
  bool measure() {
    const auto start = Clock::now();
    measure_from_ = start + std::chrono::seconds(o_.warmup);
    measure_to_ = measure_from_ + std::chrono::seconds(o_.seconds);
    const bool ok = phase(measure_to_);
    elapsed_s_ = std::chrono::duration<double>(measure_to_ - measure_from_).count();
    return ok;
  }

  void report() const {
    const double iops = static_cast<double>(ios_) / elapsed_s_;
    const double mibs = static_cast<double>(bytes_) / elapsed_s_ / (1 << 20);
    auto us = [](double ns) { return ns / 1000.0; };
    std::printf("%-24s %14s %10s %10s %10s %10s\n", "", "IOPS", "MiB/s", "Average", "min", "max");
    std::printf("%-24s %14.2f %10.2f %10.2f %10.2f %10.2f   (latency in us)\n", "Total", iops, mibs,
                us(histogram_.mean()), us(static_cast<double>(histogram_.min())),
                us(static_cast<double>(histogram_.max())));
    std::printf("Latency percentiles (us):");
    for (const double p : {0.01, 0.10, 0.25, 0.50, 0.75, 0.90, 0.99, 0.999, 0.9999})
      std::printf(" %g%%: %.2f", p * 100, us(static_cast<double>(histogram_.percentile(p))));
    std::printf("\n");
    if (o_.histogram) {
      std::printf("Latency histogram (us): range, count, cumulative\n");
      uint64_t seen = 0;
      for (std::size_t b = 0; b < LatencyHistogram::kBuckets; ++b) {
        const uint64_t n = histogram_.bucket_count(b);
        if (n == 0) continue;
        seen += n;
        const uint64_t low = b == 0 ? 0 : LatencyHistogram::upper_bound(b - 1) + 1;
        std::printf("  %10.3f - %10.3f: %10lu  %7.3f%%\n", us(static_cast<double>(low)),
                    us(static_cast<double>(LatencyHistogram::upper_bound(b))), n,
                    100.0 * static_cast<double>(seen) / static_cast<double>(histogram_.count()));
      }
    }
    std::printf(
        "result: workload=%s io_size=%u depth=%u queues=%u iops=%.2f mib_s=%.2f avg_us=%.3f p50_us=%.3f p99_us=%.3f "
        "p999_us=%.3f max_us=%.3f ios=%lu errors=%lu verified=%lu verify_errors=%lu\n",
        o_.workload.c_str(), o_.io_size, o_.depth, o_.queues, iops, mibs, us(histogram_.mean()),
        us(static_cast<double>(histogram_.percentile(0.5))), us(static_cast<double>(histogram_.percentile(0.99))),
        us(static_cast<double>(histogram_.percentile(0.999))), us(static_cast<double>(histogram_.max())), ios_, errors_,
        verified_, verify_errors_);
    std::fflush(stdout);
  }
  [[nodiscard]] bool clean() const { return errors_ == 0 && verify_errors_ == 0 && ios_ > 0; }

 private:
  // Issues until `stop`, then waits for every command in flight (the timeout per step at most).
  bool phase(Clock::time_point stop) {
    next_unit_ = 0;
    for (QueueState& q : queues_) {
      for (Slot& slot : q.slots) {
        if (!issue(q, slot, Clock::now() < stop)) break;
      }
    }
    std::array<HostCompletion, 32> done;
    Clock::time_point drain_deadline = Clock::time_point::max();
    for (;;) {
      if (target_ != nullptr) target_->poll_here();
      bool any = false;
      const auto now = Clock::now();
      const bool issuing = now < stop && !(sweeping() && next_unit_ >= units_);
      for (QueueState& q : queues_) {
        const std::size_t n = q.queue->poll(done);
        for (std::size_t i = 0; i < n; ++i) {
          any = true;
          if (done[i].cid >= q.slots.size() || !q.slots[done[i].cid].busy) {
            ++errors_;
            complain("a response for command " + std::to_string(done[i].cid) + ", which is not in flight");
            continue;
          }
          Slot& slot = q.slots[done[i].cid];
          complete(q, slot, done[i], now);
          if (issuing) (void)issue(q, slot, true);
        }
        if (q.queue->failed()) return complain("I/O queue " + std::to_string(q.queue->qid()) + " failed");
      }
      const bool idle =
          std::all_of(queues_.begin(), queues_.end(), [](const QueueState& q) { return q.outstanding == 0; });
      if (!issuing && idle) return true;
      if (!issuing && drain_deadline == Clock::time_point::max())
        drain_deadline = now + std::chrono::seconds(o_.timeout_s);
      if (now > drain_deadline)
        return complain("commands still in flight " + std::to_string(o_.timeout_s) + " s after the end");
      if (!any && target_ == nullptr) std::this_thread::yield();
    }
  }

  // Prefill and read-back go through the units in order, once.
  [[nodiscard]] bool sweeping() const { return prefill_ || read_back_; }

  bool issue(QueueState& q, Slot& slot, bool allowed) {
    if (read_back_) {
      while (next_unit_ < units_ && generation_[next_unit_] == 0) ++next_unit_;
    }
    if (!allowed || (sweeping() && next_unit_ >= units_)) return false;
    bool read = read_back_;
    if (!sweeping()) {
      read = o_.pattern == Pattern::kRead ||
             (o_.pattern == Pattern::kMixed && static_cast<uint32_t>(random() % 100) < o_.read_percent);
    }
    uint64_t unit = sweeping() || !o_.random ? next_unit_++ % units_ : random() % units_;
    if (o_.verify) {  // never two commands on one unit: the check would race
      for (uint64_t tries = 0; unit_busy_[unit]; ++tries) {
        if (tries == units_) return false;
        unit = (unit + 1) % units_;
      }
      unit_busy_[unit] = true;
    }
    slot.unit = unit;
    slot.read = read;
    slot.sqe[0] = read ? 0x02 : 0x01;
    const uint64_t slba = unit * blocks_per_io_;
    set_cdw(slot.sqe, 10, static_cast<uint32_t>(slba));
    set_cdw(slot.sqe, 11, static_cast<uint32_t>(slba >> 32));
    if (!read && o_.verify) {
      uint32_t& g = generation_[unit];
      g = g + 1 == 0 ? 1 : g + 1;
      slot.generation = g;
      auto* words = reinterpret_cast<uint64_t*>(slot.data);
      for (std::size_t w = 0; w < o_.io_size / 8; ++w) words[w] = pattern_word(unit, g, w);
    } else if (read && o_.verify) {
      slot.generation = generation_[unit];
    }
    slot.start_ns = now_ns();
    slot.busy = true;
    ++q.outstanding;
    return q.queue->submit(slot.sqe);
  }

  void complete(QueueState& q, Slot& slot, const HostCompletion& c, Clock::time_point now) {
    const uint64_t latency = now_ns() - slot.start_ns;
    slot.busy = false;
    --q.outstanding;
    if (o_.verify) unit_busy_[slot.unit] = false;
    if (c.status != 0) {
      if (errors_++ < 5) {
        complain(std::string(slot.read ? "read" : "write") + " of unit " + std::to_string(slot.unit) + ": " +
                 status_text(c.status));
      }
      return;
    }
    if (slot.read && o_.verify && slot.generation != 0) {
      ++verified_;
      const auto* words = reinterpret_cast<const uint64_t*>(slot.data);
      for (std::size_t w = 0; w < o_.io_size / 8; ++w) {
        if (words[w] == pattern_word(slot.unit, slot.generation, w)) continue;
        if (verify_errors_++ < 5) {
          complain("read of unit " + std::to_string(slot.unit) + " (LBA " + std::to_string(slot.unit * blocks_per_io_) +
                   "): word " + std::to_string(w) + " is not what generation " + std::to_string(slot.generation) +
                   " wrote");
        }
        break;
      }
    }
    if (!prefill_ && now >= measure_from_ && now < measure_to_) {
      ++ios_;
      bytes_ += o_.io_size;
      histogram_.add(latency);
    }
  }

  uint64_t random() {  // xorshift64*
    rng_ ^= rng_ >> 12;
    rng_ ^= rng_ << 25;
    rng_ ^= rng_ >> 27;
    return rng_ * 0x2545F4914F6CDD1DULL;
  }

  const Options& o_;
  InProcessTarget* target_;
  uint32_t blocks_per_io_;
  uint64_t units_ = 0;
  std::vector<QueueState> queues_;
  std::vector<uint32_t> generation_;  // -V: the last generation written to each unit, 0: never
  std::vector<bool> unit_busy_;
  bool prefill_ = false;
  bool read_back_ = false;
  uint64_t next_unit_ = 0;
  uint64_t rng_ = 0x9E3779B97F4A7C15ULL;
  Clock::time_point measure_from_{}, measure_to_{};
  double elapsed_s_ = 1;
  LatencyHistogram histogram_;
  uint64_t ios_ = 0, bytes_ = 0, errors_ = 0, verified_ = 0, verify_errors_ = 0;
};

int run(const Options& o, const config::Config& cfg, std::size_t port, Adapter& adapter) {
  const config::PortConfig& mine = o.in_process ? cfg.ports.front() : cfg.ports[port];
  if (mine.addresses.empty()) return complain("the port has no address"), 2;
  std::string error;
  std::unique_ptr<InProcessTarget> target;
  std::string traddr = o.traddr;
  if (o.in_process) {
    if (cfg.ports.size() < 2 || cfg.ports.back().addresses.empty()) {
      return complain(
                 "--in-process needs two ports with addresses (the initiator uses the first, the target the last)"),
             2;
    }
    if (traddr.empty()) traddr = apps::ip_text(cfg.ports.back().addresses.front());
    if (!(target = InProcessTarget::start(adapter, o, traddr, error))) return complain(error), 1;
  }
  HostControllerOptions h;
  h.source = apps::to_sockaddr(mine.addresses.front());
  const std::optional<sockaddr_storage> destination = apps::parse_socket_address(traddr, o.trsvcid);
  if (!destination) return complain("-r traddr '" + traddr + "' is not an IP address"), 2;
  h.target = *destination;
  h.subnqn = o.subnqn;
  if (!o.hostnqn.empty()) h.hostnqn = o.hostnqn;
  h.nsid = o.nsid;
  h.kato_ms = o.kato_ms;
  h.io_queues = o.queues;
  h.io_entries = static_cast<uint16_t>(std::max<uint32_t>(o.depth, 2));  // SQSIZE is at least 1 (0's based)
  h.io_data_bytes = std::size_t{o.depth} * o.io_size;
  h.timeout = std::chrono::seconds(o.timeout_s);
  int status = 0;
  {
    std::unique_ptr<HostController> controller = HostController::connect(adapter, h, error);
    if (!controller) {
      complain(error);
      status = 1;
    } else {
      std::printf("%s: %s nsid %u at %s port %u: %lu blocks of %u bytes (%lu MiB), model '%s', max transfer %lu KiB\n",
                  kTool, o.subnqn.c_str(), o.nsid, traddr.c_str(), o.trsvcid, controller->blocks,
                  controller->block_size, controller->blocks * controller->block_size >> 20, controller->model.c_str(),
                  controller->max_transfer >> 10);
      std::fflush(stdout);
      if (o.io_size % controller->block_size != 0 ||
          (controller->max_transfer != 0 && o.io_size > controller->max_transfer)) {
        complain("-o " + std::to_string(o.io_size) + ": a multiple of the block size " +
                 std::to_string(controller->block_size) + " within the controller's maximum transfer");
        status = 2;
      } else {
        if (target) target->stop_thread();  // this thread polls it from here on
        Workload work(o, *controller, target.get());
        if (work.units() < uint64_t{o.depth} * o.queues && o.verify) {
          complain("-V: the span holds fewer I/O units than commands in flight");
          status = 2;
        } else if (work.units() == 0) {
          complain("the namespace (or --span-mb) is smaller than one I/O");
          status = 2;
        } else {
          std::printf("workload: %s, %u bytes, queue depth %u on %u queue%s, %lu s (+%lu s warm-up)%s\n",
                      o.workload.c_str(), o.io_size, o.depth, o.queues, o.queues == 1 ? "" : "s", o.seconds, o.warmup,
                      o.verify ? ", verified" : "");
          std::fflush(stdout);
          bool ok = true;
          if (o.verify && o.pattern != Pattern::kWrite) ok = work.prefill();
          ok = ok && work.measure();
          if (ok && o.verify && o.pattern != Pattern::kRead) {
            const uint64_t written = work.units_written();
            ok = work.read_back();
            std::printf("verify: read back the %lu unit%s written and checked them\n", written,
                        written == 1 ? "" : "s");
          }
          work.report();
          status = ok && work.clean() ? 0 : 1;
        }
        if (target) target->run_thread();  // for the disconnects
      }
    }
  }
  if (target) {
    const TransportCounters& c = target->transport().counters();
    const TargetCounters& t = target->target().counters();
    std::printf(
        "%s: target: queues accepted %lu, closed %lu; capsules %lu; RDMA READs %lu, WRITEs %lu; commands %lu, "
        "errors %lu\n",
        kTool, c.queues_accepted, c.queues_closed, c.capsules, c.rdma_reads, c.rdma_writes, t.commands, t.errors);
    target.reset();
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<apps::ConfigOptions> config_options = apps::take_config_options(argc, argv, kTool);
  if (!config_options) return 2;
  const std::optional<Options> options = parse(argc, argv);
  if (!options) return 2;
  const std::optional<apps::ToolConfig> tool =
      apps::load_tool_config(*config_options, !options->in_process, kTool, {"nvmf"});
  if (!tool) return 2;
  Adapter* adapter = nullptr;
  if (const NTSTATUS s = NdkOpenAdapter(tool->config, kNdkVersion, &adapter); s != STATUS_SUCCESS) {
    std::fprintf(stderr, "%s: NdkOpenAdapter: %s\n", kTool, NdkStatusName(s));
    return 1;
  }
  const int status = run(*options, tool->config, tool->port, *adapter);
  if (options->wait_pid != 0) {
    // Two processes over net_memif: stop polling, then let the target close its end before we close ours.
    adapter->UroceStopPolling();
    std::printf("%s: engines stopped; waiting for process %d to end\n", kTool, options->wait_pid);
    std::fflush(stdout);
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (::kill(options->wait_pid, 0) == 0 && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  NdkCloseAdapter(adapter);
  return status;
}
