// An engine: one poll-mode lcore that owns a shard of QPs, its RX/TX queue on every port, a mempool, a timer
// wheel, redirect rings to the other engines and its counters (ARCHITECTURE.md "Threads and ownership").
//
// One loop iteration, all of it bounded:
//   1. run up to 4 control commands from the mailbox (register a QP, add a poller, resolve, stop, ...)
//   2. RX burst on each port's queue -> [fault injection] -> [bottleneck link] -> [capture] -> classify each packet:
//        ARP / ICMPv6  -> engine 0's neighbour handling (redirected there from other engines)
//        UDP 4791      -> proto::parse_packet (drops counted per ParseError) -> engine_of(dest QPN):
//                         another engine's QP: batched onto the SPSC redirect ring to that engine;
//                         ours: the QP endpoint's handler, which then owns the mbuf
//        anything else -> counted (rx_not_roce) and freed
//   3. drain the redirect rings from the other engines (packets already parsed and checked once: no ICRC again)
//   4. fire due timers, 5. call the registered pollers (doorbells), 6. flush TX batches and backlogs
//   7. idle policy: busy_poll spins; backoff spins, then rte_pause()s, then sleeps ~30 us until work appears
// An iteration that reads the memory table (resolves a key for a packet, pins, runs a local operation) is inside
// from that first read to the end of step 6: the engine's epoch (EngineActivity) is odd, so that an invalidation on
// another engine can wait for the packets this one is placing (wait_for_engines). An iteration that finds nothing to
// do never touches the epoch's fence.
//
// The datapath allocates only mbufs, takes no locks, makes no syscalls (except the backoff sleep), never logs
// and never throws. EngineContext is the token for engine-only operations: only an engine creates one, and
// handlers, pollers and timers receive it.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

#include "config/config.h"
#include "dataplane/counters.h"
#include "dataplane/neighbor.h"
#include "dataplane/pcapng_writer.h"
#include "dataplane/port.h"
#include "dataplane/qpn.h"
#include "dataplane/status.h"
#include "dataplane/timer_wheel.h"
#include "proto/packet_parser.h"

struct rte_mbuf;
struct rte_mempool;
struct rte_ring;

namespace uroce::dataplane {

class CompletionQueue;
class EngineContext;
class Engine;
class FaultInjector;
class LinkModel;

inline constexpr uint16_t kMaxBurst = 64;  // upper bound for engine.rx_burst and engine.tx_burst
inline constexpr std::size_t kMaxPollers = 64;
inline constexpr uint16_t kMbufStash = 32;  // mbufs per alloc_mbuf() refill; the stash holds twice that (recycling)

// A QP's receive entry point, stored in its engine's dense QP table (in the QPN's slot, qpn.h).
// A plain function pointer and context instead of a virtual interface: one indirect call, no vtable load.
struct QpEndpoint {
  // Called on the owning engine for every well-formed packet (ICRC checked) whose destination QP is this one.
  // From then on the handler owns `mbuf`: it frees it (EngineContext::free_after_burst or rte_pktmbuf_free)
  // or keeps it. `packet` points into the
  // mbuf's data and is valid while the mbuf is. `port` is the port it arrived on.
  using PacketHandler = void (*)(void* self, EngineContext& ctx, const proto::ParsedPacket& packet, PortIndex port,
                                 rte_mbuf* mbuf);
  PacketHandler on_packet = nullptr;
  void* self = nullptr;
  // The handler checks a deferred ICRC itself (ParsedPacket::icrc_deferred: an RC QP's responder does, fused
  // with the payload copy). For any other endpoint the engine checks the ICRC before calling it.
  bool checks_deferred_icrc = false;
};

// Work the engine polls every iteration (SQ doorbell queues, later). Returns true if it did something, which
// keeps an engine with the backoff idle policy awake.
struct Poller {
  using PollFunction = bool (*)(void* self, EngineContext& ctx);
  PollFunction poll = nullptr;
  void* self = nullptr;
  // Runs after every poller without the flag (the RC transport's): what another poller posts on this engine
  // then leaves in the same loop iteration.
  bool after_others = false;
};

using EngineTimer = Timer<EngineContext>;
using EngineTimerWheel = TimerWheel<EngineContext>;

// A control-path request executed on the engine's lcore. The poster keeps it alive until done.
struct EngineCommand {
  void (*run)(void* arg, EngineContext& ctx) = nullptr;
  void* arg = nullptr;
  std::atomic<bool> done{false};
};

// Whether an engine is inside a loop iteration, where it may hold a pointer into registered memory that it resolved
// before an invalidation (EngineContext::wait_for_engines). Odd: inside; even: between iterations, idle or stopped.
// One per engine, each on its own cache line: its engine writes it twice per iteration, and other engines read it
// only when they wait.
struct alignas(64) EngineActivity {
  std::atomic<uint64_t> epoch{0};
};

// Everything one engine is wired to; made by Dataplane.
struct EngineSetup {
  EngineId id = 0;
  EngineId engine_count = 1;
  const config::Config* config = nullptr;
  const PortSet* ports = nullptr;
  rte_mempool* pool = nullptr;
  rte_ring* mailbox = nullptr;          // SPSC: control thread(s), serialised by Engine -> this engine
  std::vector<rte_ring*> redirect_out;  // [owner]: this engine -> owner; nullptr at [id]
  std::vector<rte_ring*> redirect_in;   // [source]: source -> this engine; nullptr at [id]
  CaptureRing* capture = nullptr;       // nullptr: capture off
  EngineActivity* activity = nullptr;   // [engine_count], shared by every engine of the Dataplane
};

class EngineContext {
 public:
  EngineContext(const EngineContext&) = delete;
  EngineContext& operator=(const EngineContext&) = delete;
  ~EngineContext();

  [[nodiscard]] EngineId id() const noexcept { return id_; }
  // The context whose loop runs on the calling thread; nullptr on any thread that is not an engine's.
  [[nodiscard]] static const EngineContext* running_here() noexcept;
  [[nodiscard]] EngineId engine_count() const noexcept { return engine_count_; }
  [[nodiscard]] uint64_t now() const noexcept { return now_; }  // TSC at the start of this loop iteration
  [[nodiscard]] uint64_t tsc_hz() const noexcept { return tsc_hz_; }
  [[nodiscard]] std::size_t port_count() const noexcept { return tx_.size(); }
  [[nodiscard]] const Port& port(PortIndex p) const noexcept { return ports_[p]; }
  [[nodiscard]] rte_mempool* pool() const noexcept { return pool_; }

  // An mbuf from this engine's pool, or nullptr when the pool is empty (counted in mbuf_alloc_failures):
  // that is backpressure, and the caller retries later. It comes from a stash the engine refills
  // kMbufStash at a time with rte_pktmbuf_alloc_bulk (one mempool cache access per refill, not per mbuf).
  [[nodiscard]] rte_mbuf* alloc_mbuf() noexcept;

  // `cq` (a slice this engine produces) owes the arm handshake (CompletionQueue::push_deferring_events): the engine
  // runs it at the end of this loop iteration, and before it acknowledges a command. Engine only.
  void owe_completion_events(CompletionQueue& cq) noexcept;

  // A packet handler is done with `m`: the engine frees it together with the rest of the RX burst
  // (rte_pktmbuf_free_bulk), after the handlers have run. Engine only.
  void free_after_burst(rte_mbuf* m) noexcept;

  // Queues `m` for this engine's TX queue on `port` and takes ownership. Packets leave in bursts of tx_burst,
  // or at the end of the loop iteration. What a short burst leaves behind waits in a bounded backlog
  // (engine.tx_backlog), ahead of anything sent later; when the backlog is full the packet is dropped and
  // counted (tx_backlog_drops). Returns false if `m` itself was dropped on the spot.
  bool send(PortIndex port, rte_mbuf* m) noexcept;
  // Whether `port` takes one more packet without dropping one: the backlog has room for it and for the batch ahead
  // of it. The RC transport asks before it builds a packet and holds the packet back when not (counted in
  // tx_backpressure): backpressure instead of a drop that only a retransmission timeout would repair.
  [[nodiscard]] bool tx_has_room(PortIndex port) const noexcept {
    const TxQueue& q = tx_[port];
    return q.backlog_size + q.count < q.backlog.size();
  }

  [[nodiscard]] EngineTimerWheel& timers() noexcept { return timers_; }
  [[nodiscard]] EngineCounters& counters() noexcept { return counters_; }
  [[nodiscard]] PortCounters& port_counters(PortIndex p) noexcept { return port_counters_[p]; }
  // Engine 0's neighbour table; nullptr on other engines.
  [[nodiscard]] NeighborTable* neighbors() noexcept { return neighbors_.get(); }

  // Engine only, at a point where it holds no pointer into registered memory (between packets): waits until each
  // engine in `engines` (bit e for EngineId e; this engine's own bit is ignored) has left the loop iteration it is
  // in, if it is in one. An invalidation calls it after it made the key invalid: from then on no engine is still
  // copying into or out of the memory through a key it resolved for the packet it was on (IBTA 10.6.7: the peer
  // reaches the memory no more once the invalidation completes; dataplane/README.md says what this does not cover).
  // While it waits this engine counts as between iterations, so two engines waiting for each other both go on. A
  // command runs inside its engine's iteration: a slow one delays an engine waiting here.
  void wait_for_engines(uint32_t engines) noexcept;
  // Engine only, before each read of the memory table (RcQueuePair::table()): the first one in a loop iteration
  // makes the iteration inside (enter_iteration), so that wait_for_engines on another engine waits for the end of
  // it. An iteration that reads no key holds no pointer resolved in it, and pays no fence.
  void begin_memory_access() noexcept {
    if (!inside_) enter_iteration();
  }

 private:
  friend class Engine;

  struct TxQueue {
    uint16_t port_id = 0;
    uint16_t count = 0;
    std::array<rte_mbuf*, kMaxBurst> batch{};
    std::vector<rte_mbuf*> backlog;  // circular, capacity engine.tx_backlog
    uint32_t backlog_head = 0;
    uint32_t backlog_size = 0;
  };
  struct RedirectBatch {
    uint16_t count = 0;
    std::array<rte_mbuf*, kMaxBurst> mbufs{};
  };

  explicit EngineContext(const EngineSetup& setup);

  void run() noexcept;
  uint32_t run_commands() noexcept;
  uint32_t poll_port(PortIndex p) noexcept;
  void dispatch(PortIndex p, rte_mbuf* m, bool from_wire) noexcept;
  void dispatch_neighbor(PortIndex p, rte_mbuf* m, bool is_arp, bool from_wire) noexcept;
  void count_parse_error(proto::ParseError e) noexcept;
  [[gnu::cold]] void drop_bad_icrc(rte_mbuf* m) noexcept;
  void redirect(EngineId owner, rte_mbuf* m) noexcept;
  void flush_redirect(EngineId owner) noexcept;
  uint32_t drain_redirects() noexcept;
  uint32_t poll_pollers() noexcept;
  uint32_t flush_all_tx() noexcept;
  uint32_t flush_tx(TxQueue& q) noexcept;
  uint32_t drain_backlog(TxQueue& q) noexcept;
  uint16_t transmit(TxQueue& q, rte_mbuf** pkts, uint16_t n) noexcept;
  bool push_backlog(TxQueue& q, rte_mbuf* m) noexcept;
  void capture(PortIndex p, CaptureDirection direction, const rte_mbuf* m) noexcept;
  [[nodiscard]] bool refill_mbuf_stash() noexcept;
  void flush_freed_mbufs() noexcept;
  void publish_completion_events() noexcept;
  void idle(uint32_t work) noexcept;
  [[gnu::cold]] void release_held_mbufs() noexcept;
  // The loop iteration's bounds for wait_for_engines(): odd from enter_iteration() to leave_iteration(), which
  // does nothing for an iteration that never entered.
  void enter_iteration() noexcept;
  void leave_iteration() noexcept;

  const EngineId id_;
  const EngineId engine_count_;
  const uint16_t rx_burst_;
  const uint16_t tx_burst_;
  const bool busy_poll_;
  const uint64_t tsc_hz_;
  const PortSet& ports_;
  rte_mempool* const pool_;
  rte_ring* const mailbox_;
  std::vector<rte_ring*> redirect_out_;
  std::vector<rte_ring*> redirect_in_;
  std::vector<RedirectBatch> redirect_batches_;  // [owner]
  std::vector<PortIndex> port_index_of_id_;      // DPDK port id -> PortIndex, for redirected mbufs
  std::vector<TxQueue> tx_;                      // [port]
  std::unique_ptr<PortCounters[]> port_counters_;
  struct QpSlot {
    QpEndpoint endpoint;
    proto::Qpn qpn{};  // the number registered here: a packet for another generation of the slot finds no QP
  };
  std::vector<QpSlot> qps_;      // [qp_slot_of(qpn)], qp_table_size(engine.max_qps_per_engine) entries
  const uint32_t qp_slot_mask_;  // qps_.size() - 1
  // Allocated and reset, not yet handed out: refilled kMbufStash at a time when empty, and topped up with the
  // received frames flush_freed_mbufs() recycles, which the room above a refill leaves space for.
  std::array<rte_mbuf*, std::size_t{2} * kMbufStash> mbuf_stash_{};
  uint16_t mbuf_stash_count_ = 0;
  std::array<rte_mbuf*, kMaxBurst> freed_mbufs_{};  // free_after_burst(), until flush_freed_mbufs()
  std::array<CompletionQueue*, 64> owed_events_{};  // owe_completion_events(), until publish_completion_events()
  uint16_t owed_event_count_ = 0;
  uint16_t freed_mbuf_count_ = 0;
  std::array<Poller, kMaxPollers> pollers_{};
  std::size_t poller_count_ = 0;
  EngineTimerWheel timers_;
  EngineCounters counters_;
  std::vector<std::unique_ptr<FaultInjector>> faults_;  // [port]; empty when fault injection is off
  std::vector<std::unique_ptr<LinkModel>> links_;       // [port]; empty when the bottleneck is off
  CaptureRing* const capture_;
  EngineActivity* const activity_;            // [engine_count_]: every engine's, this one's at [id_]
  std::unique_ptr<NeighborTable> neighbors_;  // engine 0 only
  uint64_t now_ = 0;
  uint32_t idle_iterations_ = 0;
  bool running_ = true;
  bool inside_ = false;  // this iteration entered (begin_memory_access): the epoch is odd
};

// The control side of an engine: launch, stop, and commands executed on its lcore.
class Engine {
 public:
  explicit Engine(const EngineSetup& setup);
  ~Engine();  // stops the engine if it is still running
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  [[nodiscard]] EngineId id() const noexcept { return context_.id_; }
  [[nodiscard]] unsigned lcore() const noexcept { return engine_lcore(context_.id_); }

  // Starts the loop on lcore(), with rte_eal_remote_launch.
  [[nodiscard]] Status launch();
  // Finishes the commands already posted, stops the loop and waits for the lcore. Idempotent.
  Status stop();

  // Runs fn(EngineContext&) on the engine's lcore between two loop iterations and waits for it to return.
  // Control path only: an error if the engine is not running or if called from an engine's lcore.
  template <class Fn>
  [[nodiscard]] Status call(Fn&& fn);
  // Posts `command` without waiting: it runs on the engine between two loop iterations, in posting order with
  // every other command, and `command.done` turns true (release) once it has. The caller keeps it alive until
  // then (Engine::done). Control path; an error if the engine is not running, and then the engine is inert: the
  // refusal of a stopping engine returns once it has left its loop.
  [[nodiscard]] Status post(EngineCommand& command);
  [[nodiscard]] static bool done(const EngineCommand& command) noexcept {
    return command.done.load(std::memory_order_acquire);
  }

  // QP table. The QPN must belong to this engine (engine_of), and its slot (qpn.h) be free; unregister_qp fails
  // unless the QPN is the one registered in its slot.
  [[nodiscard]] Status register_qp(proto::Qpn qpn, QpEndpoint endpoint);
  [[nodiscard]] Status unregister_qp(proto::Qpn qpn);
  [[nodiscard]] Status add_poller(Poller poller);
  [[nodiscard]] Status remove_poller(void* self);

  // Read from any thread with Counter::read().
  [[nodiscard]] const EngineCounters& counters() const noexcept { return context_.counters_; }
  [[nodiscard]] const PortCounters& port_counters(PortIndex p) const noexcept { return context_.port_counters_[p]; }

 private:
  enum class State : uint8_t { kIdle, kRunning, kStopping, kStopped };

  static int lcore_main(void* engine);
  Status execute(EngineCommand& command);
  [[nodiscard]] Status post_locked(EngineCommand& command);
  static void wait_until_done(const EngineCommand& command);

  EngineContext context_;
  std::mutex control_mutex_;  // control threads only: serialises the mailbox's single producer and state_
  State state_ = State::kIdle;
};

template <class Fn>
Status Engine::call(Fn&& fn) {
  using Function = std::remove_reference_t<Fn>;
  EngineCommand command;
  command.run = [](void* arg, EngineContext& ctx) { (*static_cast<Function*>(arg))(ctx); };
  command.arg = const_cast<void*>(static_cast<const void*>(&fn));
  return execute(command);
}

}  // namespace uroce::dataplane
