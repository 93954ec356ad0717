// uroce_bench_rc: RDMA WRITE message rate and goodput of the RC transport on ONE core, both ends of the
// connection on one engine over a net_ring loopback pair, against a raw net_ring tx+rx loop on the same core
// in the same run (A B A B ...). Method and figures: README.md "rc_loopback".
//
//   uroce_bench_rc                          every default case, 5 repetitions of 1 s each, A/B interleaved
//   uroce_bench_rc --case=64:128:32         one case: size[:window[:signal_every]]
//   uroce_bench_rc --count=200000 --mode=uroce --callgrind    fixed count, for run_callgrind.sh
//   uroce_bench_rc --congestion-ab          congestion control (DCQCN, in-flight cap, ECN) on against off, A/B
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

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

constexpr std::size_t kBufferSize = 2u << 20;  // per side: room for the largest message (1 MiB) and more
constexpr uint32_t kSendQueueSize = 1024;
constexpr uint32_t kCompletionQueueSize = 4096;
constexpr uint32_t kPd = 1;
constexpr const char* kEngineThread = "rte-worker-0";  // DPDK's name for EAL lcore 0's thread: engine 0

struct Case {
  uint32_t size = 64;
  uint32_t window = 128;
  uint32_t signal_every = 32;
  uint32_t pmtu = 1024;
};

enum class Mode : uint8_t { kBoth, kUroce, kRaw };

struct Options {
  std::optional<unsigned> cpu;
  double seconds = 1.0;
  double warmup = 0.3;
  unsigned reps = 5;
  std::vector<Case> cases;
  uint64_t count = 0;  // fixed-count mode when non-zero
  Mode mode = Mode::kBoth;
  bool callgrind = false;
  bool psn_guard = false;  // see psn_guard_limit()
  // Instead of raw: the same uroce case with congestion control off (config.congestion all off), A/B.
  bool congestion_ab = false;
};

uint32_t default_pmtu(uint32_t size) { return size <= 1024 ? 1024 : 4096; }

std::vector<Case> default_cases() {
  return {
      {64, 128, 32, 1024},  {64, 128, 1, 1024},   {4096, 128, 32, 4096},
      {4096, 128, 1, 4096}, {65536, 16, 4, 4096}, {1u << 20, 4, 1, 4096},
  };
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "%s\nusage: uroce_bench_rc [--cpu=N] [--seconds=S] [--warmup=S] [--reps=N]\n"
               "                      [--case=SIZE[:WINDOW[:SIGNAL_EVERY]] ...] [--pmtu=256..4096]\n"
               "                      [--count=N --mode=uroce|raw [--callgrind]] [--psn-guard] [--congestion-ab]\n",
               why);
  std::exit(2);  // NOLINT(concurrency-mt-unsafe): argument parsing, before any thread starts
}

std::optional<std::string_view> value_of(std::string_view arg, std::string_view key) {
  if (arg.substr(0, key.size()) != key || arg.size() <= key.size() || arg[key.size()] != '=') return std::nullopt;
  return arg.substr(key.size() + 1);
}

uint64_t to_u64(std::string_view s) {
  const std::string text(s);
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 0);
  if (end == text.c_str() || *end != '\0') usage(("not a number: " + text).c_str());
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  std::optional<uint32_t> pmtu;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (auto v = value_of(a, "--cpu")) {
      o.cpu = static_cast<unsigned>(to_u64(*v));
    } else if (auto v = value_of(a, "--seconds")) {
      o.seconds = std::strtod(std::string(*v).c_str(), nullptr);
    } else if (auto v = value_of(a, "--warmup")) {
      o.warmup = std::strtod(std::string(*v).c_str(), nullptr);
    } else if (auto v = value_of(a, "--reps")) {
      o.reps = static_cast<unsigned>(std::max<uint64_t>(1, to_u64(*v)));
    } else if (auto v = value_of(a, "--count")) {
      o.count = to_u64(*v);
    } else if (auto v = value_of(a, "--pmtu")) {
      pmtu = static_cast<uint32_t>(to_u64(*v));
    } else if (auto v = value_of(a, "--mode")) {
      if (*v == "both") {
        o.mode = Mode::kBoth;
      } else if (*v == "uroce") {
        o.mode = Mode::kUroce;
      } else if (*v == "raw") {
        o.mode = Mode::kRaw;
      } else {
        usage("--mode is both, uroce or raw");
      }
    } else if (auto v = value_of(a, "--case")) {
      Case c;
      std::string_view rest = *v;
      std::vector<uint64_t> fields;
      while (!rest.empty()) {
        const auto colon = rest.find(':');
        fields.push_back(to_u64(rest.substr(0, colon)));
        rest = colon == std::string_view::npos ? std::string_view{} : rest.substr(colon + 1);
      }
      if (fields.empty() || fields.size() > 3 || fields[0] == 0 || fields[0] > (1u << 20))
        usage("--case=SIZE[:WINDOW[:SIGNAL_EVERY]] with 1 <= SIZE <= 1 MiB");
      c.size = static_cast<uint32_t>(fields[0]);
      c.window = fields.size() > 1 ? static_cast<uint32_t>(fields[1]) : (c.size <= 4096 ? 128 : 8);
      c.signal_every = fields.size() > 2 ? static_cast<uint32_t>(fields[2]) : std::max<uint32_t>(1, c.window / 4);
      if (c.window == 0 || c.window > kSendQueueSize / 2 || c.signal_every == 0 || c.signal_every > c.window)
        usage("WINDOW must be 1..512 and SIGNAL_EVERY 1..WINDOW");
      o.cases.push_back(c);
    } else if (a == "--callgrind") {
      o.callgrind = true;
    } else if (a == "--congestion-ab") {
      o.congestion_ab = true;
    } else if (a == "--psn-guard") {
      o.psn_guard = true;
    } else if (a == "--no-psn-guard") {  // the default since the proto fix; kept for old command lines
      o.psn_guard = false;
    } else if (a == "--help" || a == "-h") {
      usage("uroce_bench_rc: RC WRITE rate on one core against a raw net_ring loop (bench/README.md)");
    } else {
      usage(("unknown argument: " + std::string(a)).c_str());
    }
  }
  if (o.cases.empty()) o.cases = default_cases();
  for (Case& c : o.cases) c.pmtu = pmtu.value_or(default_pmtu(c.size));
  if (o.count != 0 && o.mode == Mode::kBoth) usage("--count needs --mode=uroce or --mode=raw");
  if (o.congestion_ab && (o.count != 0 || o.mode != Mode::kBoth)) usage("--congestion-ab runs timed A/B pairs only");
  return o;
}

config::Config make_config(unsigned cpu, bool under_valgrind) {
  config::Config c;
  c.eal.lcores = {cpu};  // ONE engine: both QPs, both ports, the load and the baseline share its core
  // valgrind cannot map hugetlbfs pages (EAL's mmap of them fails under it), so a callgrind run takes plain
  // pages even where hugepages are free; the instruction counts do not depend on the page size.
  c.eal.hugepages = under_valgrind ? config::HugePages::kOff : config::HugePages::kAuto;
  c.eal.memory_mb = 768;
  c.engine.idle = config::IdlePolicy::kBusyPoll;
  c.engine.mbufs_per_engine = 16383;
  c.engine.mbuf_cache = 256;
  c.engine.mbuf_data_room = RTE_PKTMBUF_HEADROOM + 4096 + 256;  // a 4170-byte PMTU-4096 frame fits
  c.engine.max_qps_per_engine = 64;
  add_ring_link_ports(c);
  return c;
}

// One side of a connection: its QP and the application's queues.
struct Endpoint {
  dataplane::SendQueue sq{kSendQueueSize};
  dataplane::ReceiveQueue rq{16};
  dataplane::CompletionQueue scq{kCompletionQueueSize};
  dataplane::CompletionQueue rcq{64};
  dataplane::RcQueuePair* qp = nullptr;
};

struct Buffer {
  explicit Buffer(std::size_t n) : data(static_cast<uint8_t*>(std::aligned_alloc(4096, n)), &std::free), size(n) {
    for (std::size_t i = 0; i < n; ++i) data.get()[i] = static_cast<uint8_t>(i * 131 + 7);
  }
  std::unique_ptr<uint8_t, decltype(&std::free)> data;
  std::size_t size;
};

class Bench {
 public:
  explicit Bench(const Options& options) : options_(options), src_(kBufferSize), dst_(kBufferSize) {}

  bool start() {
    cpu_ = options_.cpu.value_or(last_allowed_cpu());
    auto dp = Dataplane::start(make_config(cpu_, options_.callgrind));
    if (!dp.ok()) return fail("Dataplane::start: " + dp.error());
    dataplane_ = std::move(dp.value());
    auto t = RcTransport::start(*dataplane_);
    if (!t.ok()) return fail("RcTransport::start: " + t.error());
    transport_ = std::move(t.value());
    constexpr uint32_t kAll = proto::kAccessLocalWrite | proto::kAccessRemoteWrite | proto::kAccessRemoteRead;
    for (const Buffer* b : {&src_, &dst_}) {
      auto token = transport_->register_memory(reinterpret_cast<uint64_t>(b->data.get()), b->size, kAll, kPd);
      if (!token.ok()) return fail("register_memory: " + token.error());
      (b == &src_ ? src_token_ : dst_token_) = token.value();
    }
    auto raw = make_raw_ring_pair(dataplane_->pool(0));
    if (!raw.ok()) return fail(raw.error());
    raw_ = raw.value();
    return true;
  }

  ~Bench() {
    release_pair();
    transport_.reset();
    if (dataplane_) dataplane_->stop();
  }

  [[nodiscard]] unsigned cpu() const { return cpu_; }

  struct Pair {
    uint32_t pmtu = 0;
    std::unique_ptr<Endpoint> a, b;
  };

  // A new connected pair for `pmtu` (the previous one is destroyed): A on port a, B on port b, both on
  // engine 0. Every timed run gets fresh QPs, so its PSNs start from the connect-time PSN (psn_guard_limit()).
  Pair* fresh_pair(uint32_t pmtu, const config::CongestionConfig* congestion = nullptr) {
    release_pair();
    auto p = std::make_unique<Pair>();
    p->pmtu = pmtu;
    p->a = std::make_unique<Endpoint>();
    p->b = std::make_unique<Endpoint>();
    for (auto [e, port] : {std::pair{p->a.get(), 0}, std::pair{p->b.get(), 1}}) {
      dataplane::RcQueuePairSetup setup;
      setup.port = static_cast<dataplane::PortIndex>(port);
      setup.pd = kPd;
      setup.send_queue = &e->sq;
      setup.receive_queue = &e->rq;
      setup.send_cq = &e->scq;
      setup.receive_cq = &e->rcq;
      setup.congestion = congestion;
      auto qp = transport_->create_qp(0, setup);
      if (!qp.ok()) {
        fail("create_qp: " + qp.error());
        return nullptr;
      }
      e->qp = qp.value();
    }
    const proto::Psn psn_a{0xFFFF00 + pmtu / 256}, psn_b{0x123456};  // A's request PSNs wrap early in the run
    for (auto [self, peer, self_psn, peer_psn, peer_port] :
         {std::tuple{p->a.get(), p->b.get(), psn_a, psn_b, 1}, std::tuple{p->b.get(), p->a.get(), psn_b, psn_a, 0}}) {
      dataplane::RcPeer remote;
      remote.qpn = peer->qp->qpn();
      remote.psn = peer_psn;
      remote.ip = dataplane_->config().ports[static_cast<std::size_t>(peer_port)].addresses.front();
      remote.mac = dataplane_->port(static_cast<dataplane::PortIndex>(peer_port)).mac;
      remote.path_mtu = pmtu;
      proto::RcQpAttributes attrs;
      attrs.send_psn = self_psn;
      attrs.path_mtu = pmtu;
      const dataplane::Status s = transport_->connect(*self->qp, remote, attrs);
      if (!s.ok()) {
        fail("connect: " + s.message());
        return nullptr;
      }
    }
    pair_ = std::move(p);
    return pair_.get();
  }

  void release_pair() {
    if (!pair_) return;
    for (Endpoint* e : {pair_->a.get(), pair_->b.get()})
      if (e->qp != nullptr) (void)transport_->destroy_qp(e->qp);
    pair_.reset();
  }

  struct Sample {
    double seconds = 0;
    double messages = 0;   // uroce: WRITEs completed; raw: packets x payload / size
    double packets = 0;    // frames moved a -> b (uroce: requests)
    double acks = 0;       // uroce: frames b -> a (ACKs)
    double cpu_share = 0;  // of the engine thread over the timed part (1.0: never preempted)
    bool ok = true;
  };

  WriteLoadSetup write_setup(const Case& c, Pair& p, uint64_t limit) {
    WriteLoadSetup s;
    s.transport = transport_.get();
    s.qp = p.a->qp;
    s.send_queue = &p.a->sq;
    s.send_cq = &p.a->scq;
    s.wqe.op = proto::WorkOp::kRdmaWrite;
    s.wqe.num_sge = 1;
    s.wqe.length = c.size;
    s.wqe.sge[0] = {reinterpret_cast<uint64_t>(src_.data.get()), c.size, proto::LocalToken{src_token_}};
    s.wqe.remote_addr = reinterpret_cast<uint64_t>(dst_.data.get());
    s.wqe.rkey = proto::RemoteToken{dst_token_};
    s.window = c.window;
    s.signal_every = c.signal_every;
    s.limit = limit;
    s.callgrind = options_.callgrind;
    return s;
  }

  RawLoopSetup raw_setup(const Case& c, uint64_t limit) {
    RawLoopSetup s;
    s.tx_port = raw_.a;
    s.rx_port = raw_.b;
    s.pool = dataplane_->pool(0);
    s.payload = std::min(c.size, c.pmtu);
    s.span = c.size;
    s.src = src_.data.get();
    s.dst = dst_.data.get();
    s.limit = limit;
    s.callgrind = options_.callgrind;
    return s;
  }

  // Timed: warm up, count for `seconds`, then stop and drain.
  Sample run_uroce(const Case& c, const config::CongestionConfig* congestion = nullptr) {
    Pair* p = fresh_pair(c.pmtu, congestion);
    if (p == nullptr) return Sample{.ok = false};
    const uint64_t limit = options_.psn_guard ? psn_guard_limit(c) : kUnlimited;
    WriteLoad load(write_setup(c, *p, limit));
    dataplane::Engine& engine = dataplane_->engine(0);
    const uint64_t failures0 = health();
    if (!engine.add_poller(load.poller()).ok()) return Sample{.ok = false};
    sleep(options_.warmup);
    CpuShare cpu(kEngineThread);
    cpu.start();
    const auto t0 = Clock::now();
    const uint64_t m0 = load.completed();
    const uint64_t req0 = engine.port_counters(0).tx_packets.read(), ack0 = engine.port_counters(1).tx_packets.read();
    // The timed part ends after `seconds`, or earlier when the PSN guard is about to stop posting.
    const auto end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.seconds));
    while (Clock::now() < end && load.posted() < limit) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const auto t1 = Clock::now();
    const uint64_t m1 = load.completed();
    const uint64_t req1 = engine.port_counters(0).tx_packets.read(), ack1 = engine.port_counters(1).tx_packets.read();
    Sample s;
    s.cpu_share = cpu.share();
    load.stop();
    s.ok = wait_drained(load) && engine.remove_poller(&load).ok();
    s.seconds = std::chrono::duration<double>(t1 - t0).count();
    s.messages = static_cast<double>(m1 - m0);
    s.packets = static_cast<double>(req1 - req0);
    s.acks = static_cast<double>(ack1 - ack0);
    if (load.failure() != proto::CompletionStatus::kSuccess) {
      std::fprintf(stderr, "uroce: a WRITE completed with status %d\n", static_cast<int>(load.failure()));
      s.ok = false;
    }
    if (const uint64_t f = health(); f != failures0) {
      std::fprintf(stderr, "uroce: %llu retransmissions, drops or allocation failures during the run\n",
                   static_cast<unsigned long long>(f - failures0));
      print_health();
    }
    return s;
  }

  Sample run_raw(const Case& c) {
    RawLoop load(raw_setup(c, kUnlimited));
    dataplane::Engine& engine = dataplane_->engine(0);
    if (!engine.add_poller(load.poller()).ok()) return Sample{.ok = false};
    sleep(options_.warmup);
    CpuShare cpu(kEngineThread);
    cpu.start();
    const auto t0 = Clock::now();
    const uint64_t p0 = load.received();
    sleep(options_.seconds);
    const auto t1 = Clock::now();
    const uint64_t p1 = load.received();
    Sample s;
    s.cpu_share = cpu.share();
    load.stop();
    s.ok = wait_drained(load) && engine.remove_poller(&load).ok();
    s.seconds = std::chrono::duration<double>(t1 - t0).count();
    s.packets = static_cast<double>(p1 - p0);
    s.messages = s.packets * std::min(c.size, c.pmtu) / c.size;
    if (load.alloc_failures() != 0)
      std::fprintf(stderr, "raw: %llu allocation failures\n", static_cast<unsigned long long>(load.alloc_failures()));
    return s;
  }

  // Fixed count (callgrind): `count` WRITEs (or packets), then stop.
  bool run_count(const Case& c, Mode mode, uint64_t count) {
    dataplane::Engine& engine = dataplane_->engine(0);
    const auto t0 = Clock::now();
    bool ok = false;
    if (mode == Mode::kUroce) {
      Pair* p = fresh_pair(c.pmtu);
      if (p == nullptr) return false;
      WriteLoad load(write_setup(c, *p, count));
      if (!engine.add_poller(load.poller()).ok()) return false;
      ok = wait_drained(load, std::chrono::hours(2)) && engine.remove_poller(&load).ok() && load.completed() == count &&
           load.failure() == proto::CompletionStatus::kSuccess;
      if (load.failure() != proto::CompletionStatus::kSuccess) {
        std::fprintf(stderr, "uroce: a WRITE completed with status %d; %llu WRITEs were posted\n",
                     static_cast<int>(load.failure()), static_cast<unsigned long long>(load.posted()));
      }
      print_health();
    } else {
      RawLoop load(raw_setup(c, count));
      if (!engine.add_poller(load.poller()).ok()) return false;
      ok = wait_drained(load, std::chrono::hours(2)) && engine.remove_poller(&load).ok() && load.received() == count;
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("count_mode %s size=%u pmtu=%u window=%u signal_every=%u count=%llu seconds=%.3f ok=%d\n",
                mode == Mode::kUroce ? "uroce" : "raw", c.size, c.pmtu, c.window, c.signal_every,
                static_cast<unsigned long long>(count), secs, ok ? 1 : 0);
    return ok;
  }

 private:
  // With --psn-guard a timed run posts fewer than 2^23 request packets on its fresh QPs and its timed part ends
  // before the limit. A QP used to stop accepting ACKs after 2^23 packets (RcQp::sent_limit(); fixed in commit
  // 9670418, set_unacked() moves resend_limit_psn_ along), so the guard was on by default until then.
  static uint64_t psn_guard_limit(const Case& c) {
    const uint64_t packets = (c.size + c.pmtu - 1) / c.pmtu;
    return ((uint64_t{1} << 23) - 8 * uint64_t{c.window} * packets) / packets;
  }

  // Events that would make a sample meaningless: retransmissions, NAKs, drops, empty pools.
  uint64_t health() const {
    const dataplane::EngineCounters& e = dataplane_->engine(0).counters();
    return e.transport.local_ack_timeout_err.read() + e.transport.packet_seq_err.read() +
           e.transport.out_of_sequence.read() + e.tx_backlog_drops.read() + e.mbuf_alloc_failures.read() +
           e.redirect_ring_full.read();
  }

  // The engine's non-zero counters, after a failed run.
  void print_health() const {
    for (const auto& [name, value] : dataplane::counter_values(dataplane_->engine(0).counters())) {
      if (value != 0 && (name.find("err") != std::string::npos || name.find("drop") != std::string::npos ||
                         name.find("fail") != std::string::npos || name.find("sequence") != std::string::npos))
        std::fprintf(stderr, "  %s=%llu\n", name.c_str(), static_cast<unsigned long long>(value));
    }
  }

  static void sleep(double seconds) { std::this_thread::sleep_for(std::chrono::duration<double>(seconds)); }

  template <class Load>
  static bool wait_drained(const Load& load, Clock::duration timeout = std::chrono::seconds(10)) {
    const auto deadline = Clock::now() + timeout;
    while (!load.drained()) {
      if (Clock::now() > deadline) {
        std::fprintf(stderr, "the load did not drain\n");
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

  bool fail(const std::string& message) {
    std::fprintf(stderr, "uroce_bench_rc: %s\n", message.c_str());
    return false;
  }

  const Options& options_;
  unsigned cpu_ = 0;
  Buffer src_, dst_;
  uint32_t src_token_ = 0, dst_token_ = 0;
  std::unique_ptr<Dataplane> dataplane_;
  std::unique_ptr<RcTransport> transport_;
  std::unique_ptr<Pair> pair_;
  RawRingPair raw_;
};

struct Stats {
  double median = 0, min = 0, max = 0;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  Stats s;
  if (v.empty()) return s;
  s.min = v.front();
  s.max = v.back();
  const std::size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return s;
}

std::string describe(const Case& c) {
  char text[96];
  std::snprintf(text, sizeof(text), "%u B pmtu %u win %u sig 1/%u", c.size, c.pmtu, c.window, c.signal_every);
  return text;
}

// Every part of congestion control off: no in-flight cap, no ECN, no CNPs, no pacing.
constexpr config::CongestionConfig kCongestionOff = [] {
  config::CongestionConfig c;
  c.max_bytes_in_flight = 0;
  c.ecn = false;
  c.notification_point.enabled = false;
  c.reaction_point.enabled = false;
  return c;
}();

int run(const Options& o) {
  Bench bench(o);
  if (!bench.start()) return 1;
  if (o.count != 0) return bench.run_count(o.cases.front(), o.mode, o.count) ? 0 : 1;

  std::printf(
      "uroce_bench_rc: one engine on CPU %u, both QPs and both ring ports on it; %u x %.2f s per "
      "contender per case (warm-up %.2f s), A/B interleaved; load average %s\n",
      bench.cpu(), o.reps, o.seconds, o.warmup, load_average().c_str());
  // The baseline contender: the raw ring loop, or (--congestion-ab) uroce with congestion control off.
  const std::string base = o.congestion_ab ? "cc-off" : "raw";
  if (o.congestion_ab)
    std::printf("A: uroce with config.congestion as default.yaml has it; B (cc-off): all of it off\n");
  struct Row {
    Case c;
    Stats uroce_rate, raw_rate, ratio, uroce_cpu_ns, raw_cpu_ns;
    double acks_per_message = 0, packets_per_message = 0, min_cpu_share = 0;
  };
  std::vector<Row> rows;
  for (const Case& c : o.cases) {
    std::vector<double> u, r, ratio, acks, pkts, cpu, u_ns, r_ns;
    for (unsigned rep = 0; rep < o.reps; ++rep) {
      double ur = 0, rr = 0, u_cpu = 0, r_cpu = 0, u_secs = 0;
      if (o.mode != Mode::kRaw) {
        const Bench::Sample s = bench.run_uroce(c);
        if (!s.ok) return 1;
        ur = s.messages / s.seconds;
        u_cpu = s.cpu_share;
        u_secs = s.seconds;
        u.push_back(ur);
        acks.push_back(s.acks / s.messages);
        pkts.push_back(s.packets / s.messages);
        cpu.push_back(s.cpu_share);
        u_ns.push_back(s.cpu_share * s.seconds * 1e9 / s.messages);
      }
      if (o.mode != Mode::kUroce) {
        const Bench::Sample s = o.congestion_ab ? bench.run_uroce(c, &kCongestionOff) : bench.run_raw(c);
        if (!s.ok) return 1;
        rr = s.messages / s.seconds;
        r_cpu = s.cpu_share;
        r.push_back(rr);
        cpu.push_back(s.cpu_share);
        r_ns.push_back(s.cpu_share * s.seconds * 1e9 / s.messages);
      }
      if (ur > 0 && rr > 0) ratio.push_back(ur / rr);
      std::printf(
          "  %-32s rep %u  uroce %8.3f Mmsg/s %7.2f Gb/s (%.2f s)   %s %8.3f Mmsg/s %7.2f Gb/s   ratio %.3f"
          "   engine on-CPU %.3f %.3f\n",
          describe(c).c_str(), rep, ur / 1e6, ur * c.size * 8 / 1e9, u_secs, base.c_str(), rr / 1e6,
          rr * c.size * 8 / 1e9, rr > 0 ? ur / rr : 0.0, u_cpu, r_cpu);
      std::fflush(stdout);
    }
    Row row;
    row.c = c;
    row.uroce_rate = stats(u);
    row.raw_rate = stats(r);
    row.ratio = stats(ratio);
    row.uroce_cpu_ns = stats(u_ns);
    row.raw_cpu_ns = stats(r_ns);
    row.acks_per_message = stats(acks).median;
    row.packets_per_message = stats(pkts).median;
    row.min_cpu_share = stats(cpu).min;
    rows.push_back(row);
  }

  std::printf(
      "\nmedian [min .. max] over %u repetitions; Gb/s is payload (10^9 bit/s); ns/msg = 1e9 / median rate "
      "(wall time of the one engine core); cpu-ns/msg = the engine thread's on-CPU time per message (median; "
      "differs from ns/msg when the core was shared); load average %s\n",
      o.reps, load_average().c_str());
  std::printf("%-32s | %-30s | %-22s | %7s | %11s | %-30s | %-22s | %11s | %s\n", "case", "uroce Mmsg/s", "uroce Gb/s",
              "ns/msg", "cpu-ns/msg", (base + " Mmsg/s").c_str(), (base + " Gb/s").c_str(), "cpu-ns/msg",
              ("uroce/" + base).c_str());
  for (const Row& row : rows) {
    const double bits = row.c.size * 8.0 / 1e9;
    const auto& u = row.uroce_rate;
    const auto& r = row.raw_rate;
    std::printf(
        "%-32s | %7.3f [%7.3f .. %7.3f] | %6.2f [%6.2f .. %6.2f] | %7.1f | %11.1f | %7.3f [%7.3f .. %7.3f] | "
        "%6.2f [%6.2f .. %6.2f] | %11.2f | %.3f [%.3f .. %.3f]\n",
        describe(row.c).c_str(), u.median / 1e6, u.min / 1e6, u.max / 1e6, u.median * bits, u.min * bits, u.max * bits,
        u.median > 0 ? 1e9 / u.median : 0.0, row.uroce_cpu_ns.median, r.median / 1e6, r.min / 1e6, r.max / 1e6,
        r.median * bits, r.min * bits, r.max * bits, row.raw_cpu_ns.median, row.ratio.median, row.ratio.min,
        row.ratio.max);
  }
  std::printf(
      "\nper message (uroce, medians): request frames, ACK frames; lowest engine on-CPU share of any "
      "sample (< 0.99: the core was shared during that sample)\n");
  for (const Row& row : rows) {
    std::printf("  %-32s %6.2f %8.4f   %.3f\n", describe(row.c).c_str(), row.packets_per_message, row.acks_per_message,
                row.min_cpu_share);
  }
  std::printf("\ntargets (issue #3): 64 B >= 10 Mmsg/s on one core; 4 KiB-PMTU WRITE goodput >= 60 Gb/s\n");
  for (const Row& row : rows) {
    if (row.uroce_rate.median == 0) continue;
    if (row.c.size == 64) {
      std::printf("  %-32s %7.3f Mmsg/s -> %s\n", describe(row.c).c_str(), row.uroce_rate.median / 1e6,
                  row.uroce_rate.median >= 10e6 ? "met" : "NOT met");
    } else if (row.c.pmtu == 4096 && row.c.size >= 4096) {
      const double gbps = row.uroce_rate.median * row.c.size * 8 / 1e9;
      std::printf("  %-32s %7.2f Gb/s -> %s\n", describe(row.c).c_str(), gbps, gbps >= 60 ? "met" : "NOT met");
    }
  }
  return 0;
}

}  // namespace
}  // namespace uroce::bench

int main(int argc, char** argv) { return uroce::bench::run(uroce::bench::parse(argc, argv)); }
