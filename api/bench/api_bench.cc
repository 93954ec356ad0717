// uroce_bench_api: what the API costs.
//
//   CqRing/*        completion ring throughput between two threads (no EAL): an "engine" thread appends,
//                   the consumer drains through the CQ's slices (CompletionSlices::consume), without the arm
//                   handshake, with it on every append, and with it once per 16 appends (the engine's way). Both
//                   threads float over every CPU (affinity reset).
//   PostPoll/*      post + poll per operation through the whole stack: NdkWrite of 64 bytes from A to B over
//                   one busy-polling engine (CPU 0) and a net_ring pair, polled with NdkGetCqResults by this
//                   thread on another CPU. window 1: one at a time (latency); window 64, signal every 16: the
//                   pipelined cost per operation.
//   PostOnly        NdkWrite with SILENT_SUCCESS and DEFER (validation + WQE write, no doorbell): the posting
//                   thread's own cost per request.
//
// Run: uroce_bench_api --benchmark_repetitions=5 --benchmark_report_aggregates_only=true (meson: `meson test
// --benchmark --suite api`). Report the medians; nothing here is asserted.
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <pthread.h>
#include <sched.h>

#include "api/completion_slices.h"
#include "api/ndk.h"
#include "dataplane/eal.h"

namespace uroce::ndk {
namespace {

// A std::thread inherits the EAL main thread's affinity: let ring threads float over every CPU instead.
void float_over_all_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (unsigned c = 0; c < std::thread::hardware_concurrency(); ++c) CPU_SET(c, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

// --------------------------------------------------------------------------------------------- CQ ring

// arm_handshake: 0 none (a plain SPSC ring), 1 on every append (CompletionQueue::push), 2 owed and run once per 16
// appends (push_deferring_events + publish_events, as an engine does once per loop iteration).
void BM_CqRing(benchmark::State& state) {
  const bool with_arm = state.range(0) != 0;
  const bool deferred = state.range(0) == 2;
  float_over_all_cpus();
  detail::CompletionSlices cq(1u << 16, 1, nullptr, nullptr);
  dataplane::CompletionQueue& ring = cq.ring(0);
  if (!with_arm) ring.attach_events(nullptr);  // plain SPSC ring: a full ring just refuses the append
  std::atomic<uint64_t> consumed{0};
  std::atomic<bool> stop{false};
  std::thread producer([&] {
    float_over_all_cpus();
    proto::Completion c;
    uint64_t produced = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      // Stay within half the ring: with the arm attached a full ring is an overrun, which fails the CQ.
      if (produced - consumed.load(std::memory_order_acquire) >= (1u << 15)) continue;
      c.context = produced;
      if (!deferred) {
        if (ring.push(c, 1, false)) ++produced;
        continue;
      }
      if (ring.push_deferring_events(c, 1, false, 0) != dataplane::CompletionQueue::Deferred::kRefused) ++produced;
      if (produced % 16 == 0) ring.publish_events();
    }
  });
  uint64_t total = 0;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores): Google Benchmark's loop idiom
    const uint32_t n = cq.consume(256, [&](const dataplane::CompletionEntry& e) { benchmark::DoNotOptimize(e); });
    total += n;
    consumed.store(total, std::memory_order_release);
  }
  stop.store(true);
  producer.join();
  state.SetItemsProcessed(static_cast<int64_t>(total));
  state.counters["ns_per_completion"] =
      benchmark::Counter(static_cast<double>(total), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_CqRing)->Arg(0)->Arg(1)->Arg(2)->ArgName("arm_handshake")->UseRealTime();

// ------------------------------------------------------------------------------------- through the stack

config::Config bench_config() {
  config::Config c;
  const std::vector<unsigned> cpus = dataplane::test_engine_cpus();
  c.eal.lcores = {cpus.front()};  // one engine, busy polling, alone on its CPU
  c.eal.hugepages = config::HugePages::kOff;
  c.engine.idle = config::IdlePolicy::kBusyPoll;
  c.engine.mbufs_per_engine = 8191;
  c.engine.max_qps_per_engine = 64;
  for (int i = 0; i < 2; ++i) {
    config::PortConfig p;
    p.name.assign(1, static_cast<char>('a' + i));  // (not `= i == 0 ? "a" : "b"`: gcc 12 -Wrestrict false positive)
    p.device = "ring:ab";
    p.mac = config::MacAddress{0x02, 0, 0, 0, 0, static_cast<uint8_t>(0x0a + i)};
    config::IpAddress ip;
    ip.bytes = {198, 18, 0, static_cast<uint8_t>(1 + i)};
    ip.prefix_length = 24;
    p.addresses = {ip};
    p.mtu = 4200;
    c.ports.push_back(p);
  }
  return c;
}

struct Side {
  Pd* pd = nullptr;
  Cq* cq = nullptr;
  Mr* mr = nullptr;
  Qp* qp = nullptr;
  std::vector<uint8_t> buffer = std::vector<uint8_t>(1 << 16);
  sockaddr_in ip{};
};

// One adapter and one connected pair for the whole run.
class Stack {
 public:
  static Stack& get() {
    static Stack stack;
    return stack;
  }
  bool ok() const { return ok_; }
  Side a, b;

  ~Stack() {
    for (Side* s : {&a, &b}) {
      if (s->qp) (void)s->qp->NdkCloseQp(nullptr, nullptr);
      if (s->mr) (void)s->mr->NdkCloseMr(nullptr, nullptr);
      if (s->cq) (void)s->cq->NdkCloseCq(nullptr, nullptr);
      if (s->pd) (void)s->pd->NdkClosePd(nullptr, nullptr);
    }
    if (adapter_) NdkCloseAdapter(adapter_);
  }

 private:
  Stack() {
    if (!dataplane::init_eal_for_tests().ok()) return;
    if (NdkOpenAdapter(bench_config(), NdkVersion{1, 2}, &adapter_) != STATUS_SUCCESS) return;
    for (int i = 0; i < 2; ++i) {
      Side& s = i == 0 ? a : b;
      s.ip.sin_family = AF_INET;
      s.ip.sin_addr.s_addr = htonl(0xC6120001u + static_cast<uint32_t>(i));
      if (adapter_->NdkCreatePd(nullptr, nullptr, &s.pd) != STATUS_SUCCESS ||
          adapter_->NdkCreateCq(4096, nullptr, nullptr, nullptr, nullptr, nullptr, &s.cq) != STATUS_SUCCESS ||
          s.pd->NdkCreateMr(false, nullptr, nullptr, &s.mr) != STATUS_SUCCESS ||
          s.mr->NdkRegisterMr(s.buffer.data(), s.buffer.size(), NDK_MR_FLAG_ALLOW_REMOTE_WRITE, nullptr, nullptr) !=
              STATUS_SUCCESS ||
          s.pd->NdkCreateQp(s.cq, s.cq, nullptr, 64, 1024, 1, 1, 64, nullptr, nullptr, &s.qp) != STATUS_SUCCESS)
        return;
    }
    for (auto [self, peer] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
      UroceConnectAttributes attrs;
      attrs.LocalAddress = reinterpret_cast<const sockaddr*>(&self->ip);
      attrs.RemoteAddress = reinterpret_cast<const sockaddr*>(&peer->ip);
      attrs.RemoteQpNumber = peer->qp->UroceGetQpNumber();
      if (self->qp->UroceConnect(attrs, nullptr, nullptr) != STATUS_SUCCESS) return;
    }
    // This thread polls: keep it off the engine's CPU.
    const unsigned engine_cpu = dataplane::test_engine_cpus().front();
    cpu_set_t set;
    CPU_ZERO(&set);
    for (unsigned c = 0; c < std::thread::hardware_concurrency(); ++c)
      if (c != engine_cpu || std::thread::hardware_concurrency() == 1) CPU_SET(c, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    ok_ = true;
  }

  Adapter* adapter_ = nullptr;
  bool ok_ = false;
};

void BM_PostPoll(benchmark::State& state) {
  const auto window = static_cast<uint32_t>(state.range(0));
  const auto signal_every = static_cast<uint32_t>(state.range(1));
  Stack& stack = Stack::get();
  if (!stack.ok()) {
    state.SkipWithError("the adapter did not start");
    return;
  }
  Side& a = stack.a;
  const NdkSge sge{a.buffer.data(), 64, a.mr->NdkGetLocalTokenFromMr()};
  const uint64_t remote = reinterpret_cast<uint64_t>(stack.b.buffer.data());
  const uint32_t token = stack.b.mr->NdkGetRemoteTokenFromMr();
  NdkResult results[64];
  uint64_t posted = 0, completed = 0;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores): Google Benchmark's loop idiom
    // Keep `window` requests outstanding; every `signal_every`-th is signalled and retires those before it.
    while (posted - completed < window) {
      const bool signalled = (posted + 1) % signal_every == 0;
      if (a.qp->NdkWrite(nullptr, &sge, 1, remote, token, signalled ? 0 : NDK_OP_FLAG_SILENT_SUCCESS) != STATUS_SUCCESS)
        break;
      ++posted;
    }
    uint32_t n;
    while ((n = a.cq->NdkGetCqResults(results, 64)) == 0) {
    }
    completed += uint64_t{n} * signal_every;
  }
  while (completed < posted) {  // drain, untimed, so the next case starts empty
    const uint32_t n = a.cq->NdkGetCqResults(results, 64);
    completed += uint64_t{n} * signal_every;
  }
  state.SetItemsProcessed(static_cast<int64_t>(posted));
  state.counters["ns_per_op"] =
      benchmark::Counter(static_cast<double>(posted), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_PostPoll)->Args({1, 1})->Args({64, 16})->ArgNames({"window", "signal_every"})->UseRealTime();

void BM_PostOnly(benchmark::State& state) {
  Stack& stack = Stack::get();
  if (!stack.ok()) {
    state.SkipWithError("the adapter did not start");
    return;
  }
  Side& a = stack.a;
  const NdkSge sge{a.buffer.data(), 64, a.mr->NdkGetLocalTokenFromMr()};
  const uint64_t remote = reinterpret_cast<uint64_t>(stack.b.buffer.data());
  const uint32_t token = stack.b.mr->NdkGetRemoteTokenFromMr();
  NdkResult result;
  uint64_t posted = 0;
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores): Google Benchmark's loop idiom
    // 63 deferred silent posts, then one signalled post that rings the doorbell, then wait (untimed).
    for (int i = 0; i < 63; ++i) {
      benchmark::DoNotOptimize(
          a.qp->NdkWrite(nullptr, &sge, 1, remote, token, NDK_OP_FLAG_SILENT_SUCCESS | NDK_OP_FLAG_DEFER));
    }
    benchmark::DoNotOptimize(a.qp->NdkWrite(nullptr, &sge, 1, remote, token, 0));
    posted += 64;
    state.PauseTiming();
    while (a.cq->NdkGetCqResults(&result, 1) == 0) {
    }
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<int64_t>(posted));
  state.counters["ns_per_post"] =
      benchmark::Counter(static_cast<double>(posted), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_PostOnly)->UseRealTime();

}  // namespace
}  // namespace uroce::ndk

BENCHMARK_MAIN();
