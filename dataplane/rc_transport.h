// The RC transport on the engines: RC queue pairs bound to their owning engine,
// registered memory in one table every engine reads, and doorbells from application threads.
//
//   RcTransport        control path: creates QPs (the QPN picks the engine), connects
//                      them (ARP/ND, header template, attributes), registers memory in the
//                      shared table (memory_table.h: lock-free per-slot seqlocks), and rings
//                      doorbells.
//   EngineTransport    one per engine, touched only by that engine: its QPs, the doorbell
//                      ring, and the list of QPs with work.
//   RcQueuePair        one QP: proto::RcQp (the state machines) plus the RcEnv that
//                      binds it to mbufs, the memory table, its SQ/RQ and CQs, and executes
//                      its local operations (fast register, invalidate, bind) on the table.
//
// The application side of a QP is its SendQueue/ReceiveQueue/CompletionQueue
// (work_queues.h). Posting is: write the WQE, SendQueue::publish_tail(), then
// RcTransport::ring_doorbell() (skipped under NDK_OP_FLAG_DEFER).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_set>
#include <vector>

#include "config/config.h"
#include "dataplane/dataplane.h"
#include "dataplane/memory_table.h"
#include "dataplane/telemetry.h"
#include "dataplane/work_queues.h"
#include "proto/rc_qp.h"

struct rte_mbuf;
struct rte_ring;

namespace uroce::dataplane {

class EngineTransport;

// What a QP is made of before it connects.
struct RcQueuePairSetup {
  PortIndex port = 0;
  uint32_t pd = 0;
  SendQueue* send_queue = nullptr;  // capacity a power of two
  ReceiveQueue* receive_queue = nullptr;
  CompletionQueue* send_cq = nullptr;
  CompletionQueue* receive_cq = nullptr;
  uint32_t access = proto::kAccessRemoteWrite | proto::kAccessRemoteRead | proto::kAccessRemoteAtomic;
  uint64_t completion_context = 0;  // copied into every CompletionEntry of this QP (the API's QPContext)
  // An SRQ: shared by every QP on one engine, so the engine is still its only consumer. Its
  // receives are not flushed with a QP and its ACKs advertise no credits.
  bool receive_queue_shared = false;
  ReceiveLimitEvents* receive_limit_events = nullptr;  // SRQ limit event, checked after every pop
  // This QP's congestion control, read at connect(); null: the dataplane's (config.congestion). Benchmarks set it
  // to compare QPs with and without DCQCN in one run.
  const config::CongestionConfig* congestion = nullptr;
};

// Where the peer is and how to talk to it: what perftest / ibv_rc_pingpong exchange
// out of band (rocev2.md §8.1-8.2).
struct RcPeer {
  proto::Qpn qpn{};
  proto::Psn psn{};  // the peer's first request PSN (our receive PSN)
  config::IpAddress ip{};
  std::optional<proto::MacAddr> mac;  // resolved with ARP/ND when absent
  uint32_t path_mtu = 1024;
  uint8_t hop_limit = 64;
  uint8_t traffic_class = 0;
  uint8_t max_dest_rd_atomic = 16;      // the peer's responder resources: caps our initiator depth
  std::optional<PortIndex> local_port;  // the port to reach the peer through (default: the setup's port)
};

class RcQueuePair final : public proto::RcEnv {
 public:
  RcQueuePair(proto::Qpn qpn, const RcQueuePairSetup& setup, EngineTransport& engine);
  ~RcQueuePair();
  RcQueuePair(const RcQueuePair&) = delete;
  RcQueuePair& operator=(const RcQueuePair&) = delete;

  [[nodiscard]] proto::Qpn qpn() const noexcept { return qpn_; }
  [[nodiscard]] const RcQueuePairSetup& setup() const noexcept { return setup_; }
  // Engine only (the state machines are not thread-safe); counters may be read
  // racily for reporting.
  [[nodiscard]] proto::RcQp& protocol() noexcept { return qp_; }
  // Request packets this QP sent zero-copy (engine writes, anyone reads; for tests and reports).
  [[nodiscard]] uint64_t zero_copy_packets() const noexcept {
    return zero_copy_packets_.load(std::memory_order_relaxed);
  }

  // --- engine side ---
  static void on_packet(void* self, EngineContext& ctx, const proto::ParsedPacket& packet, PortIndex port,
                        rte_mbuf* mbuf);
  // What poll() found. kBusy: it made progress and may make more (poll again next iteration). kStarved: its port's
  // TX backlog was full or the pool empty (poll again once the port has room). kWaiting: it has requests in
  // flight or held back by a window, and nothing moves them but a packet (an ACK, a response), a doorbell or its
  // deadline (retransmission, RNR): it may leave the active list with its wake timer armed. kIdle: nothing at
  // all until a packet or a doorbell.
  enum class PollResult : uint8_t { kBusy, kStarved, kWaiting, kIdle };
  // Sends, responds and runs timers.
  PollResult poll(EngineContext& ctx) noexcept;
  // Engine only: arms the wake timer at the protocol's next deadline (none: a packet or a doorbell wakes it).
  void sleep_until_deadline(EngineContext& ctx) noexcept;
  // Engine only: disarms the wake timer (the QP is going away).
  void cancel_wake(EngineContext& ctx) noexcept { ctx.timers().cancel(wake_timer_); }
  void publish_send_queue_head() noexcept;

  // Doorbell de-duplication: true if the caller must enqueue the QP (the flag was clear). The flag stays set
  // from the first post that finds it clear until the engine finds the QP idle, so a stream of posts to a busy
  // QP rings once (EngineTransport::poll).
  bool claim_doorbell() noexcept { return !doorbell_pending_.exchange(true, std::memory_order_acq_rel); }
  // An RMW, not a store: it reads the flag the last ringer set (acquire), so that
  // ringer's SQ tail is visible to the poll that follows.
  void release_doorbell() noexcept { doorbell_pending_.exchange(false, std::memory_order_acq_rel); }
  bool active = false;  // on the engine's active list or its port's starved queue (engine only)
  void sync_counters(EngineCounters& engine_counters) noexcept;

  // Any thread: asks the engine to move the QP to the error state (NdkFlush): everything
  // posted, and everything posted later, completes flushed. Lock-free; takes effect on the
  // engine's next poll of the QP (the caller rings the doorbell).
  void request_flush() noexcept { flush_requested_.store(true, std::memory_order_release); }
  // Any thread: true once the responder has taken a request from the peer. The CM's passive side counts that as
  // the connection established when the RTU was lost (IBTA 12.6.10, "communication established").
  [[nodiscard]] bool peer_request_seen() const noexcept { return peer_request_seen_.load(std::memory_order_relaxed); }
  // After publishing a receive: true once the engine has seen the QP fail (error state, or
  // flushed before connect). Such a receive completes flushed only if the engine polls the
  // QP again, so the poster rings the doorbell. The receive-post / failure handshake
  // (Dekker's pattern, like the CQ arm): the engine marks the failure, then flushes the
  // receive queue; the poster publishes its receive, then reads the mark. Both touch the
  // mark with an RMW (acq_rel), so either the engine's flush sees the receive or the poster
  // sees the failure.
  [[nodiscard]] bool failed_after_receive_post() noexcept {
    return failed_.fetch_add(0, std::memory_order_acq_rel) != 0;
  }
  // Engine only (Engine::call): completions that went to `from` go to `to` from now on (CQ resize).
  void retarget_completions(CompletionQueue* from, CompletionQueue* to) noexcept {
    if (setup_.send_cq == from) setup_.send_cq = to;
    if (setup_.receive_cq == from) setup_.receive_cq = to;
  }

  // Engine only: a CQ of this QP overran (ndkpi.md §9.9). Checked before the QP runs and before a packet for it
  // is handled; the QP then stops (stop_after_overrun).
  [[nodiscard]] bool completions_failed() const noexcept {
    return setup_.send_cq->failed() || setup_.receive_cq->failed();
  }

  // --- proto::RcEnv ---
  uint8_t* tx_begin(std::size_t length) override;
  SplitFrame tx_begin_zero_copy(std::size_t header_length, const uint8_t* payload, uint32_t payload_length,
                                proto::LocalToken token, std::size_t tail_length) override;
  void tx_commit(std::size_t length) override;
  uint64_t now_ns() override;
  uint8_t* resolve_local(proto::LocalToken token, uint64_t addr, uint32_t length, uint32_t access) override;
  uint8_t* resolve_remote(proto::RemoteToken token, uint64_t addr, uint32_t length, uint32_t access) override;
  bool grants_paged(uint32_t token, uint64_t addr, uint32_t length, uint32_t access, bool local) override;
  bool copy_paged(uint32_t token, uint64_t addr, uint8_t* buffer, uint32_t length, uint32_t access, bool local,
                  bool into_memory) override;
  void retire_page_list(uint32_t token, uint8_t page_list) override;
  bool invalidate_remote(proto::RemoteToken token) override;
  const proto::RecvWqe* pop_receive() override;
  uint32_t receive_credits() override;
  uint32_t send_queue_tail() override;
  void complete_send(const proto::Completion& c) override;
  void complete_receive(const proto::Completion& c) override;
  void flush_receives() override;
  proto::CompletionStatus execute_local(const proto::SendWqe& w) override;

 private:
  void push_completion(CompletionQueue& cq, const proto::Completion& c, bool is_receive);
  bool invalidate_and_wait(uint32_t token) noexcept;
  friend class RcTransport;
  friend class EngineTransport;

  void stop_after_overrun() noexcept;
  void flush_for_close() noexcept;
  static void wake(EngineTimer& timer, EngineContext& ctx) noexcept;
  // This QP as the memory table knows it: its PD for regions, and itself for the windows bound through it.
  [[nodiscard]] Requester requester() const noexcept { return {setup_.pd, qpn_.value()}; }
  // Every read of the memory table from the engine goes through here: it makes the engine's loop iteration one that
  // an invalidation on another engine waits for (EngineContext::begin_memory_access).
  [[nodiscard]] MemoryTable& table() noexcept;

  proto::Qpn qpn_;
  RcQueuePairSetup setup_;
  EngineTransport& engine_;
  proto::RcQp qp_;
  EngineContext* ctx_ = nullptr;  // set while the engine runs this QP
  rte_mbuf* tx_mbuf_ = nullptr;
  proto::RecvWqe popped_{};
  // The last region each side resolved (engine only): WQEs and WRITEs usually name the same key again.
  MemoryTable::ResolveCache local_keys_;
  MemoryTable::ResolveCache remote_keys_;
  uint32_t published_sq_head_ = 0;
  // Armed while the QP is off the active list waiting for its retransmission or RNR deadline (engine only).
  EngineTimer wake_timer_{&RcQueuePair::wake, this};
  RcQueuePair* next_starved_ = nullptr;         // the next QP in its port's starved queue (engine only)
  bool starved_ = false;                        // in that queue (engine only)
  bool tx_refused_ = false;                     // tx_begin found no TX room or mbuf during this poll (engine only)
  proto::RcCounters synced_{};                  // what sync_counters() last added to the engine's counters
  std::optional<RcPeer> peer_;                  // set by connect(), before the engine sees the QP connected
  bool flushed_before_connect_ = false;         // engine only
  std::atomic<bool> peer_request_seen_{false};  // written by the engine once; a hint, so relaxed
  std::atomic<uint64_t> zero_copy_packets_{0};  // one writer (the engine): relaxed load and store, no RMW
  // What posting threads write, each on its own line: the poster's RMW of one must not evict the line of a
  // field the engine reads on every poll (false sharing cost a cross-core miss per post and per poll).
  // doorbell_pending_: claimed (RMW) by every post, cleared by the engine only when the QP goes idle.
  alignas(kCacheLine) std::atomic<bool> doorbell_pending_{false};
  // flush_requested_: read by every poll, written only by NdkFlush.
  alignas(kCacheLine) std::atomic<bool> flush_requested_{false};
  // failed_: RMW by every receive post (see failed_after_receive_post()).
  alignas(kCacheLine) std::atomic<uint8_t> failed_{0};
};

class EngineTransport {
 public:
  EngineTransport(EngineId id, MemoryTable& memory, uint32_t doorbell_capacity, std::size_t port_count);
  ~EngineTransport();
  EngineTransport(const EngineTransport&) = delete;
  EngineTransport& operator=(const EngineTransport&) = delete;

  [[nodiscard]] MemoryTable& memory() noexcept { return memory_; }
  [[nodiscard]] uint64_t ns_per_tsc_q32() const noexcept { return ns_per_tsc_q32_; }
  [[nodiscard]] uint64_t tsc_per_ns_q32() const noexcept { return tsc_per_ns_q32_; }
  [[nodiscard]] bool iova_is_va() const noexcept { return iova_is_va_; }

  // Engine side: the Poller. Drains doorbells into the active list and polls it.
  static bool poll(void* self, EngineContext& ctx);
  void activate(RcQueuePair& qp) noexcept;
  // Control path, on the engine: forgets `qp` (active list, wake timer and pending doorbells).
  void forget(RcQueuePair& qp, EngineContext& ctx) noexcept;

  [[nodiscard]] std::size_t active_count() const noexcept { return active_.size(); }  // engine only

  // Application threads: multi-producer enqueue onto this engine's doorbell ring.
  bool enqueue_doorbell(RcQueuePair& qp) noexcept;

 private:
  using PollResult = RcQueuePair::PollResult;
  // The QPs refused TX on one port, in the order they were refused (intrusive through next_starved_).
  struct StarvedQueue {
    RcQueuePair* head = nullptr;
    RcQueuePair* tail = nullptr;
  };
  bool go_quiet(RcQueuePair& qp, EngineContext& ctx) noexcept;
  void push_starved(RcQueuePair& qp) noexcept;

  MemoryTable& memory_;  // shared by every engine (memory_table.h)
  rte_ring* doorbells_ = nullptr;
  std::vector<RcQueuePair*> active_;
  std::vector<StarvedQueue> starved_;  // [port]
  uint64_t ns_per_tsc_q32_ = 0;        // nanoseconds per TSC tick in 32.32 fixed point
  uint64_t tsc_per_ns_q32_ = 0;        // and its inverse: no division when a QP parks
  bool iova_is_va_ = false;            // rte_eal_iova_mode() == RTE_IOVA_VA: a buffer's IOVA is its address
  uint64_t next_counter_sync_tsc_ = 0;
};

// The control path of the RC transport for one Dataplane.
class RcTransport {
 public:
  [[nodiscard]] static Result<std::unique_ptr<RcTransport>> start(Dataplane& dataplane);
  ~RcTransport();

  // A QP on `engine` (its QPN encodes it), registered with the engine but not yet
  // connected: packets for it are dropped until connect().
  [[nodiscard]] Result<RcQueuePair*> create_qp(EngineId engine, const RcQueuePairSetup& setup);
  // Moves the QP to RTS towards `peer` (RESET -> INIT -> RTR -> RTS in one step).
  [[nodiscard]] Status connect(RcQueuePair& qp, const RcPeer& peer, const proto::RcQpAttributes& attributes,
                               std::chrono::milliseconds resolve_timeout = std::chrono::seconds(3));
  [[nodiscard]] Status destroy_qp(RcQueuePair* qp);

  // Registers [addr, addr + length) with `access` in protection domain `pd`; returns the
  // token (used as both L_Key and R_Key). Visible to every engine on return: no engine
  // round trip. `kind`: kRegion, kFastRegisterRegion (valid at once) or kPrivileged.
  [[nodiscard]] Result<uint32_t> register_memory(uint64_t addr, uint64_t length, uint32_t access, uint32_t pd,
                                                 MemoryKind kind = MemoryKind::kRegion);
  // A slot for a fast-register MR or a memory window of `pd`, invalid until a fast register
  // or bind executes on an engine; returns its first token. Release it with deregister_memory
  // (with the token it holds now).
  [[nodiscard]] Result<uint32_t> reserve_memory(MemoryKind kind, uint32_t pd);
  // Makes `token` invalid at once for every engine, and the memory windows bound onto it too, then, if an engine
  // ever read it, waits until every running engine has finished the loop iteration it was in (a no-op command on
  // each), so that no packet that resolved the token or a window before it turned invalid is still copying into or
  // out of the memory when this returns. Not from an engine's
  // lcore (that engine cannot wait for itself: it is skipped). Zero-copy TX mbufs may still point into the memory
  // (sent, not yet consumed by the NIC or the peer engine): until memory_in_flight() says they are gone, the slot is
  // not reused and the caller must not release the memory (NdkDeregisterMr completes later: STATUS_PENDING).
  [[nodiscard]] Status deregister_memory(uint32_t token);
  // Before a bind onto the region `region_token` is posted: its deregistration then ends the windows bound onto it
  // (MemoryTable::note_window_bind).
  void note_window_bind(uint32_t region_token) noexcept { memory_.note_window_bind(region_token); }
  // After deregister_memory(token): true while zero-copy mbufs still point into the memory it covered. Any
  // thread; once false it stays false, and the consumers' reads of the memory happened before it turned false.
  [[nodiscard]] bool memory_in_flight(uint32_t token);
  // Control path: waits (sleeping) until memory_in_flight(token) is false. The engines must be running.
  void wait_memory_drained(uint32_t token);
  // Ends a reserved region or window whatever its key byte is now, as deregister_memory() ends a registration
  // (the engines, the windows bound onto it, zero-copy mbufs: wait_memory_drained(token) before the memory is reused).
  void release_memory_slot(uint32_t token);
  [[nodiscard]] MemoryTable& memory() noexcept { return memory_; }

  // After SendQueue::publish_tail(): wakes the owning engine. Any thread.
  void ring_doorbell(RcQueuePair& qp) noexcept;
  // NdkFlush: request_flush() and a doorbell. Any thread, lock-free.
  void flush(RcQueuePair& qp) noexcept;
  // CQ resize, without waiting on the engine: posts `retarget` to `engine`, where every listed QP that still
  // exists sends the completions it sent to `from` to `to` from then on. `retarget.command` is done (Engine::done)
  // once they all have, so `from` takes nothing more; the caller keeps `retarget` alive until then. An error if
  // the engine is not running (then no QP of it completes anything, into either ring).
  struct Retarget {
    EngineCommand command;
    std::vector<RcQueuePair*> qps;  // all on `engine`
    CompletionQueue* from = nullptr;
    CompletionQueue* to = nullptr;
  };
  [[nodiscard]] Status post_retarget(EngineId engine, Retarget& retarget);

  [[nodiscard]] Dataplane& dataplane() noexcept { return dataplane_; }
  [[nodiscard]] EngineTransport& engine(EngineId e) noexcept { return *engines_[e]; }

  // Control path: the QPs that exist (created, not yet destroyed) and the memory-table slots in use (registered
  // regions, reserved fast-register regions and windows).
  struct Usage {
    uint32_t qps = 0;
    uint32_t memory_slots = 0;
  };
  [[nodiscard]] Usage usage();
  // Control path: how many QPs engine `engine` polls on each loop iteration (its active list), read on the
  // engine. None if the engine has stopped.
  [[nodiscard]] std::optional<std::size_t> active_qps(EngineId engine);

  // Control path (the telemetry thread): the QPNs that exist, and one QP's state, peer, PSNs and counters, read
  // on its engine (Engine::call) so the engine's writes are not raced. None if the QP is gone or its engine stopped.
  [[nodiscard]] std::vector<uint32_t> qp_numbers();
  [[nodiscard]] std::optional<QpReport> report_qp(uint32_t qpn);

 private:
  std::optional<uint32_t> new_token_locked();
  explicit RcTransport(Dataplane& dataplane);

  Dataplane& dataplane_;
  MemoryTable memory_;
  std::vector<std::unique_ptr<EngineTransport>> engines_;
  // The QP numbers of one engine (control path, under mutex_). A QP takes a free slot of the engine's QP table and
  // the slot's next generation (qpn.h). A destroyed QP's number waits out a time-wait before it serves again: its
  // peer's CM may still hold the old connection and would take a new one from that QPN for a stale one (IBTA
  // 12.9.8.3.1; Linux's CM rejects it with "stale connection" for seconds). Its slot serves at once under the
  // next number, so the rate at which QPs come and go is not bound by the table's size over the time-wait (4096
  // slots once allowed ~1365 new QPs a second; a connection-rate benchmark found peers rejecting the rest as
  // stale). A waiting number is taken early only when no free slot has another.
  struct QpnSpace {
    std::vector<bool> in_use;               // [slot], the first engine.max_qps_per_engine slots of the table
    std::vector<uint32_t> next_generation;  // [slot], cycling (from a random one) through the slot's numbers
    std::deque<std::pair<std::chrono::steady_clock::time_point, uint32_t>> time_wait;  // (until, local index)
    std::unordered_multiset<uint32_t> waiting;                                         // the local indexes in time_wait
  };
  static constexpr std::chrono::seconds kQpnTimeWait{3};
  // The local index `slot`'s next QPN takes; advances the slot's generation when `take`.
  uint32_t next_local_index(QpnSpace& space, uint32_t slot, bool take);
  std::vector<QpnSpace> qpn_spaces_;  // [engine]
  uint32_t qp_table_size_ = 0;        // qp_table_size(engine.max_qps_per_engine)
  std::vector<std::unique_ptr<RcQueuePair>> qps_;
  std::vector<uint32_t> free_memory_slots_;
  std::vector<uint32_t> draining_memory_tokens_;  // deregistered, zero-copy mbufs still in flight: not yet free
  // deregister_memory() (exact_token) and release_memory_slot().
  Status retire_memory(uint32_t token, bool exact_token);
  void reclaim_drained_locked();
  uint32_t next_memory_slot_ = 1;
  // Identifiers an off-path attacker cannot guess (proto/entropy.h): QPNs take a random free slot and start each
  // slot's generations at a random one, and key bytes start at a random value per transport (NICs vary their key
  // bytes the same way). Under mutex_.
  uint8_t key_generation_ = 0;
  std::mutex mutex_;
};

}  // namespace uroce::dataplane
