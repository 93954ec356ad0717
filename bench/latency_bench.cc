// uroce_bench_latency: the half round trip of a 64-byte message between two cores, uroce against a raw
// net_ring ping-pong on the same two engine cores in the same run (A B A B ...). Issue #12 part 6; method and
// figures: README.md "latency".
//
//   uroce_bench_latency [--size=64] [--seconds=1] [--warmup=0.2] [--reps=5]
//
// One Dataplane with two busy-polling engines, on the first and the last CPU this process may use. Both
// contenders run as pollers inside the engines' own loops, so the only thing that differs is what a message
// goes through:
//   uroce  QP A on engine 0 (port a) RDMA WRITEs SIZE bytes into B's buffer; the poller on engine 1, which owns
//          QP B (port b), sees the last 8 bytes change and WRITEs them back; A's poller sees them come back.
//          Request, ACK and data placement are the RC transport's own (header templates, ICRC, PSN checks),
//          and a packet that lands on the other engine's RX queue takes the redirect ring, as on a NIC.
//   raw    the same two engines exchange one SIZE-payload frame over their own net_ring pair (42-byte headers,
//          the payload copied in before TX and out after RX, as a receiver writing into memory would).
// Half round trip = (time from posting to seeing the answer) / 2, taken with the TSC on engine 0 for every
// exchange; each sample is the median of one timed run. Prints medians of the reps, p99, and uroce / raw.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <sched.h>

#include "bench/bench_loads.h"
#include "dataplane/dataplane.h"
#include "dataplane/rc_transport.h"

namespace uroce::bench {
namespace {

using Clock = std::chrono::steady_clock;
using dataplane::Dataplane;
using dataplane::RcTransport;

constexpr std::size_t kBufferSize = std::size_t{64} * 1024;
constexpr uint32_t kQueueSize = 256;
constexpr uint32_t kSignalEvery = 16;  // one signaled WRITE in 16 frees the SQ slots
constexpr uint32_t kPd = 1;
constexpr std::size_t kMaxSamples = std::size_t{1} << 24;
constexpr std::size_t kRawHeader = 42;

struct Options {
  uint32_t size = 64;
  double seconds = 1.0;
  double warmup = 0.2;
  unsigned reps = 5;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "%s\nusage: uroce_bench_latency [--size=8..1024] [--seconds=S] [--warmup=S] [--reps=N]\n", why);
  std::exit(2);  // NOLINT(concurrency-mt-unsafe): argument parsing, before any thread starts
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const auto value = [&](std::string_view key) -> std::optional<std::string> {
      if (a.substr(0, key.size() + 1) != std::string(key) + "=") return std::nullopt;
      return std::string(a.substr(key.size() + 1));
    };
    if (auto v = value("--size")) {
      o.size = static_cast<uint32_t>(std::strtoul(v->c_str(), nullptr, 0));
    } else if (auto v = value("--seconds")) {
      o.seconds = std::strtod(v->c_str(), nullptr);
    } else if (auto v = value("--warmup")) {
      o.warmup = std::strtod(v->c_str(), nullptr);
    } else if (auto v = value("--reps")) {
      o.reps = static_cast<unsigned>(std::max(1ul, std::strtoul(v->c_str(), nullptr, 0)));
    } else if (a == "--help" || a == "-h") {
      usage(
          "uroce_bench_latency: 64 B half round trip, uroce RC WRITE ping-pong against raw net_ring (bench/README.md)");
    } else {
      usage(("unknown argument: " + std::string(a)).c_str());
    }
  }
  if (o.size < 8 || o.size > 1024) usage("--size must be 8..1024 (one packet at PMTU 1024)");
  if (o.seconds <= 0 || o.warmup < 0) usage("--seconds must be positive and --warmup not negative");
  return o;
}

// Round trips in TSC cycles, recorded by the engine that starts the exchanges. The vector is sized before the
// poller starts (no allocation on the engine); samples past its capacity are dropped.
class Samples {
 public:
  Samples() { cycles_.reserve(kMaxSamples); }
  void add(uint64_t cycles) noexcept {
    if (cycles_.size() < cycles_.capacity()) cycles_.push_back(cycles);
  }
  void reset() noexcept { cycles_.clear(); }
  // Half round trips in ns at quantile q (0..1); call only with the poller stopped.
  [[nodiscard]] double half_rtt_ns(double q) const {
    if (cycles_.empty()) return 0;
    std::vector<uint64_t> sorted = cycles_;
    const auto at = static_cast<std::size_t>(q * static_cast<double>(sorted.size() - 1));
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(at), sorted.end());
    return static_cast<double>(sorted[at]) * 1e9 / static_cast<double>(rte_get_tsc_hz()) / 2;
  }
  [[nodiscard]] std::size_t size() const noexcept { return cycles_.size(); }

 private:
  std::vector<uint64_t> cycles_;
};

uint64_t load_word(const uint8_t* p) noexcept {
  uint64_t v = 0;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

void store_word(uint8_t* p, uint64_t v) noexcept { std::memcpy(p, &v, sizeof(v)); }

// ---------------------------------------------------------------------------------------------------- uroce

struct Endpoint {
  dataplane::SendQueue sq{kQueueSize};
  dataplane::ReceiveQueue rq{16};
  dataplane::CompletionQueue scq{kQueueSize * 2};
  dataplane::CompletionQueue rcq{16};
  dataplane::RcQueuePair* qp = nullptr;
  std::unique_ptr<uint8_t, decltype(&std::free)> src{static_cast<uint8_t*>(std::aligned_alloc(4096, kBufferSize)),
                                                     &std::free};
  std::unique_ptr<uint8_t, decltype(&std::free)> dst{static_cast<uint8_t*>(std::aligned_alloc(4096, kBufferSize)),
                                                     &std::free};
  uint32_t src_token = 0, dst_token = 0;
};

// One side of the RDMA WRITE ping-pong, as an engine poller. The sequence number travels in the message's last
// 8 bytes: the responder places a WRITE's payload in order, and the poller runs on the engine that placed it,
// so when it reads the new number every byte before it is there too.
class WritePingPong {
 public:
  WritePingPong(RcTransport& transport, Endpoint& self, const Endpoint& peer, uint32_t size, bool starts,
                Samples* samples)
      : transport_(transport), self_(self), size_(size), starts_(starts), samples_(samples) {
    proto::SendWqe wqe;
    wqe.op = proto::WorkOp::kRdmaWrite;
    wqe.num_sge = 1;
    wqe.length = size;
    wqe.sge[0] = {reinterpret_cast<uint64_t>(self.src.get()), size, proto::LocalToken{self.src_token}};
    wqe.remote_addr = reinterpret_cast<uint64_t>(peer.dst.get());
    wqe.rkey = proto::RemoteToken{peer.dst_token};
    for (uint32_t i = 0; i < self.sq.capacity(); ++i) self.sq.slot(i) = wqe;
  }

  [[nodiscard]] dataplane::Poller poller() { return dataplane::Poller{&WritePingPong::poll, this}; }
  void stop() noexcept { stop_.store(true, std::memory_order_relaxed); }
  [[nodiscard]] bool idle() const noexcept { return idle_.load(std::memory_order_acquire); }
  [[nodiscard]] bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }

 private:
  static bool poll(void* self, dataplane::EngineContext&) { return static_cast<WritePingPong*>(self)->step(); }

  void post(uint64_t sequence) noexcept {
    store_word(self_.src.get() + size_ - 8, sequence);
    dataplane::SendQueue& sq = self_.sq;
    const uint32_t tail = sq.producer_tail();
    ++posted_;
    sq.slot(tail).context = posted_;
    sq.slot(tail).flags = posted_ % kSignalEvery == 0 ? uint8_t{proto::kWqeSignaled} : uint8_t{0};
    sq.publish_tail(tail + 1);
    transport_.ring_doorbell(*self_.qp);
  }

  bool step() noexcept {
    bool worked = false;
    dataplane::CompletionQueue& cq = self_.scq;
    while (const dataplane::CompletionEntry* e = cq.peek()) {
      if (e->completion.status != proto::CompletionStatus::kSuccess) failed_.store(true, std::memory_order_release);
      cq.pop();
      worked = true;
    }
    if (worked) cq.publish_consumed();
    const uint64_t seen = load_word(self_.dst.get() + size_ - 8);
    const bool stopping = stop_.load(std::memory_order_relaxed);
    if (starts_) {
      if (outstanding_ && seen == sequence_) {
        samples_->add(rte_rdtsc() - started_at_);
        outstanding_ = false;
        worked = true;
      }
      if (!outstanding_ && !stopping && !failed_.load(std::memory_order_relaxed)) {
        ++sequence_;
        started_at_ = rte_rdtsc();
        post(sequence_);
        outstanding_ = true;
        worked = true;
      }
    } else if (seen != sequence_) {
      sequence_ = seen;
      post(seen);
      worked = true;
    }
    idle_.store(stopping && !outstanding_, std::memory_order_release);
    return worked;
  }

  RcTransport& transport_;
  Endpoint& self_;
  const uint32_t size_;
  const bool starts_;
  Samples* const samples_;
  // Engine-only.
  uint64_t sequence_ = 0;
  uint64_t posted_ = 0;
  uint64_t started_at_ = 0;
  bool outstanding_ = false;
  // Shared with the control thread.
  std::atomic<bool> stop_{false};
  std::atomic<bool> idle_{false};
  std::atomic<bool> failed_{false};
};

// ------------------------------------------------------------------------------------------------------ raw

// One side of the raw ping-pong on its own net_ring port: the starter sends a frame and waits for it to come
// back; the other copies each frame's payload out, copies its own payload in, and sends the frame back.
class RawPingPong {
 public:
  RawPingPong(uint16_t port, rte_mempool* pool, uint32_t size, bool starts, Samples* samples)
      : port_(port), pool_(pool), size_(size), starts_(starts), samples_(samples), src_(size, 0x5a), dst_(size) {}

  [[nodiscard]] dataplane::Poller poller() { return dataplane::Poller{&RawPingPong::poll, this}; }
  void stop() noexcept { stop_.store(true, std::memory_order_relaxed); }
  [[nodiscard]] bool idle() const noexcept { return idle_.load(std::memory_order_acquire); }

 private:
  static bool poll(void* self, dataplane::EngineContext&) { return static_cast<RawPingPong*>(self)->step(); }

  bool send(rte_mbuf* m) noexcept {
    auto* frame = rte_pktmbuf_mtod(m, uint8_t*);
    std::memset(frame, 0, kRawHeader);
    std::memcpy(frame + kRawHeader, src_.data(), size_);
    m->data_len = static_cast<uint16_t>(kRawHeader + size_);
    m->pkt_len = m->data_len;
    if (rte_eth_tx_burst(port_, 0, &m, 1) == 1) return true;
    rte_pktmbuf_free(m);
    return false;
  }

  bool step() noexcept {
    bool worked = false;
    rte_mbuf* m = nullptr;
    const bool stopping = stop_.load(std::memory_order_relaxed);
    if (rte_eth_rx_burst(port_, 0, &m, 1) == 1) {
      std::memcpy(dst_.data(), rte_pktmbuf_mtod_offset(m, const uint8_t*, kRawHeader), size_);
      worked = true;
      if (starts_) {
        samples_->add(rte_rdtsc() - started_at_);
        outstanding_ = false;
        rte_pktmbuf_free(m);
      } else {
        (void)send(m);
      }
    }
    if (starts_ && !outstanding_ && !stopping) {
      if (rte_mbuf* fresh = rte_pktmbuf_alloc(pool_)) {
        started_at_ = rte_rdtsc();
        outstanding_ = send(fresh);
        worked = true;
      }
    }
    idle_.store(stopping && !outstanding_, std::memory_order_release);
    return worked;
  }

  const uint16_t port_;
  rte_mempool* const pool_;
  const uint32_t size_;
  const bool starts_;
  Samples* const samples_;
  std::vector<uint8_t> src_, dst_;
  uint64_t started_at_ = 0;
  bool outstanding_ = false;
  std::atomic<bool> stop_{false};
  std::atomic<bool> idle_{false};
};

// ---------------------------------------------------------------------------------------------------- setup

std::vector<unsigned> engine_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<unsigned> allowed;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (unsigned c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) allowed.push_back(c);
    }
  }
  if (allowed.size() < 2) return {};
  return {allowed.front(), allowed.back()};
}

config::Config make_config(const std::vector<unsigned>& cpus) {
  config::Config c;
  c.eal.lcores = cpus;  // engine 0 on the first CPU, engine 1 on the last; the control thread mostly sleeps
  c.eal.hugepages = config::HugePages::kAuto;
  c.eal.memory_mb = 512;
  c.engine.idle = config::IdlePolicy::kBusyPoll;
  c.engine.max_qps_per_engine = 16;
  add_ring_link_ports(c);
  return c;
}

std::string cpu_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, model, family, number;
  while (std::getline(in, line) && (model.empty() || family.empty() || number.empty())) {
    const auto colon = line.find(':');
    if (colon == std::string::npos || colon + 2 > line.size()) continue;
    const std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    const std::string value = line.substr(colon + 2);
    if (key == "model name" && model.empty()) model = value;
    if (key == "cpu family" && family.empty()) family = value;
    if (key == "model" && number.empty()) number = value;
  }
  return model + " (family " + family + ", model " + number + ")";
}

struct Sample {
  double median_ns = 0, p99_ns = 0;
  std::size_t exchanges = 0;
  bool ok = false;
};

class Bench {
 public:
  explicit Bench(const Options& o) : options_(o) {}

  bool start() {
    const std::vector<unsigned> cpus = engine_cpus();
    if (cpus.empty()) return fail("needs two CPUs it may run on (one per engine)");
    auto dp = Dataplane::start(make_config(cpus));
    if (!dp.ok()) return fail("Dataplane::start: " + dp.error());
    dataplane_ = std::move(dp.value());
    auto t = RcTransport::start(*dataplane_);
    if (!t.ok()) return fail("RcTransport::start: " + t.error());
    transport_ = std::move(t.value());
    auto raw = make_raw_ring_pair(dataplane_->pool(0));
    if (!raw.ok()) return fail(raw.error());
    raw_ = raw.value();
    std::printf(
        "uroce_bench_latency: %s; engines on CPUs %u and %u; %u B, %u x (%.2f s + %.2f s warm-up) per "
        "contender, A/B interleaved\n",
        cpu_name().c_str(), cpus[0], cpus[1], options_.size, options_.reps, options_.seconds, options_.warmup);
    return true;
  }

  ~Bench() {
    transport_.reset();
    if (dataplane_) dataplane_->stop();
  }

  Sample run_uroce() {
    Endpoint a, b;
    if (!connect(a, b)) return {};
    samples_.reset();
    WritePingPong ping(*transport_, a, b, options_.size, true, &samples_);
    WritePingPong pong(*transport_, b, a, options_.size, false, nullptr);
    Sample s = timed(ping, pong, [&] { samples_.reset(); });
    if (ping.failed() || pong.failed()) {
      std::fprintf(stderr, "uroce: a WRITE completed with an error\n");
      s.ok = false;
    }
    for (Endpoint* e : {&a, &b}) (void)transport_->destroy_qp(e->qp);
    for (Endpoint* e : {&a, &b}) {
      (void)transport_->deregister_memory(e->src_token);
      (void)transport_->deregister_memory(e->dst_token);
    }
    return s;
  }

  Sample run_raw() {
    RawPingPong ping(raw_.a, dataplane_->pool(0), options_.size, true, &samples_);
    RawPingPong pong(raw_.b, dataplane_->pool(1), options_.size, false, nullptr);
    return timed(ping, pong, [&] { samples_.reset(); });
  }

 private:
  bool fail(const std::string& why) {
    std::fprintf(stderr, "uroce_bench_latency: %s\n", why.c_str());
    return false;
  }

  bool connect(Endpoint& a, Endpoint& b) {
    constexpr uint32_t kAll = proto::kAccessLocalWrite | proto::kAccessRemoteWrite | proto::kAccessRemoteRead;
    for (auto [e, engine] : {std::pair{&a, 0}, std::pair{&b, 1}}) {
      std::memset(e->dst.get(), 0, kBufferSize);
      std::memset(e->src.get(), 0x5a, kBufferSize);
      for (auto [buffer, token] : {std::pair{e->src.get(), &e->src_token}, std::pair{e->dst.get(), &e->dst_token}}) {
        auto t = transport_->register_memory(reinterpret_cast<uint64_t>(buffer), kBufferSize, kAll, kPd);
        if (!t.ok()) return fail("register_memory: " + t.error());
        *token = t.value();
      }
      dataplane::RcQueuePairSetup setup;
      setup.port = static_cast<dataplane::PortIndex>(engine);
      setup.pd = kPd;
      setup.send_queue = &e->sq;
      setup.receive_queue = &e->rq;
      setup.send_cq = &e->scq;
      setup.receive_cq = &e->rcq;
      auto qp = transport_->create_qp(static_cast<uint16_t>(engine), setup);
      if (!qp.ok()) return fail("create_qp: " + qp.error());
      e->qp = qp.value();
    }
    for (auto [self, peer, peer_port] : {std::tuple{&a, &b, 1}, std::tuple{&b, &a, 0}}) {
      dataplane::RcPeer remote;
      remote.qpn = peer->qp->qpn();
      remote.psn = proto::Psn{0x1000};
      remote.ip = dataplane_->config().ports[static_cast<std::size_t>(peer_port)].addresses.front();
      remote.mac = dataplane_->port(static_cast<dataplane::PortIndex>(peer_port)).mac;
      remote.path_mtu = 1024;
      proto::RcQpAttributes attrs;
      attrs.send_psn = proto::Psn{0x1000};
      attrs.path_mtu = 1024;
      if (const dataplane::Status s = transport_->connect(*self->qp, remote, attrs); !s.ok())
        return fail("connect: " + s.message());
    }
    return true;
  }

  // Starts the responder on engine 1 and the starter on engine 0, drops the warm-up's samples, runs, stops.
  template <typename Load, typename Reset>
  Sample timed(Load& ping, Load& pong, Reset reset) {
    Sample s;
    if (!dataplane_->engine(1).add_poller(pong.poller()).ok()) return s;
    if (!dataplane_->engine(0).add_poller(ping.poller()).ok()) {
      (void)dataplane_->engine(1).remove_poller(&pong);
      return s;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(options_.warmup));
    // The warm-up's samples go: with the starter off its engine (remove_poller returns once the engine has
    // dropped it), nothing appends while they are cleared. The exchange in flight then counts the pause,
    // one sample of many.
    if (!dataplane_->engine(0).remove_poller(&ping).ok()) return s;
    reset();
    if (!dataplane_->engine(0).add_poller(ping.poller()).ok()) return s;
    std::this_thread::sleep_for(std::chrono::duration<double>(options_.seconds));
    ping.stop();
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (!ping.idle() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    s.ok = ping.idle() && dataplane_->engine(0).remove_poller(&ping).ok();
    s.ok = dataplane_->engine(1).remove_poller(&pong).ok() && s.ok;
    s.exchanges = samples_.size();
    s.median_ns = samples_.half_rtt_ns(0.5);
    s.p99_ns = samples_.half_rtt_ns(0.99);
    if (s.exchanges == 0) s.ok = false;
    return s;
  }

  Options options_;
  std::unique_ptr<Dataplane> dataplane_;
  std::unique_ptr<RcTransport> transport_;
  RawRingPair raw_{};
  Samples samples_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int run_main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  Bench bench(o);
  if (!bench.start()) return 1;
  std::vector<double> uroce_median, uroce_p99, raw_median, raw_p99, ratios;
  for (unsigned rep = 0; rep < o.reps; ++rep) {
    const Sample u = bench.run_uroce();
    const Sample r = bench.run_raw();
    if (!u.ok || !r.ok) {
      std::fprintf(stderr, "uroce_bench_latency: rep %u failed (uroce %s, raw %s)\n", rep, u.ok ? "ok" : "failed",
                   r.ok ? "ok" : "failed");
      return 1;
    }
    uroce_median.push_back(u.median_ns);
    uroce_p99.push_back(u.p99_ns);
    raw_median.push_back(r.median_ns);
    raw_p99.push_back(r.p99_ns);
    ratios.push_back(u.median_ns / r.median_ns);
    std::printf(
        "  rep %u  uroce %8.0f ns (p99 %8.0f, %zu exchanges)   raw %8.0f ns (p99 %8.0f, %zu exchanges)   "
        "uroce/raw %.2f\n",
        rep, u.median_ns, u.p99_ns, u.exchanges, r.median_ns, r.p99_ns, r.exchanges, ratios.back());
    std::fflush(stdout);
  }
  const double ratio = median(ratios);
  std::printf("\nhalf round trip, %u B, median of %u runs (each run's median; p99 likewise)\n", o.size, o.reps);
  std::printf("  uroce RC WRITE ping-pong  %8.0f ns   p99 %8.0f ns\n", median(uroce_median), median(uroce_p99));
  std::printf("  raw net_ring ping-pong    %8.0f ns   p99 %8.0f ns\n", median(raw_median), median(raw_p99));
  std::printf("  uroce / raw               %8.2f      target <= 1.5 (issue #12): %s\n", ratio,
              ratio <= 1.5 ? "met" : "NOT met");
  return 0;
}

}  // namespace
}  // namespace uroce::bench

int main(int argc, char** argv) { return uroce::bench::run_main(argc, argv); }
