// uroce_bench_incast: N RC QPs writing into one port through a bottleneck (config.faults.bottleneck, a queue served
// at a fixed rate that marks ECN above a threshold), with DCQCN and without it, in one run (issue #16). Method and
// figures: README.md "incast".
//
//   uroce_bench_incast                      8 senders into 10 Gb/s, each mode in turn, 3 repetitions
//   uroce_bench_incast --senders=4 --rate-mbps=5000 --seconds=2 --reps=5
//
// Everything runs on one engine core (both ports, every QP, the loads as pollers); the control thread only samples
// counters. Per mode and repetition: a warm-up (the senders start at line rate and converge), then a measured
// window, in which it reports the goodput against the bottleneck's rate, each sender's share, what the queue
// dropped, the queue's depth (sampled every millisecond) and the retransmissions.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <rte_mbuf.h>

#include "bench/bench_loads.h"
#include "dataplane/dataplane.h"
#include "dataplane/rc_transport.h"

namespace uroce::bench {
namespace {

using Clock = std::chrono::steady_clock;
using dataplane::Dataplane;
using dataplane::RcTransport;

constexpr uint32_t kPd = 1;
constexpr uint32_t kSendQueueSize = 256;

struct Options {
  std::optional<unsigned> cpu;
  unsigned senders = 8;
  uint32_t rate_mbps = 10'000;  // a net_ring port's link speed: N senders at line rate into one port at line rate
  uint32_t buffer_bytes = 1u << 20;
  uint32_t kmin_bytes = 40 * 1024;
  uint32_t kmax_bytes = 160 * 1024;
  double pmax = 0.2;
  uint32_t size = 65536;
  uint32_t window = 4;
  uint32_t pmtu = 4096;
  double seconds = 2;
  double warmup = 1;
  unsigned reps = 3;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "%s\nusage: uroce_bench_incast [--cpu=N] [--senders=N] [--rate-mbps=R] [--buffer=BYTES] [--kmin=BYTES]\n"
               "                          [--kmax=BYTES] [--pmax=P] [--size=BYTES] [--window=N] [--pmtu=N]\n"
               "                          [--seconds=S] [--warmup=S] [--reps=N]\n",
               why);
  std::exit(2);  // NOLINT(concurrency-mt-unsafe): argument parsing, before any thread starts
}

Options parse(int argc, char** argv) {
  Options o;
  const auto number = [](std::string_view arg, std::string_view key) -> std::optional<double> {
    if (arg.substr(0, key.size()) != key || arg.size() <= key.size() + 1 || arg[key.size()] != '=') return {};
    const std::string text(arg.substr(key.size() + 1));
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (end == text.c_str() || *end != '\0' || !(v >= 0)) usage(("not a number: " + text).c_str());
    return v;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (auto v = number(a, "--cpu")) {
      o.cpu = static_cast<unsigned>(*v);
    } else if (auto v = number(a, "--senders")) {
      o.senders = static_cast<unsigned>(*v);
    } else if (auto v = number(a, "--rate-mbps")) {
      o.rate_mbps = static_cast<uint32_t>(*v);
    } else if (auto v = number(a, "--buffer")) {
      o.buffer_bytes = static_cast<uint32_t>(*v);
    } else if (auto v = number(a, "--kmin")) {
      o.kmin_bytes = static_cast<uint32_t>(*v);
    } else if (auto v = number(a, "--kmax")) {
      o.kmax_bytes = static_cast<uint32_t>(*v);
    } else if (auto v = number(a, "--pmax")) {
      o.pmax = *v;
    } else if (auto v = number(a, "--size")) {
      o.size = static_cast<uint32_t>(*v);
    } else if (auto v = number(a, "--window")) {
      o.window = static_cast<uint32_t>(*v);
    } else if (auto v = number(a, "--pmtu")) {
      o.pmtu = static_cast<uint32_t>(*v);
    } else if (auto v = number(a, "--seconds")) {
      o.seconds = *v;
    } else if (auto v = number(a, "--warmup")) {
      o.warmup = *v;
    } else if (auto v = number(a, "--reps")) {
      o.reps = std::max(1u, static_cast<unsigned>(*v));
    } else {
      usage(("unknown argument: " + std::string(a)).c_str());
    }
  }
  if (o.senders == 0 || o.senders > 32) usage("--senders is 1..32");
  if (o.rate_mbps == 0) usage("--rate-mbps must be > 0");
  if (o.size == 0 || o.size > (1u << 20) || o.window == 0 || o.window > kSendQueueSize / 2)
    usage("--size is 1..1 MiB and --window 1..128");
  if (o.kmin_bytes > o.kmax_bytes || o.kmax_bytes > o.buffer_bytes) usage("need kmin <= kmax <= buffer");
  return o;
}

// The modes compared, each a config.congestion for the senders' and receivers' QPs.
struct Mode {
  const char* name;
  config::CongestionConfig congestion;
};

std::vector<Mode> modes() {
  Mode dcqcn{"dcqcn", {}};  // as default.yaml has it: the SIGCOMM 2015 paper's parameters
  // NVIDIA's ConnectX values (config/examples/connectx.yaml; rocev2.md §7.4, partly unverified there).
  Mode connectx{"connectx", {}};
  connectx.congestion.notification_point.min_time_between_cnps_us = 4;
  config::ReactionPointConfig& rp = connectx.congestion.reaction_point;
  rp.time_reset_us = 300;
  rp.byte_reset = 32767;
  rp.threshold = 1;
  rp.ai_rate_mbps = 5;
  rp.hai_rate_mbps = 50;
  rp.dce_tcp_g = 1019;
  rp.dce_tcp_rtt_us = 1;
  rp.rate_reduce_monitor_period_us = 4;
  Mode no_dcqcn{"no-dcqcn", {}};  // the in-flight cap and slow restart stay: only ECN, CNPs and the rate go
  no_dcqcn.congestion.ecn = false;
  no_dcqcn.congestion.notification_point.enabled = false;
  no_dcqcn.congestion.reaction_point.enabled = false;
  Mode cap_only = no_dcqcn;  // the in-flight cap alone: a loss does not shrink the window
  cap_only.name = "cap-only";
  cap_only.congestion.slow_restart = false;
  Mode none = cap_only;  // nothing at all: every sender's whole window at once
  none.name = "none";
  none.congestion.max_bytes_in_flight = 0;
  return {dcqcn, connectx, no_dcqcn, cap_only, none};
}

config::Config make_config(const Options& o, unsigned cpu) {
  config::Config c;
  c.eal.lcores = {cpu};  // one engine: every QP, both ports and the loads on its core
  c.eal.memory_mb = 768;
  c.engine.idle = config::IdlePolicy::kBusyPoll;
  c.engine.mbufs_per_engine = 16383;
  c.engine.mbuf_data_room = RTE_PKTMBUF_HEADROOM + 4096 + 256;
  add_ring_link_ports(c);
  config::BottleneckConfig& b = c.faults.bottleneck;
  b.rate_mbps = o.rate_mbps;
  b.buffer_bytes = o.buffer_bytes;
  b.ecn_kmin_bytes = o.kmin_bytes;
  b.ecn_kmax_bytes = o.kmax_bytes;
  b.ecn_pmax = o.pmax;
  return c;
}

struct Endpoint {
  dataplane::SendQueue sq{kSendQueueSize};
  dataplane::ReceiveQueue rq{16};
  dataplane::CompletionQueue scq{1024};
  dataplane::CompletionQueue rcq{16};
  dataplane::RcQueuePair* qp = nullptr;
};

struct Sample {
  double goodput_gbps = 0;     // all senders, payload
  double utilisation = 0;      // of the bottleneck's rate, frames included
  double fairness = 0;         // Jain's index over the senders' goodput
  double worst_share = 0;      // the sender furthest from an equal share, as a fraction of it (+/-)
  uint64_t dropped = 0;        // by the queue, in the window
  uint64_t retransmitted = 0;  // timeouts + sequence NAKs, in the window
  uint64_t cnps = 0;           // sent, in the window
  double queue_median_kb = 0, queue_p99_kb = 0, queue_max_kb = 0;
  bool ok = true;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(std::lround(p * static_cast<double>(v.size() - 1))))];
}

class Bench {
 public:
  explicit Bench(const Options& o) : o_(o), src_(2u << 20), dst_(2u << 20) {}
  ~Bench() {
    transport_.reset();
    if (dataplane_) dataplane_->stop();
  }

  bool start() {
    cpu_ = o_.cpu.value_or(last_allowed_cpu());
    auto dp = Dataplane::start(make_config(o_, cpu_));
    if (!dp.ok()) return fail("Dataplane::start: " + dp.error());
    dataplane_ = std::move(dp.value());
    auto t = RcTransport::start(*dataplane_);
    if (!t.ok()) return fail("RcTransport::start: " + t.error());
    transport_ = std::move(t.value());
    constexpr uint32_t kAll = proto::kAccessLocalWrite | proto::kAccessRemoteWrite;
    for (std::vector<uint8_t>* b : {&src_, &dst_}) {
      auto token = transport_->register_memory(reinterpret_cast<uint64_t>(b->data()), b->size(), kAll, kPd);
      if (!token.ok()) return fail("register_memory: " + token.error());
      (b == &src_ ? src_token_ : dst_token_) = token.value();
    }
    return true;
  }
  [[nodiscard]] unsigned cpu() const { return cpu_; }
  [[nodiscard]] uint32_t link_mbps() const { return dataplane_->port(0).link_speed_mbps; }

  Sample run(const Mode& mode) {
    // Fresh QPs per run: each starts at line rate with nothing learnt.
    std::vector<std::unique_ptr<Endpoint>> senders, receivers;
    for (unsigned i = 0; i < o_.senders; ++i) {
      for (auto* list : {&senders, &receivers}) {
        auto e = std::make_unique<Endpoint>();
        dataplane::RcQueuePairSetup setup;
        setup.port = list == &senders ? 0 : 1;
        setup.pd = kPd;
        setup.send_queue = &e->sq;
        setup.receive_queue = &e->rq;
        setup.send_cq = &e->scq;
        setup.receive_cq = &e->rcq;
        setup.congestion = &mode.congestion;
        auto qp = transport_->create_qp(0, setup);
        if (!qp.ok()) return failed("create_qp: " + qp.error());
        e->qp = qp.value();
        list->push_back(std::move(e));
      }
      for (auto [self, peer, port] :
           {std::tuple{senders[i].get(), receivers[i].get(), 1}, std::tuple{receivers[i].get(), senders[i].get(), 0}}) {
        dataplane::RcPeer remote;
        remote.qpn = peer->qp->qpn();
        remote.psn = proto::Psn{0x1000};
        remote.ip = dataplane_->config().ports[static_cast<std::size_t>(port)].addresses.front();
        remote.mac = dataplane_->port(static_cast<dataplane::PortIndex>(port)).mac;
        remote.path_mtu = o_.pmtu;
        proto::RcQpAttributes attrs;
        attrs.send_psn = proto::Psn{0x1000};
        attrs.path_mtu = o_.pmtu;
        if (const auto s = transport_->connect(*self->qp, remote, attrs); !s.ok())
          return failed("connect: " + s.message());
      }
    }
    std::vector<std::unique_ptr<WriteLoad>> loads;
    for (auto& s : senders) {
      WriteLoadSetup w;
      w.transport = transport_.get();
      w.qp = s->qp;
      w.send_queue = &s->sq;
      w.send_cq = &s->scq;
      w.wqe.op = proto::WorkOp::kRdmaWrite;
      w.wqe.num_sge = 1;
      w.wqe.length = o_.size;
      w.wqe.sge[0] = {reinterpret_cast<uint64_t>(src_.data()), o_.size, proto::LocalToken{src_token_}};
      w.wqe.remote_addr = reinterpret_cast<uint64_t>(dst_.data());
      w.wqe.rkey = proto::RemoteToken{dst_token_};
      w.window = o_.window;
      w.signal_every = 1;
      loads.push_back(std::make_unique<WriteLoad>(w));
    }
    dataplane::Engine& engine = dataplane_->engine(0);
    for (auto& l : loads)
      if (!engine.add_poller(l->poller()).ok()) return failed("add_poller");
    std::this_thread::sleep_for(std::chrono::duration<double>(o_.warmup));

    const dataplane::EngineCounters& c = engine.counters();
    const auto retransmissions = [&] {
      return c.transport.local_ack_timeout_err.read() + c.transport.packet_seq_err.read();
    };
    std::vector<uint64_t> done0(loads.size());
    for (std::size_t i = 0; i < loads.size(); ++i) done0[i] = loads[i]->completed();
    const uint64_t drop0 = c.bottleneck_dropped.read(), retx0 = retransmissions(),
                   cnp0 = c.transport.np_cnp_sent.read();
    const uint64_t bytes0 = engine.port_counters(1).rx_bytes.read();
    std::vector<double> queue_kb;
    const auto t0 = Clock::now();
    const auto end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o_.seconds));
    while (Clock::now() < end) {
      queue_kb.push_back(static_cast<double>(c.bottleneck_queue_bytes.read()) / 1024);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    Sample s;
    std::vector<double> share;
    double total = 0;
    for (std::size_t i = 0; i < loads.size(); ++i) {
      share.push_back(static_cast<double>(loads[i]->completed() - done0[i]) * o_.size * 8 / secs / 1e9);
      total += share.back();
    }
    s.dropped = c.bottleneck_dropped.read() - drop0;
    s.retransmitted = retransmissions() - retx0;
    s.cnps = c.transport.np_cnp_sent.read() - cnp0;
    s.goodput_gbps = total;
    s.utilisation =
        static_cast<double>(engine.port_counters(1).rx_bytes.read() - bytes0) * 8 / secs / (o_.rate_mbps * 1e6);
    double squares = 0, worst = 0;
    const double fair = total / static_cast<double>(share.size());
    for (const double x : share) {
      squares += x * x;
      if (fair > 0 && std::abs(x / fair - 1) > std::abs(worst)) worst = x / fair - 1;
    }
    s.fairness = squares > 0 ? total * total / (static_cast<double>(share.size()) * squares) : 0;
    s.worst_share = worst;
    s.queue_median_kb = percentile(queue_kb, 0.5);
    s.queue_p99_kb = percentile(queue_kb, 0.99);
    s.queue_max_kb = percentile(queue_kb, 1.0);

    for (auto& l : loads) l->stop();
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    for (auto& l : loads) {
      while (!l->drained() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (!l->drained() || l->failure() != proto::CompletionStatus::kSuccess) s.ok = false;
      (void)engine.remove_poller(l.get());
    }
    if (!s.ok) std::fprintf(stderr, "uroce_bench_incast: %s: a load did not drain or a WRITE failed\n", mode.name);
    for (auto* list : {&senders, &receivers})
      for (auto& e : *list) (void)transport_->destroy_qp(e->qp);
    return s;
  }

 private:
  Sample failed(const std::string& why) {
    fail(why);
    return Sample{.ok = false};
  }
  bool fail(const std::string& why) {
    std::fprintf(stderr, "uroce_bench_incast: %s\n", why.c_str());
    return false;
  }

  const Options& o_;
  unsigned cpu_ = 0;
  std::vector<uint8_t> src_, dst_;
  uint32_t src_token_ = 0, dst_token_ = 0;
  std::unique_ptr<Dataplane> dataplane_;
  std::unique_ptr<RcTransport> transport_;
};

int run(const Options& o) {
  Bench bench(o);
  if (!bench.start()) return 1;
  std::printf(
      "uroce_bench_incast: %u senders -> one port through a %u Mb/s bottleneck (buffer %u KiB, ECN RED %u..%u KiB "
      "p_max %.2f); %u B WRITEs, window %u, PMTU %u; one engine on CPU %u; senders start at %u Mb/s (the port's "
      "link speed); warm-up %.1f s, measured %.1f s, %u repetitions per mode; load average %s\n",
      o.senders, o.rate_mbps, o.buffer_bytes / 1024, o.kmin_bytes / 1024, o.kmax_bytes / 1024, o.pmax, o.size, o.window,
      o.pmtu, bench.cpu(), bench.link_mbps(), o.warmup, o.seconds, o.reps, load_average().c_str());
  struct Row {
    std::string mode;
    std::vector<Sample> samples;
  };
  std::vector<Row> rows;
  for (const Mode& m : modes()) rows.push_back({m.name, {}});
  for (unsigned rep = 0; rep < o.reps; ++rep) {
    for (std::size_t i = 0; i < rows.size(); ++i) {  // modes interleaved: A B C A B C ...
      const Sample s = bench.run(modes()[i]);
      if (!s.ok) return 1;
      std::printf(
          "  %-11s rep %u: goodput %6.3f Gb/s, link use %.3f, fairness %.3f (worst sender %+.0f%%), dropped %llu, "
          "retransmitted %llu, CNPs %llu, queue KiB median %.0f p99 %.0f max %.0f\n",
          rows[i].mode.c_str(), rep, s.goodput_gbps, s.utilisation, s.fairness, 100 * s.worst_share,
          static_cast<unsigned long long>(s.dropped), static_cast<unsigned long long>(s.retransmitted),
          static_cast<unsigned long long>(s.cnps), s.queue_median_kb, s.queue_p99_kb, s.queue_max_kb);
      std::fflush(stdout);
      rows[i].samples.push_back(s);
    }
  }
  std::printf("\nmedians over %u repetitions (link use: frame bytes out of the bottleneck / its rate)\n", o.reps);
  std::printf("%-11s | %13s | %8s | %8s | %12s | %8s | %13s | %6s | %s\n", "mode", "goodput Gb/s", "link use",
              "fairness", "worst sender", "dropped", "retransmitted", "CNPs", "queue KiB median / p99 / max");
  for (const Row& r : rows) {
    const auto med = [&](auto field) {
      std::vector<double> v;
      for (const Sample& s : r.samples) v.push_back(static_cast<double>(field(s)));
      return percentile(v, 0.5);
    };
    std::printf(
        "%-11s | %13.3f | %8.3f | %8.3f | %+11.0f%% | %8.0f | %13.0f | %6.0f | %.0f / %.0f / %.0f\n", r.mode.c_str(),
        med([](const Sample& s) { return s.goodput_gbps; }), med([](const Sample& s) { return s.utilisation; }),
        med([](const Sample& s) { return s.fairness; }), 100 * med([](const Sample& s) { return s.worst_share; }),
        med([](const Sample& s) { return s.dropped; }), med([](const Sample& s) { return s.retransmitted; }),
        med([](const Sample& s) { return s.cnps; }), med([](const Sample& s) { return s.queue_median_kb; }),
        med([](const Sample& s) { return s.queue_p99_kb; }), med([](const Sample& s) { return s.queue_max_kb; }));
  }
  std::printf(
      "\ntargets (issue #16), DCQCN: link use >= 0.90, no drops once converged, queue bounded, every sender "
      "within +/-20%% of an equal share\n");
  return 0;
}

}  // namespace
}  // namespace uroce::bench

int main(int argc, char** argv) { return uroce::bench::run(uroce::bench::parse(argc, argv)); }
