// uroce_bench_rc_memif: one end of a two-process RDMA WRITE benchmark over net_memif, or of the raw memif
// baseline it is compared with; bench/memif_ab.sh runs the pairs interleaved (uroce, raw, uroce, raw, ...).
// Method and figures: README.md "rc_memif".
//
//   uroce_bench_rc_memif server|client --mode=uroce|raw --socket=PATH --exchange=DIR [--size=64]
//                        [--window=W] [--signal=K] [--seconds=2] [--warmup=0.5]
//   uroce_bench_rc_memif probe          cache-line ping-pong between CPU 0 and CPU 1 (the host's "mode")
//
// uroce: each process runs a Dataplane with one busy-polling engine (server on CPU 0, client on CPU 1) and one
// RC QP; they swap QPN/PSN/address/R_Key through files in DIR (as perftest does over TCP). The client's engine
// runs a WriteLoad (bench_loads.h) into the server's buffer and measures completed WRITEs; the server's engine
// only receives and ACKs. raw: the same EAL and memif port without the Dataplane: the client's lcore sends
// 42-byte headers + the payload (alloc bulk, copy, tx_burst), the server's receives and copies the payload out
// (rx_burst, copy, free bulk), and the server measures. Each prints one "RESULT ..." line.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <pthread.h>
#include <rte_launch.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <sched.h>
#include <unistd.h>

#include "bench/bench_loads.h"
#include "dataplane/dataplane.h"
#include "dataplane/eal.h"
#include "dataplane/rc_transport.h"
#include "dataplane/tests/file_exchange.h"

namespace uroce::bench {
namespace {

using uroce::dataplane::testing::wait_file;
using uroce::dataplane::testing::write_file;

using Clock = std::chrono::steady_clock;
constexpr std::size_t kBufferSize = 2u << 20;
constexpr uint32_t kPd = 1;
constexpr const char* kEngineThread = "rte-worker-0";

struct Options {
  bool server = false;
  bool raw = false;
  std::string socket, exchange;
  uint32_t size = 64;
  uint32_t window = 0;  // 0: 128 up to 4 KiB, else 8
  uint32_t signal = 0;  // 0: window / 4
  double seconds = 2.0;
  double warmup = 0.5;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "%s\nusage: uroce_bench_rc_memif server|client --mode=uroce|raw --socket=PATH --exchange=DIR\n"
               "                            [--size=N] [--window=W] [--signal=K] [--seconds=S] [--warmup=S]\n"
               "       uroce_bench_rc_memif probe\n",
               why.c_str());
  std::exit(2);  // NOLINT(concurrency-mt-unsafe): argument parsing, before any thread starts
}

Options parse(int argc, char** argv) {
  Options o;
  if (argc < 2) usage("no role");
  const std::string_view role = argv[1];
  if (role != "server" && role != "client") usage("the role is server, client or probe");
  o.server = role == "server";
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    const auto eq = a.find('=');
    if (eq == std::string::npos) usage("expected --key=value: " + a);
    const std::string k = a.substr(0, eq), v = a.substr(eq + 1);
    if (k == "--mode") {
      if (v != "uroce" && v != "raw") usage("--mode is uroce or raw");
      o.raw = v == "raw";
    } else if (k == "--socket") {
      o.socket = v;
    } else if (k == "--exchange") {
      o.exchange = v;
    } else if (k == "--size") {
      o.size = static_cast<uint32_t>(std::stoul(v));
    } else if (k == "--window") {
      o.window = static_cast<uint32_t>(std::stoul(v));
    } else if (k == "--signal") {
      o.signal = static_cast<uint32_t>(std::stoul(v));
    } else if (k == "--seconds") {
      o.seconds = std::stod(v);
    } else if (k == "--warmup") {
      o.warmup = std::stod(v);
    } else {
      usage("unknown option " + k);
    }
  }
  if (o.socket.empty() || o.exchange.empty()) usage("--socket and --exchange are required");
  if (o.size == 0 || o.size > (1u << 20)) usage("--size is 1..1 MiB");
  if (o.window == 0) o.window = o.size <= 4096 ? 128 : 8;
  if (o.signal == 0) o.signal = std::max<uint32_t>(1, o.window / 4);
  if (o.window > 512 || o.signal > o.window) usage("--window is 1..512 and --signal 1..window");
  return o;
}

uint32_t pmtu_for(uint32_t size) { return size <= 1024 ? 1024 : 4096; }

config::Config memif_config(const Options& o) {
  config::Config c;
  const std::vector<unsigned> cpus = config::process_allowed_cpus();  // first and last: 0 and 1 on 2 cores
  c.eal.lcores = {cpus.empty() ? 0u : o.server ? cpus.front() : cpus.back()};
  c.eal.hugepages = config::HugePages::kAuto;
  c.eal.memory_mb = 768;
  c.eal.file_prefix = std::string("uroce-bench-memif-") + (o.server ? "s" : "c") + std::to_string(getpid());
  c.engine.idle = config::IdlePolicy::kBusyPoll;
  c.engine.mbufs_per_engine = 16383;
  c.engine.mbuf_cache = 256;
  c.engine.mbuf_data_room = RTE_PKTMBUF_HEADROOM + 4096 + 256;
  c.engine.max_qps_per_engine = 16;
  config::PortConfig p;
  p.name = "m";
  // bsize 8192: a 4 KiB-PMTU frame fits one memif buffer (dpdk-env.md §4); copy mode on both sides.
  p.device = std::string("net_memif0,role=") + (o.server ? "server" : "client") + ",id=0,socket=" + o.socket +
             ",socket-abstract=no,bsize=8192";
  p.mac = config::MacAddress{0x02, 0, 0, 0, 1, static_cast<uint8_t>(o.server ? 1 : 2)};
  config::IpAddress ip;
  ip.bytes = {198, 18, 1, static_cast<uint8_t>(o.server ? 1 : 2)};
  ip.prefix_length = 24;
  p.addresses = {ip};
  p.mtu = 4200;
  c.ports = {p};
  return c;
}

// Shutting down a memif pair: a process whose lcore still polls the port when the peer disconnects can crash in
// the PMD (dpdk-env.md §4). So both stop polling first (`stop_polling`), say so, and wait for the peer to say so
// before either closes its port or exits.
void quiesce(const std::string& exchange, bool server, const std::function<void()>& stop_polling) {
  stop_polling();
  write_file(exchange + "/" + (server ? "server" : "client") + ".quiet", "1");
  (void)wait_file(exchange + "/" + (server ? "client" : "server") + ".quiet", std::chrono::seconds(60));
}

int fail(const std::string& what) {
  std::fprintf(stderr, "uroce_bench_rc_memif: %s\n", what.c_str());
  return 1;
}

void sleep_seconds(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

struct Buffer {
  Buffer() : data(static_cast<uint8_t*>(std::aligned_alloc(4096, kBufferSize)), &std::free) {
    for (std::size_t i = 0; i < kBufferSize; ++i) data.get()[i] = static_cast<uint8_t>(i * 131 + 7);
  }
  std::unique_ptr<uint8_t, decltype(&std::free)> data;
};

void print_result(const Options& o, const char* mode, double messages, double seconds, double cpu_share) {
  const double rate = messages / seconds;
  std::printf(
      "RESULT mode=%s role=%s size=%u pmtu=%u window=%u signal=%u msgs_per_s=%.0f gbps=%.3f "
      "ns_per_msg=%.1f cpu_share=%.3f load=\"%s\"\n",
      mode, o.server ? "server" : "client", o.size, pmtu_for(o.size), o.window, o.signal, rate, rate * o.size * 8 / 1e9,
      1e9 / rate, cpu_share, load_average().c_str());
  std::fflush(stdout);
}

// ------------------------------------------------------------------------------------------------------ uroce

int run_uroce(const Options& o) {
  auto dp = dataplane::Dataplane::start(memif_config(o), std::chrono::seconds(30));
  if (!dp.ok()) return fail(dp.error());
  auto transport = dataplane::RcTransport::start(*dp.value());
  if (!transport.ok()) return fail(transport.error());
  dataplane::RcTransport& t = *transport.value();
  Buffer buffer;
  dataplane::SendQueue sq(1024);
  dataplane::ReceiveQueue rq(16);
  dataplane::CompletionQueue scq(4096), rcq(64);
  dataplane::RcQueuePairSetup setup;
  setup.pd = kPd;
  setup.send_queue = &sq;
  setup.receive_queue = &rq;
  setup.send_cq = &scq;
  setup.receive_cq = &rcq;
  auto qp = t.create_qp(0, setup);
  if (!qp.ok()) return fail(qp.error());
  auto token = t.register_memory(reinterpret_cast<uint64_t>(buffer.data.get()), kBufferSize,
                                 proto::kAccessLocalWrite | proto::kAccessRemoteWrite, kPd);
  if (!token.ok()) return fail(token.error());

  const std::string self = o.server ? "server" : "client", peer = o.server ? "client" : "server";
  const uint32_t psn = (static_cast<uint32_t>(getpid()) * 2654435761u) & 0xFFFFFF;
  write_file(o.exchange + "/" + self, std::to_string(qp.value()->qpn().value()) + " " + std::to_string(psn) + " " +
                                          std::to_string(reinterpret_cast<uint64_t>(buffer.data.get())) + " " +
                                          std::to_string(token.value()));
  const auto info_text = wait_file(o.exchange + "/" + peer);
  if (!info_text) return fail("the peer never wrote its QP information");
  std::istringstream info(*info_text);
  uint32_t peer_qpn = 0, peer_psn = 0, peer_rkey = 0;
  uint64_t peer_addr = 0;
  if (!(info >> peer_qpn >> peer_psn >> peer_addr >> peer_rkey)) return fail("unreadable peer information");

  dataplane::RcPeer remote;
  remote.qpn = proto::Qpn{peer_qpn};
  remote.psn = proto::Psn{peer_psn};
  Options other = o;
  other.server = !o.server;
  remote.ip = memif_config(other).ports[0].addresses[0];
  remote.mac = proto::MacAddr{0x020000000100ull | (o.server ? 2 : 1)};
  remote.path_mtu = pmtu_for(o.size);
  proto::RcQpAttributes attrs;
  attrs.send_psn = proto::Psn{psn};
  attrs.path_mtu = pmtu_for(o.size);
  if (const dataplane::Status s = t.connect(*qp.value(), remote, attrs); !s.ok()) return fail(s.message());
  write_file(o.exchange + "/" + self + ".ready", "1");
  if (!wait_file(o.exchange + "/" + peer + ".ready")) return fail("the peer never became ready");

  int status = 0;
  if (o.server) {
    // The responder's work all happens on the engine; wait until the client has stopped and drained.
    if (!wait_file(o.exchange + "/client.done", std::chrono::seconds(600))) status = fail("the client never finished");
  } else {
    WriteLoadSetup ws;
    ws.transport = &t;
    ws.qp = qp.value();
    ws.send_queue = &sq;
    ws.send_cq = &scq;
    ws.wqe.op = proto::WorkOp::kRdmaWrite;
    ws.wqe.num_sge = 1;
    ws.wqe.length = o.size;
    ws.wqe.sge[0] = {reinterpret_cast<uint64_t>(buffer.data.get()), o.size, proto::LocalToken{token.value()}};
    ws.wqe.remote_addr = peer_addr;
    ws.wqe.rkey = proto::RemoteToken{peer_rkey};
    ws.window = o.window;
    ws.signal_every = o.signal;
    // PSN guard: fewer than 2^23 request packets on this QP (README.md "rc_loopback", known problems).
    const uint64_t packets = (o.size + pmtu_for(o.size) - 1) / pmtu_for(o.size);
    ws.limit = ((uint64_t{1} << 23) - 8 * uint64_t{o.window} * packets) / packets;
    WriteLoad load(ws);
    dataplane::Engine& engine = dp.value()->engine(0);
    if (!engine.add_poller(load.poller()).ok()) return fail("add_poller");
    sleep_seconds(o.warmup);
    CpuShare cpu(kEngineThread);
    cpu.start();
    const auto t0 = Clock::now();
    const uint64_t m0 = load.completed();
    // The timed part ends after --seconds, or earlier when the PSN guard is about to stop posting.
    const auto end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
    while (Clock::now() < end && load.posted() < ws.limit) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const uint64_t m1 = load.completed();
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const double share = cpu.share();
    load.stop();
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (!load.drained() && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!load.drained() || load.failure() != proto::CompletionStatus::kSuccess) {
      status = fail("the load failed: drained " + std::to_string(load.drained()) + ", first failed status " +
                    std::to_string(static_cast<int>(load.failure())) + ", posted " + std::to_string(load.posted()) +
                    ", completed " + std::to_string(load.completed()));
    }
    for (const auto& [name, value] : dataplane::counter_values(engine.counters())) {
      if (value != 0 && status != 0)
        std::fprintf(stderr, "  %s=%llu\n", name.c_str(), static_cast<unsigned long long>(value));
    }
    (void)engine.remove_poller(&load);
    if (status == 0) print_result(o, "uroce", static_cast<double>(m1 - m0), secs, share);
    write_file(o.exchange + "/client.done", std::to_string(status));
  }
  // Traffic has stopped; the engines stop polling before either port closes.
  quiesce(o.exchange, o.server, [&] {
    (void)t.destroy_qp(qp.value());
    (void)t.deregister_memory(token.value());
    transport.value().reset();
    (void)dp.value()->engine(0).stop();
  });
  dp.value()->stop();
  return status;
}

// -------------------------------------------------------------------------------------------------------- raw

struct LcoreJob {
  RawLoop* loop;
  std::atomic<bool> quit{false};
};

int raw_lcore(void* arg) {
  auto& job = *static_cast<LcoreJob*>(arg);
  while (!job.quit.load(std::memory_order_relaxed)) job.loop->step();
  return 0;
}

int run_raw(const Options& o) {
  const config::Config c = memif_config(o);
  if (const dataplane::Status s = dataplane::init_eal(c); !s.ok()) return fail(s.message());
  rte_mempool* pool = rte_pktmbuf_pool_create("bench_raw_pool", c.engine.mbufs_per_engine, c.engine.mbuf_cache, 0,
                                              c.engine.mbuf_data_room, static_cast<int>(rte_socket_id()));
  if (pool == nullptr) return fail("rte_pktmbuf_pool_create");
  auto port = start_raw_port("net_memif0", pool, std::chrono::seconds(30));
  if (!port.ok()) return fail(port.error());
  Buffer buffer;
  RawLoopSetup rs;
  rs.tx_port = rs.rx_port = port.value();
  rs.pool = pool;
  rs.payload = std::min(o.size, pmtu_for(o.size));
  rs.span = o.size;
  rs.src = rs.dst = buffer.data.get();
  rs.transmit = !o.server;
  rs.receive = o.server;
  RawLoop loop(rs);
  LcoreJob job{&loop};
  const unsigned lcore = dataplane::engine_lcore(0);
  if (rte_eal_remote_launch(&raw_lcore, &job, lcore) != 0) return fail("rte_eal_remote_launch");

  int status = 0;
  const auto stop_lcore = [&] {
    loop.stop();
    job.quit.store(true, std::memory_order_relaxed);
    rte_eal_wait_lcore(lcore);
  };
  if (o.server) {
    write_file(o.exchange + "/server.ready", "1");
    // Measure at the receiver once frames flow.
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (loop.received() == 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    sleep_seconds(o.warmup);
    CpuShare cpu(kEngineThread);
    cpu.start();
    const auto t0 = Clock::now();
    const uint64_t p0 = loop.received();
    sleep_seconds(o.seconds);
    const uint64_t p1 = loop.received();
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    const double share = cpu.share();
    const double messages = static_cast<double>(p1 - p0) * rs.payload / o.size;
    if (p1 == p0) status = fail("no frames arrived");
    if (status == 0) print_result(o, "raw", messages, secs, share);
    write_file(o.exchange + "/server.done", "1");
    // Keep receiving until the client has stopped sending, then let the last frames arrive.
    if (!wait_file(o.exchange + "/client.done", std::chrono::seconds(60))) status = fail("the client never stopped");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } else {
    if (!wait_file(o.exchange + "/server.ready")) status = fail("the server never became ready");
    if (!wait_file(o.exchange + "/server.done", std::chrono::seconds(600))) status = fail("the server never finished");
    stop_lcore();
    std::printf("RESULT mode=raw role=client size=%u sent=%llu alloc_failures=%llu\n", o.size,
                static_cast<unsigned long long>(loop.sent()), static_cast<unsigned long long>(loop.alloc_failures()));
    write_file(o.exchange + "/client.done", "1");
  }
  quiesce(o.exchange, o.server, [&] {
    if (o.server) stop_lcore();
  });
  return status;
}

// ------------------------------------------------------------------------------------------------------ probe

// Cache-line round trips between CPU 0 and CPU 1: ~50-75 ns ("near") or ~320-360 ns ("far") on these hosts
// (dpdk-env.md §5). Prints the median of 20 batches of 10000 round trips.
int probe() {
  alignas(64) static std::atomic<uint64_t> ping{0};
  alignas(64) static std::atomic<uint64_t> pong{0};
  constexpr uint64_t kRounds = 10000, kBatches = 20;
  const auto pin = [](unsigned cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  };
  std::thread responder([&] {
    pin(1);
    for (uint64_t i = 1; i <= kRounds * kBatches; ++i) {
      while (ping.load(std::memory_order_acquire) != i) {
      }
      pong.store(i, std::memory_order_release);
    }
  });
  pin(0);
  std::vector<double> ns;
  uint64_t i = 0;
  for (uint64_t b = 0; b < kBatches; ++b) {
    const auto t0 = Clock::now();
    for (uint64_t r = 0; r < kRounds; ++r) {
      ++i;
      ping.store(i, std::memory_order_release);
      while (pong.load(std::memory_order_acquire) != i) {
      }
    }
    ns.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / kRounds);
  }
  responder.join();
  std::sort(ns.begin(), ns.end());
  std::printf("PROBE rtt_ns=%.1f min=%.1f max=%.1f\n", ns[ns.size() / 2], ns.front(), ns.back());
  return 0;
}

}  // namespace
}  // namespace uroce::bench

int main(int argc, char** argv) {
  if (argc >= 2 && std::string_view(argv[1]) == "probe") return uroce::bench::probe();
  const uroce::bench::Options o = uroce::bench::parse(argc, argv);
  return o.raw ? uroce::bench::run_raw(o) : uroce::bench::run_uroce(o);
}
