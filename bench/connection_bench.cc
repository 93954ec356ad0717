// uroce_bench_connection: connections established and torn down per second between two endpoints of one adapter,
// through connection management (issue #10; method and figures in README.md).
//
// One cycle is what an rdma_cm application does per connection: create a QP on each side; NdkConnect from port a
// (198.18.0.1, an ephemeral port) to a listener on port b (198.18.0.2:7174); NdkAccept in the listener's connect
// event; NdkCompleteConnect when the connect completes (the RTU); NdkDisconnect from the active side; the passive
// side's NdkDisconnect after its disconnect event; close both connectors and both QPs. Five CM MADs cross the link
// per cycle (REQ, REP, RTU, DREQ, DREP).
//
//   Cm/in_flight:1     one cycle at a time (each phase waits for the last): setup + teardown latency
//   Cm/in_flight:N     N cycles at once, each phase issued for all N before waiting: the rate
//   OutOfBand/...      baseline, same run: the same QPs created, connected with UroceConnect from attributes the
//                      two sides swap in memory (as perftest does over TCP, no CM; inline, as its ibv_modify_qp
//                      calls are), flushed and closed
//
// Items are connections: items_per_second is connections per second. The adapter runs the embedded default
// configuration (what `uroce-perf --in-process` runs: on 2 CPUs one engine holds both ports and the application
// threads share the other CPU with the CM thread and the notifier). The benchmark thread never spins: it sleeps
// on std::atomic::wait until the callbacks it waits for have run.
//
// Run: uroce_bench_connection --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
// (meson: `meson test -C BUILD --benchmark connection -v`). Report the medians; nothing here is asserted.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <tuple>
#include <vector>

#include <arpa/inet.h>

#include "api/ndk.h"
#include "config/config.h"

namespace uroce::ndk {
namespace {

constexpr uint16_t kListenPort = 7174;

// Completions of one kind, counted; the benchmark thread sleeps until enough have come.
struct Tally {
  std::atomic<uint32_t> done{0};
  std::atomic<uint32_t> failed{0};

  void add(bool ok) {
    if (!ok) failed.fetch_add(1);
    done.fetch_add(1);
    done.notify_all();
  }
  void wait_for(uint32_t n) {
    for (uint32_t seen = done.load(); seen < n; seen = done.load()) done.wait(seen);
  }
  static void on_request(void* context, NTSTATUS status) {
    static_cast<Tally*>(context)->add(status == STATUS_SUCCESS);
  }
  static void on_close(void* context) { static_cast<Tally*>(context)->add(true); }
};

struct Batch;

// One connection's objects.
struct Slot {
  Batch* batch = nullptr;
  uint32_t index = 0;
  Qp* active_qp = nullptr;
  Qp* passive_qp = nullptr;
  Connector* active = nullptr;
  Connector* passive = nullptr;  // from the connect event; read after `accepted` has counted it
};

// One iteration: N cycles, each phase's completions counted together.
struct Batch {
  std::vector<Slot> slots;
  Tally connected, completed, accepted, disconnected, passive_told, closed;

  static void on_connected(void* context, NTSTATUS status);
  static void on_passive_told(void* context) { static_cast<Slot*>(context)->batch->passive_told.add(true); }
};

void Batch::on_connected(void* context, NTSTATUS status) {
  Slot& s = *static_cast<Slot*>(context);
  s.batch->connected.add(status == STATUS_SUCCESS);
  // As an rdma_cm application does on RDMA_CM_EVENT_CONNECT_RESPONSE: complete from the event.
  if (status != STATUS_SUCCESS ||
      s.active->NdkCompleteConnect(nullptr, nullptr, &Tally::on_request, &s.batch->completed) != STATUS_PENDING)
    s.batch->completed.add(false);
}

class Stack {
 public:
  static Stack& get() {
    static Stack stack;
    return stack;
  }
  [[nodiscard]] bool ok() const { return ok_ && !broken_; }

  // Runs `n` cycles through the CM; false if any step failed.
  bool cm_cycles(uint32_t n) {
    // After a failure, callbacks of the batch may still come: it is then left to them (leaked), never freed.
    auto owned = std::make_unique<Batch>();
    Batch& batch = *owned;
    auto broken = [&](const char* what) {
      (void)owned.release();
      return this->broken(what);
    };
    batch.slots.resize(n);
    if (!create_qps(batch)) return broken("NdkCreateQp failed");
    batch_.store(&batch);
    for (Slot& s : batch.slots) {
      if (adapter_->NdkCreateConnector(nullptr, nullptr, &s.active) != STATUS_SUCCESS)
        return broken("NdkCreateConnector failed");
      if (s.active->NdkConnect(s.active_qp, sa(source_), sizeof source_, sa(listen_), sizeof listen_, 1, 1, &s.index,
                               sizeof s.index, &Batch::on_connected, &s) != STATUS_PENDING)
        return broken("NdkConnect failed");
    }
    batch.completed.wait_for(n);  // counts the connects that failed too
    if (batch.completed.failed.load() != 0) return broken("a connect failed");
    batch.accepted.wait_for(n);
    batch_.store(nullptr);
    if (batch.accepted.failed.load() != 0) return broken("an accept failed");
    for (Slot& s : batch.slots) {
      if (s.active->NdkDisconnect(&Tally::on_request, &batch.disconnected) != STATUS_PENDING)
        return broken("NdkDisconnect failed");
    }
    batch.disconnected.wait_for(n);
    if (batch.disconnected.failed.load() != 0) return broken("a disconnect failed");
    batch.passive_told.wait_for(n);
    for (Slot& s : batch.slots) {
      // The peer's DREQ was answered already: nothing to wait for.
      if (s.passive->NdkDisconnect(&Tally::on_request, &batch.disconnected) != STATUS_SUCCESS)
        return broken("the passive side's disconnect");
      for (Connector* c : {s.active, s.passive}) {
        const NTSTATUS st = c->NdkCloseConnector(&Tally::on_close, &batch.closed);
        if (st == STATUS_SUCCESS) batch.closed.add(true);
      }
    }
    batch.closed.wait_for(2 * n);
    return close_qps(batch);
  }

  // The baseline: the same QPs, connected out of band (UroceConnect, no CM), flushed and closed.
  bool out_of_band_cycles(uint32_t n) {
    auto owned = std::make_unique<Batch>();
    Batch& batch = *owned;
    auto broken = [&](const char* what) {
      (void)owned.release();
      return this->broken(what);
    };
    batch.slots.resize(n);
    if (!create_qps(batch)) return broken("NdkCreateQp failed");
    for (Slot& s : batch.slots) {
      // The PSNs and QPNs each side's CM would have carried, swapped in memory.
      for (auto [self, peer, local, remote] : {std::tuple{s.active_qp, s.passive_qp, &source_, &listen_},
                                               std::tuple{s.passive_qp, s.active_qp, &listen_, &source_}}) {
        UroceConnectAttributes attrs;
        attrs.LocalAddress = sa(*local);
        attrs.RemoteAddress = sa(*remote);
        attrs.RemoteQpNumber = peer->UroceGetQpNumber();
        attrs.InboundReadLimit = 1;
        attrs.OutboundReadLimit = 1;
        // Inline (no completion callback), as perftest calls ibv_modify_qp.
        if (self->UroceConnect(attrs, nullptr, nullptr) != STATUS_SUCCESS) return broken("UroceConnect failed");
      }
    }
    for (Slot& s : batch.slots) {
      s.active_qp->NdkFlush();
      s.passive_qp->NdkFlush();
    }
    return close_qps(batch);
  }

  ~Stack() {
    if (broken_) return;  // objects of the failed batch are still open: NdkCloseAdapter would wait for them
    if (listener_ != nullptr) (void)listener_->NdkCloseListener(nullptr, nullptr);
    for (Cq* cq : {cq_a_, cq_b_})
      if (cq != nullptr) (void)cq->NdkCloseCq(nullptr, nullptr);
    if (pd_ != nullptr) (void)pd_->NdkClosePd(nullptr, nullptr);
    if (adapter_ != nullptr) NdkCloseAdapter(adapter_);
  }

 private:
  Stack() {
    const config::LoadResult loaded = config::load_config(config::embedded_default_yaml());
    if (!loaded.config) {
      std::fprintf(stderr, "%s", loaded.describe("embedded default").c_str());
      return;
    }
    if (NdkOpenAdapter(*loaded.config, NdkVersion{1, 2}, &adapter_) != STATUS_SUCCESS) return;
    // Side A's QPs on the first engine, side B's on the last (the same one on 2 CPUs).
    const GroupAffinity first = adapter_->UroceEngineAffinity(0);
    const GroupAffinity last = adapter_->UroceEngineAffinity(static_cast<uint16_t>(adapter_->UroceEngineCount() - 1));
    if (adapter_->NdkCreatePd(nullptr, nullptr, &pd_) != STATUS_SUCCESS ||
        adapter_->NdkCreateCq(4096, nullptr, nullptr, &first, nullptr, nullptr, &cq_a_) != STATUS_SUCCESS ||
        adapter_->NdkCreateCq(4096, nullptr, nullptr, &last, nullptr, nullptr, &cq_b_) != STATUS_SUCCESS ||
        adapter_->NdkCreateListener(&Stack::on_connect_event, this, nullptr, nullptr, &listener_) != STATUS_SUCCESS)
      return;
    source_.sin_family = AF_INET;
    source_.sin_addr.s_addr = htonl(0xC6120001u);  // 198.18.0.1, port 0: an ephemeral port per connector
    listen_.sin_family = AF_INET;
    listen_.sin_addr.s_addr = htonl(0xC6120002u);  // 198.18.0.2
    listen_.sin_port = htons(kListenPort);
    if (listener_->NdkListen(sa(listen_), sizeof listen_, nullptr, nullptr) != STATUS_SUCCESS) return;
    ok_ = true;
  }

  static const sockaddr* sa(const sockaddr_in& in) { return reinterpret_cast<const sockaddr*>(&in); }
  bool broken(const char* what) {
    std::fprintf(stderr, "uroce_bench_connection: %s\n", what);
    broken_ = true;
    return false;
  }

  bool create_qps(Batch& batch) {
    for (uint32_t i = 0; i < batch.slots.size(); ++i) {
      Slot& s = batch.slots[i];
      s.batch = &batch;
      s.index = i;
      if (pd_->NdkCreateQp(cq_a_, cq_a_, &s, 4, 4, 1, 1, 0, nullptr, nullptr, &s.active_qp) != STATUS_SUCCESS ||
          pd_->NdkCreateQp(cq_b_, cq_b_, &s, 4, 4, 1, 1, 0, nullptr, nullptr, &s.passive_qp) != STATUS_SUCCESS)
        return false;
    }
    return true;
  }

  static bool close_qps(Batch& batch) {
    Tally closed;
    for (Slot& s : batch.slots) {
      for (Qp* qp : {s.active_qp, s.passive_qp}) {
        if (qp->NdkCloseQp(&Tally::on_close, &closed) == STATUS_SUCCESS) closed.add(true);
      }
    }
    closed.wait_for(static_cast<uint32_t>(2 * batch.slots.size()));
    return true;
  }

  // The listener's connect event (notifier): the connection's index is the REQ's private data.
  static void on_connect_event(void* context, Connector* incoming) {
    Batch* batch = static_cast<Stack*>(context)->batch_.load();
    uint8_t data[56] = {};
    uint32_t length = sizeof data;
    uint32_t index = UINT32_MAX;
    if (batch != nullptr && incoming->NdkGetConnectionData(nullptr, nullptr, data, &length) == STATUS_SUCCESS)
      std::memcpy(&index, data, sizeof index);
    if (batch == nullptr || index >= batch->slots.size()) {
      (void)incoming->NdkReject(nullptr, 0);
      (void)incoming->NdkCloseConnector([](void*) {}, nullptr);
      return;
    }
    Slot& s = batch->slots[index];
    s.passive = incoming;
    if (incoming->NdkAccept(s.passive_qp, 1, 1, nullptr, 0, &Batch::on_passive_told, &s, &Tally::on_request,
                            &batch->accepted) != STATUS_PENDING)
      batch->accepted.add(false);
  }

  Adapter* adapter_ = nullptr;
  Pd* pd_ = nullptr;
  Cq* cq_a_ = nullptr;
  Cq* cq_b_ = nullptr;
  Listener* listener_ = nullptr;
  sockaddr_in source_{};
  sockaddr_in listen_{};
  std::atomic<Batch*> batch_{nullptr};  // the batch the connect events belong to
  bool ok_ = false;
  bool broken_ = false;
};

template <bool (Stack::*kCycles)(uint32_t)>
void BM_Cycles(benchmark::State& state) {
  const auto n = static_cast<uint32_t>(state.range(0));
  Stack& stack = Stack::get();
  if (!stack.ok()) {
    state.SkipWithError("the adapter did not start");
    return;
  }
  for (auto _ : state) {  // NOLINT(clang-analyzer-deadcode.DeadStores): Google Benchmark's loop idiom
    if (!(stack.*kCycles)(n)) {
      state.SkipWithError("a connection failed");
      return;
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
  // Seconds per connection (printed with an SI prefix: "95.2us").
  state.counters["per_connection"] = benchmark::Counter(static_cast<double>(state.iterations() * n),
                                                        benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_Cm(benchmark::State& state) { BM_Cycles<&Stack::cm_cycles>(state); }
void BM_OutOfBand(benchmark::State& state) { BM_Cycles<&Stack::out_of_band_cycles>(state); }

// Median with min and max over the repetitions (STYLE.md 15); Google Benchmark adds mean, median and stddev.
void cases(benchmark::internal::Benchmark* b) {
  b->Arg(1)->Arg(16)->Arg(128)->ArgName("in_flight")->UseRealTime()->Unit(benchmark::kMillisecond);
  b->ComputeStatistics("min", [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); });
  b->ComputeStatistics("max", [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); });
}
BENCHMARK(BM_Cm)->Apply(cases);
BENCHMARK(BM_OutOfBand)->Apply(cases);

}  // namespace
}  // namespace uroce::ndk

BENCHMARK_MAIN();
