// uroce_bench_qp_scale: many QPs on one engine (issue #14, exhaustion). What a QP costs in memory, and the
// aggregate 64 B RDMA WRITE rate with N QPs active against one QP, as a ratio measured in the same run. Method and
// figures: README.md "qp_scale".
//
//   uroce_bench_qp_scale [--qps=10000] [--window=2] [--seconds=1] [--reps=3]
//
// One Dataplane with one busy-polling engine on the last CPU this process may use; ports a and b of the ring link
// both on it. N QPs = N/2 connected pairs (A on port a, B on port b). Every A runs bench_loads' WriteLoad (64 B
// WRITEs, `window` outstanding, every one signalled) and one poller drives them all; the B side answers. The
// baseline is one pair with WriteLoad's window of 128 and the same signalling, A B A B with the N-QP runs.
// Memory per QP: the process's RSS and DPDK's heap before and after creating and connecting the N QPs, less the
// application queues this bench allocates for them (counted exactly), divided by N.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <rte_malloc.h>

#include "bench/bench_loads.h"
#include "dataplane/dataplane.h"
#include "dataplane/rc_transport.h"

namespace uroce::bench {
namespace {

using Clock = std::chrono::steady_clock;
using dataplane::Dataplane;
using dataplane::RcTransport;

constexpr uint32_t kPd = 1;
constexpr uint32_t kSize = 64;
constexpr uint32_t kPairSendQueue = 8;  // app SQ slots per A (a window of a few)
constexpr uint32_t kBaselineWindow = 128;

struct Options {
  uint32_t qps = 10000;
  uint32_t window = 2;
  double seconds = 1.0;
  double warmup = 0.3;
  unsigned reps = 3;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(
      stderr, "uroce_bench_qp_scale: %s\nusage: uroce_bench_qp_scale [--qps=N] [--window=W] [--seconds=S] [--reps=R]\n",
      why);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&](std::string_view key) -> const char* {
      return a.starts_with(key) ? argv[i] + key.size() : nullptr;
    };
    if (const char* v = value("--qps=")) {
      o.qps = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
    } else if (const char* v = value("--window=")) {
      o.window = static_cast<uint32_t>(std::strtoul(v, nullptr, 10));
    } else if (const char* v = value("--seconds=")) {
      o.seconds = std::strtod(v, nullptr);
    } else if (const char* v = value("--reps=")) {
      o.reps = static_cast<unsigned>(std::strtoul(v, nullptr, 10));
    } else {
      usage(("unknown argument " + std::string(a)).c_str());
    }
  }
  if (o.qps < 2 || o.qps % 2 != 0) usage("--qps must be even and at least 2");
  if (o.window == 0 || o.window > kPairSendQueue) usage("--window must be 1..8");
  if (o.seconds <= 0 || o.reps == 0) usage("--seconds and --reps must be positive");
  return o;
}

uint64_t rss_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.starts_with("VmRSS:")) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  return 0;
}

uint64_t dpdk_heap_bytes() {
  rte_malloc_socket_stats stats{};
  uint64_t total = 0;
  for (int socket = 0; socket < RTE_MAX_NUMA_NODES; ++socket)
    if (rte_malloc_get_socket_stats(socket, &stats) == 0) total += stats.heap_allocsz_bytes;
  return total;
}

// One side of a pair: its QP and the application's queues, sized for a small window.
struct Endpoint {
  explicit Endpoint(uint32_t sq) : sq(sq), scq(sq * 2) {}
  dataplane::SendQueue sq;
  dataplane::ReceiveQueue rq{2};
  dataplane::CompletionQueue scq;
  dataplane::CompletionQueue rcq{2};
  dataplane::RcQueuePair* qp = nullptr;
  static std::size_t app_bytes(uint32_t sq) {
    return sq * sizeof(proto::SendWqe) + 2 * sizeof(proto::RecvWqe) + (sq * 2 + 2) * sizeof(dataplane::CompletionEntry);
  }
};

// Every A's WriteLoad from one poller (kMaxPollers could not hold thousands), through one send CQ that all the
// A's share, as an application with thousands of QPs shares its CQs: each poll drains that CQ and lets only the
// loads that got a completion post again, so the driver costs O(messages), not O(QPs), per loop iteration.
class ManyLoads {
 public:
  static constexpr unsigned kLoadShift = 40;  // a WRITE's context: load index << kLoadShift | its WRITE index
  explicit ManyLoads(dataplane::CompletionQueue& shared_cq) : cq_(shared_cq) {}
  void add(WriteLoadSetup setup) {
    setup.send_cq = &cq_;
    setup.context_base = uint64_t{loads_.size()} << kLoadShift;
    loads_.push_back(std::make_unique<WriteLoad>(setup));
    ready_.reserve(loads_.size());
    queued_.push_back(0);
  }
  [[nodiscard]] dataplane::Poller poller() { return dataplane::Poller{&ManyLoads::poll, this}; }
  [[nodiscard]] uint64_t completed() const {
    uint64_t n = 0;
    for (const auto& l : loads_) n += l->completed();
    return n;
  }
  void stop() {
    for (auto& l : loads_) l->stop();
  }
  [[nodiscard]] bool drained() const {
    return std::all_of(loads_.begin(), loads_.end(), [](const auto& l) { return l->drained(); });
  }
  [[nodiscard]] bool failed() const {
    return std::any_of(loads_.begin(), loads_.end(),
                       [](const auto& l) { return l->failure() != proto::CompletionStatus::kSuccess; });
  }
  // Which loads failed, and with what completion status (proto::CompletionStatus, ibv_wc_status numbering).
  [[nodiscard]] std::string failure_text() const {
    std::size_t n = 0;
    int status = 0;
    for (const auto& l : loads_) {
      if (l->failure() == proto::CompletionStatus::kSuccess) continue;
      if (n++ == 0) status = static_cast<int>(l->failure());
    }
    return std::to_string(n) + " of " + std::to_string(loads_.size()) + " QPs had a WRITE fail (first status " +
           std::to_string(status) + ")";
  }

 private:
  static bool poll(void* self, dataplane::EngineContext&) {
    auto& m = *static_cast<ManyLoads*>(self);
    if (!m.started_) {  // the first poll fills every window
      m.started_ = true;
      for (auto& l : m.loads_) l->post_more();
      return true;
    }
    bool worked = false;
    while (const dataplane::CompletionEntry* e = m.cq_.peek()) {
      const auto index = static_cast<std::size_t>(e->completion.context >> kLoadShift);
      m.loads_[index]->complete(*e);
      m.cq_.pop();
      if (m.queued_[index] == 0) {
        m.queued_[index] = 1;
        m.ready_.push_back(index);
      }
      worked = true;
    }
    if (!worked) return false;
    m.cq_.publish_consumed();
    for (const std::size_t index : m.ready_) {
      m.loads_[index]->post_more();
      m.queued_[index] = 0;
    }
    m.ready_.clear();
    return true;
  }
  dataplane::CompletionQueue& cq_;
  std::vector<std::unique_ptr<WriteLoad>> loads_;
  std::vector<std::size_t> ready_;  // loads with a completion this poll, each once
  std::vector<uint8_t> queued_;     // [load]: in ready_
  bool started_ = false;
};

class Bench {
 public:
  explicit Bench(const Options& o)
      : options_(o), buffer_(static_cast<uint8_t*>(std::aligned_alloc(4096, 1 << 20)), &std::free) {
    std::memset(buffer_.get(), 0x5a, 1 << 20);
  }
  ~Bench() {
    destroy(pairs_);
    destroy(baseline_);
    transport_.reset();
    if (dataplane_) dataplane_->stop();
  }

  bool start() {
    config::Config c;
    c.eal.lcores = {last_allowed_cpu()};
    c.eal.hugepages = config::HugePages::kAuto;
    c.eal.memory_mb = 768;
    c.engine.idle = config::IdlePolicy::kBusyPoll;
    c.engine.mbufs_per_engine = 32767;
    c.engine.mbuf_cache = 256;
    c.engine.max_qps_per_engine = options_.qps + 8;
    add_ring_link_ports(c);
    auto dp = Dataplane::start(c);
    if (!dp.ok()) return fail("Dataplane::start: " + dp.error());
    dataplane_ = std::move(dp.value());
    auto t = RcTransport::start(*dataplane_);
    if (!t.ok()) return fail("RcTransport::start: " + t.error());
    transport_ = std::move(t.value());
    constexpr uint32_t kAll = proto::kAccessLocalWrite | proto::kAccessRemoteWrite | proto::kAccessRemoteRead;
    auto token = transport_->register_memory(reinterpret_cast<uint64_t>(buffer_.get()), 1 << 20, kAll, kPd);
    if (!token.ok()) return fail("register_memory: " + token.error());
    token_ = token.value();
    return connect(baseline_, 2, kBaselineWindow, baseline_cq_);
  }

  // Creates and connects the N QPs; returns the bytes per QP (RSS and DPDK heap, less the app queues).
  bool make_many(double& bytes_per_qp, double& app_bytes_per_qp) {
    const uint64_t rss0 = rss_bytes(), heap0 = dpdk_heap_bytes();
    if (!connect(pairs_, options_.qps, kPairSendQueue, pairs_cq_)) return false;
    const uint64_t rss1 = rss_bytes(), heap1 = dpdk_heap_bytes();
    app_bytes_per_qp = static_cast<double>(Endpoint::app_bytes(kPairSendQueue));
    bytes_per_qp = static_cast<double>((rss1 - rss0) + (heap1 - heap0)) / options_.qps - app_bytes_per_qp;
    return true;
  }

  // Messages per second over `seconds`, all A's of `side` writing `window` each.
  double run(std::vector<std::unique_ptr<Endpoint>>& side, uint32_t window, bool& ok) {
    ManyLoads loads(&side == &pairs_ ? *pairs_cq_ : *baseline_cq_);
    for (std::size_t i = 0; i < side.size(); i += 2) {
      WriteLoadSetup s;
      s.transport = transport_.get();
      s.qp = side[i]->qp;
      s.send_queue = &side[i]->sq;
      s.wqe.op = proto::WorkOp::kRdmaWrite;
      s.wqe.num_sge = 1;
      s.wqe.length = kSize;
      s.wqe.sge[0] = {reinterpret_cast<uint64_t>(buffer_.get()), kSize, proto::LocalToken{token_}};
      s.wqe.remote_addr = reinterpret_cast<uint64_t>(buffer_.get()) + 4096 + (i / 2 % 256) * kSize;
      s.wqe.rkey = proto::RemoteToken{token_};
      s.window = window;
      s.signal_every = 1;
      loads.add(s);
    }
    dataplane::Engine& engine = dataplane_->engine(0);
    ok = engine.add_poller(loads.poller()).ok();
    if (!ok) return 0;
    sleep(options_.warmup);
    const auto t0 = Clock::now();
    const uint64_t m0 = loads.completed();
    sleep(options_.seconds);
    const uint64_t m1 = loads.completed();
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    loads.stop();
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (!loads.drained() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const bool drained = loads.drained(), failed = loads.failed();
    ok = engine.remove_poller(&loads).ok() && drained && !failed;  // removed in any case: `loads` goes away here
    if (!drained || failed) {
      std::fprintf(stderr, "uroce_bench_qp_scale: %s\nengine counters:",
                   failed ? loads.failure_text().c_str() : "not drained in 30 s");
      for (const auto& [name, value] : dataplane::counter_values(engine.counters()))
        if (value != 0) std::fprintf(stderr, " %s=%llu", name.c_str(), static_cast<unsigned long long>(value));
      std::fprintf(stderr, "\n");
    }
    return static_cast<double>(m1 - m0) / seconds;
  }

  std::vector<std::unique_ptr<Endpoint>>& pairs() { return pairs_; }
  std::vector<std::unique_ptr<Endpoint>>& baseline() { return baseline_; }

 private:
  static void sleep(double seconds) { std::this_thread::sleep_for(std::chrono::duration<double>(seconds)); }
  static bool fail(const std::string& why) {
    std::fprintf(stderr, "uroce_bench_qp_scale: %s\n", why.c_str());
    return false;
  }

  // `qps` endpoints, [2k] on port a and [2k + 1] on port b, connected to each other.
  // The A's (even indices) complete into `shared_cq`, made big enough for every SQ slot of theirs.
  bool connect(std::vector<std::unique_ptr<Endpoint>>& out, uint32_t qps, uint32_t send_queue,
               std::unique_ptr<dataplane::CompletionQueue>& shared_cq) {
    shared_cq = std::make_unique<dataplane::CompletionQueue>(std::bit_ceil((qps / 2 + 1) * send_queue));
    for (uint32_t i = 0; i < qps; ++i) {
      auto e = std::make_unique<Endpoint>(send_queue);
      dataplane::RcQueuePairSetup setup;
      setup.port = static_cast<dataplane::PortIndex>(i % 2);
      setup.pd = kPd;
      setup.send_queue = &e->sq;
      setup.receive_queue = &e->rq;
      setup.send_cq = i % 2 == 0 ? shared_cq.get() : &e->scq;
      setup.receive_cq = &e->rcq;
      auto qp = transport_->create_qp(0, setup);
      if (!qp.ok()) return fail("create_qp " + std::to_string(i) + ": " + qp.error());
      e->qp = qp.value();
      out.push_back(std::move(e));
    }
    for (uint32_t i = 0; i < qps; ++i) {
      Endpoint& self = *out[i];
      const Endpoint& peer = *out[i ^ 1];
      const std::size_t peer_port = (i ^ 1) % 2;
      dataplane::RcPeer remote;
      remote.qpn = peer.qp->qpn();
      remote.psn = proto::Psn{0x1000};
      remote.ip = dataplane_->config().ports[peer_port].addresses.front();
      remote.mac = dataplane_->port(static_cast<dataplane::PortIndex>(peer_port)).mac;
      remote.path_mtu = 1024;
      proto::RcQpAttributes attrs;
      attrs.send_psn = proto::Psn{0x1000};
      attrs.path_mtu = 1024;
      if (const dataplane::Status s = transport_->connect(*self.qp, remote, attrs); !s.ok())
        return fail("connect: " + s.message());
    }
    return true;
  }

  void destroy(std::vector<std::unique_ptr<Endpoint>>& side) {
    for (auto& e : side)
      if (e->qp != nullptr) (void)transport_->destroy_qp(e->qp);
    side.clear();
  }

  Options options_;
  std::unique_ptr<uint8_t, decltype(&std::free)> buffer_{nullptr, &std::free};
  uint32_t token_ = 0;
  std::unique_ptr<Dataplane> dataplane_;
  std::unique_ptr<RcTransport> transport_;
  std::vector<std::unique_ptr<Endpoint>> baseline_;                     // one pair
  std::unique_ptr<dataplane::CompletionQueue> pairs_cq_, baseline_cq_;  // the A's send CQ of each side
  std::vector<std::unique_ptr<Endpoint>> pairs_;                        // N QPs
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 != 0 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string name, family, model;
  for (std::string line; std::getline(cpuinfo, line);) {
    auto take = [&](std::string_view key, std::string& into) {
      if (into.empty() && line.starts_with(key)) into = line.substr(line.find(':') + 2);
    };
    take("model name", name);
    take("cpu family", family);
    take("model\t", model);
  }
  return name + " (family " + family + ", model " + model + ")";
}

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  Bench bench(o);
  if (!bench.start()) return 1;
  double bytes_per_qp = 0, app_bytes_per_qp = 0;
  if (!bench.make_many(bytes_per_qp, app_bytes_per_qp)) return 1;
  std::printf(
      "uroce_bench_qp_scale: %s; one engine; %u QPs (%u pairs, window %u each, every WRITE signalled) "
      "against 1 pair with window %u; 64 B WRITEs; %u x %.1f s A B\n",
      cpu_model().c_str(), o.qps, o.qps / 2, o.window, kBaselineWindow, o.reps, o.seconds);
  std::printf(
      "memory per QP: %.0f bytes of uroce's (RSS + DPDK heap), besides this bench's %.0f bytes of "
      "application queues per QP\n",
      bytes_per_qp, app_bytes_per_qp);
  std::vector<double> one, many, ratio;
  for (unsigned r = 0; r < o.reps; ++r) {
    bool ok_one = false, ok_many = false;
    const double a = bench.run(bench.baseline(), kBaselineWindow, ok_one);
    const double b = bench.run(bench.pairs(), o.window, ok_many);
    if (!ok_one || !ok_many) {
      std::fprintf(stderr, "uroce_bench_qp_scale: a run failed (a WRITE completed in error or did not drain)\n");
      return 1;
    }
    one.push_back(a);
    many.push_back(b);
    ratio.push_back(b / a);
    std::printf("  rep %u  1 pair %.3f Mmsg/s   %u QPs %.3f Mmsg/s   ratio %.3f\n", r, a / 1e6, o.qps, b / 1e6, b / a);
  }
  std::printf("median: 1 pair %.3f Mmsg/s, %u QPs %.3f Mmsg/s, ratio %.3f [%.3f .. %.3f]\n", median(one) / 1e6, o.qps,
              median(many) / 1e6, median(ratio), *std::min_element(ratio.begin(), ratio.end()),
              *std::max_element(ratio.begin(), ratio.end()));
  return 0;
}

}  // namespace
}  // namespace uroce::bench

int main(int argc, char** argv) { return uroce::bench::run(argc, argv); }
