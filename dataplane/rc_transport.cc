#include "dataplane/rc_transport.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <string>
#include <thread>

#include <arpa/inet.h>
#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include "dataplane/ring.h"

namespace uroce::dataplane {

namespace {

constexpr unsigned kPacketBudget = 32;  // per QP per poll: bounded work per loop iteration
constexpr uint32_t kMemorySlots = 1u << 16;

uint32_t next_pow2(uint32_t n) {
  uint32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

}  // namespace

// ---------------------------------------------------------------- RcQueuePair

RcQueuePair::RcQueuePair(proto::Qpn qpn, const RcQueuePairSetup& setup, EngineTransport& engine)
    : qpn_(qpn), setup_(setup), engine_(engine) {}

// RcTransport::destroy_qp disarms the wake timer on the engine (forget); a QP destroyed with the engines already
// stopped is disarmed here, on the wheel the stopped engine left (the engine outlives the transport).
RcQueuePair::~RcQueuePair() {
  if (ctx_ != nullptr) cancel_wake(*ctx_);
}

void RcQueuePair::wake(EngineTimer& timer, EngineContext&) noexcept {
  auto& qp = *static_cast<RcQueuePair*>(timer.owner());
  qp.engine_.activate(qp);
}

void RcQueuePair::sleep_until_deadline(EngineContext& ctx) noexcept {
  const uint64_t deadline = qp_.next_deadline_ns();
  if (deadline == 0) return;
  const uint64_t now = now_ns();
  const uint64_t delay_ns = deadline > now ? deadline - now : 0;
  const auto delay_cycles =
      static_cast<uint64_t>((static_cast<unsigned __int128>(delay_ns) * engine_.tsc_per_ns_q32()) >> 32);
  ctx.timers().schedule_at(wake_timer_, ctx.now() + delay_cycles);
}

void RcQueuePair::on_packet(void* self, EngineContext& ctx, const proto::ParsedPacket& packet, PortIndex,
                            rte_mbuf* mbuf) {
  auto& qp = *static_cast<RcQueuePair*>(self);
  qp.ctx_ = &ctx;
  if (qp.completions_failed()) [[unlikely]]
    qp.stop_after_overrun();  // before the packet: a dead QP places nothing (counted as rx_qp_not_ready)
  qp.qp_.on_packet(packet);
  if (!qp.peer_request_seen_.load(std::memory_order_relaxed)) [[unlikely]] {
    // The responder counts only the requests it took (in sequence, on a connected path, with valid keys).
    const proto::RcCounters& c = qp.qp_.counters();
    if (c.rx_send_requests + c.rx_write_requests + c.rx_read_requests + c.rx_atomic_requests != 0)
      qp.peer_request_seen_.store(true, std::memory_order_relaxed);
  }
  ctx.free_after_burst(mbuf);  // payload was copied into registered memory: nothing keeps the mbuf
  // ACKs, responses and newly allowed sends go out from poll(), after the whole RX
  // burst, so one ACK covers every packet of the burst (coalescing).
  qp.engine_.activate(qp);
}

// Tells the application which SQ slots it may reuse. Release: the engine's reads of retired WQEs happen before
// the application overwrites them.
void RcQueuePair::publish_send_queue_head() noexcept {
  const uint32_t head = qp_.send_queue_head();
  if (head != published_sq_head_) {
    published_sq_head_ = head;
    setup_.send_queue->publish_head(head);
  }
}

// ndkpi.md §9.9: once its CQ overran, the QP is unusable and its CQ reports nothing further. It stops here, the
// first time the engine runs it or takes a packet for it after the overrun (it may be idle, or on another engine
// than the slice that overran): the error state executes nothing, neither our work nor the peer's requests. Its
// work completes flushed; the failed CQ refuses those entries (CompletionQueue::push), and a healthy CQ of the
// QP (a separate receive or initiator CQ) takes them, so that every post it accepted still completes there.
void RcQueuePair::stop_after_overrun() noexcept {
  if (qp_.state() == proto::QpState::kReset) {
    flushed_before_connect_ = true;
  } else {
    qp_.enter_error(proto::CompletionStatus::kWorkRequestFlushed);
  }
}

RcQueuePair::PollResult RcQueuePair::poll(EngineContext& ctx) noexcept {
  ctx_ = &ctx;
  if (completions_failed()) [[unlikely]]
    stop_after_overrun();
  // Acquire pairs with request_flush(): a flush asked for before the doorbell is seen here. A load first: the
  // exchange would take the line exclusive on every poll.
  if (flush_requested_.load(std::memory_order_relaxed) && flush_requested_.exchange(false, std::memory_order_acquire)) {
    if (qp_.state() == proto::QpState::kReset) {
      flushed_before_connect_ = true;  // receives may be posted before connect (ndkpi.md §11)
    } else {
      qp_.enter_error(proto::CompletionStatus::kWorkRequestFlushed);
    }
  }
  if (qp_.state() == proto::QpState::kError || flushed_before_connect_) {
    // The engine half of the receive-post / failure handshake (failed_after_receive_post):
    // mark with an RMW, then flush.
    if (failed_.load(std::memory_order_relaxed) == 0) (void)failed_.exchange(1, std::memory_order_acq_rel);
    // Receives posted after the failure complete flushed too (NDK: the QP is dead, everything
    // on it completes with STATUS_CANCELLED). An SRQ's receives belong to its other QPs.
    if (!setup_.receive_queue_shared) flush_receives();
  }
  if (qp_.state() == proto::QpState::kReset) return PollResult::kIdle;
  const uint64_t deadline = qp_.next_deadline_ns();
  if (deadline != 0 && now_ns() >= deadline) qp_.on_timer();
  const auto [sent, answered] = qp_.transmit(kPacketBudget);  // requests, then responses (a lone ACK may wait)
  publish_send_queue_head();                                  // the silent retirements since the last completion
  if (tx_refused_) [[unlikely]] {
    tx_refused_ = false;
    return PollResult::kStarved;
  }
  // A QP in the error state flushes whatever is posted, which needs no packet: it stays busy until done.
  if (sent != 0 || answered != 0 || qp_.has_responses() || qp_.state() == proto::QpState::kError) {
    const bool more =
        sent != 0 || answered != 0 || qp_.has_unsent_work() || qp_.has_outstanding() || qp_.has_responses();
    return more ? PollResult::kBusy : PollResult::kIdle;
  }
  // Nothing moved: whatever is posted waits behind a window (outstanding PSNs, READ credits, a fence, an RNR
  // wait) that only an incoming packet or a deadline opens, or the requests in flight wait for their ACKs.
  return qp_.has_unsent_work() || qp_.has_outstanding() ? PollResult::kWaiting : PollResult::kIdle;
}

uint8_t* RcQueuePair::tx_begin(std::size_t length) {
  // A full TX backlog holds the packet back, as an empty pool does: the QP stays active and sends it later. With
  // thousands of active QPs on one engine the backlog used to overflow, and the QPs late in the active list lost
  // their packets on every round until their retries ran out (uroce_bench_qp_scale, 4000 QPs).
  if (!ctx_->tx_has_room(setup_.port)) [[unlikely]] {
    ctx_->counters().tx_backpressure.add();
    tx_refused_ = true;
    return nullptr;
  }
  rte_mbuf* m = ctx_->alloc_mbuf();
  if (m == nullptr) [[unlikely]] {  // empty pool: backpressure, counted by the engine
    tx_refused_ = true;
    return nullptr;
  }
  char* data = rte_pktmbuf_append(m, static_cast<uint16_t>(length));
  if (data == nullptr) {  // frame larger than the data room: a configuration error, never a crash
    tx_refused_ = true;
    rte_pktmbuf_free(m);
    return nullptr;
  }
  tx_mbuf_ = m;
  return reinterpret_cast<uint8_t*>(data);
}

namespace {

// The free callback of a zero-copy payload segment: the NIC (or the peer engine on a ring link) is done
// reading the registered memory. Runs on whichever thread frees the mbuf.
void release_zero_copy_payload(void*, void* pins) { MemoryTable::unpin_tx(static_cast<std::atomic<uint32_t>*>(pins)); }

}  // namespace

// Three mbufs: the headers, the payload attached in place (rte_pktmbuf_attach_extbuf, its shared info kept in
// the payload mbuf's own unused data room), and the pad and ICRC. Any of them missing is no failure: the
// requester copies instead.
proto::RcEnv::SplitFrame RcQueuePair::tx_begin_zero_copy(std::size_t header_length, const uint8_t* payload,
                                                         uint32_t payload_length, proto::LocalToken token,
                                                         std::size_t tail_length) {
  if (!ctx_->tx_has_room(setup_.port)) [[unlikely]] {  // as in tx_begin()
    ctx_->counters().tx_backpressure.add();
    return {};
  }
  MemoryTable& memory = engine_.memory();
  std::atomic<uint32_t>* const pins =
      memory.pin_for_tx(token.value(), reinterpret_cast<uint64_t>(payload), payload_length);
  if (pins == nullptr) return {};
  rte_mbuf* const head = ctx_->alloc_mbuf();
  rte_mbuf* const body = head != nullptr ? ctx_->alloc_mbuf() : nullptr;
  rte_mbuf* const tail = body != nullptr ? ctx_->alloc_mbuf() : nullptr;
  if (tail == nullptr) {
    if (head != nullptr) rte_pktmbuf_free(head);
    if (body != nullptr) rte_pktmbuf_free(body);
    MemoryTable::unpin_tx(pins);
    return {};
  }
  auto* const headers = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(head, static_cast<uint16_t>(header_length)));
  auto* const end = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(tail, static_cast<uint16_t>(tail_length)));
  if (headers == nullptr || end == nullptr) [[unlikely]] {  // a data room too small for the headers: config error
    rte_pktmbuf_free(head);
    rte_pktmbuf_free(body);
    rte_pktmbuf_free(tail);
    MemoryTable::unpin_tx(pins);
    return {};
  }
  auto* const shinfo = rte_pktmbuf_mtod(body, rte_mbuf_ext_shared_info*);
  shinfo->free_cb = &release_zero_copy_payload;
  shinfo->fcb_opaque = pins;
  rte_mbuf_ext_refcnt_set(shinfo, 1);
  // The IOVA matters only to a PCI NIC, which needs the region DMA-mapped as well (not done yet; see
  // config/README.md on engine.zero_copy_threshold). In IOVA-as-VA mode it is the address itself.
  const rte_iova_t iova = engine_.iova_is_va() ? reinterpret_cast<rte_iova_t>(payload) : RTE_BAD_IOVA;
  rte_pktmbuf_attach_extbuf(body, const_cast<uint8_t*>(payload), iova, static_cast<uint16_t>(payload_length), shinfo);
  body->data_len = static_cast<uint16_t>(payload_length);
  body->pkt_len = payload_length;
  // Three segments are far below RTE_MBUF_MAX_NB_SEGS, the only way rte_pktmbuf_chain() fails.
  (void)rte_pktmbuf_chain(head, body);
  (void)rte_pktmbuf_chain(head, tail);
  tx_mbuf_ = head;
  zero_copy_packets_.store(zero_copy_packets_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  return {headers, end};
}

void RcQueuePair::tx_commit(std::size_t) {
  ctx_->send(setup_.port, tx_mbuf_);
  tx_mbuf_ = nullptr;
}

uint64_t RcQueuePair::now_ns() {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(ctx_->now()) * engine_.ns_per_tsc_q32()) >> 32);
}

uint8_t* RcQueuePair::resolve_local(proto::LocalToken token, uint64_t addr, uint32_t length, uint32_t access) {
  return engine_.memory().resolve(local_keys_, token.value(), addr, length, access, setup_.pd, true);
}

uint8_t* RcQueuePair::resolve_remote(proto::RemoteToken token, uint64_t addr, uint32_t length, uint32_t access) {
  return engine_.memory().resolve(remote_keys_, token.value(), addr, length, access, setup_.pd);
}

bool RcQueuePair::grants_paged(uint32_t token, uint64_t addr, uint32_t length, uint32_t access, bool local) {
  return engine_.memory().grants(token, addr, length, access, setup_.pd, local);
}

bool RcQueuePair::copy_paged(uint32_t token, uint64_t addr, uint8_t* buffer, uint32_t length, uint32_t access,
                             bool local, bool into_memory) {
  return engine_.memory().copy(token, addr, buffer, length, access, setup_.pd, local, into_memory);
}

void RcQueuePair::retire_page_list(uint32_t token, uint8_t page_list) {
  engine_.memory().unstage_pages(token, page_list);
}

bool RcQueuePair::invalidate_remote(proto::RemoteToken token) {
  return engine_.memory().invalidate_remote(token.value(), setup_.pd);
}

const proto::RecvWqe* RcQueuePair::pop_receive() {
  uint32_t head = 0;
  uint32_t tail = 0;
  for (;;) {
    ReceiveQueue& rq = *setup_.receive_queue;
    // A grown SRQ continues in its successor once this ring is empty (posting order across the rings). The link
    // is read before the tail: a link seen means every publish to this ring is visible to the tail read after
    // it (link_successor's release), so no receive is left behind.
    ReceiveQueue* next = setup_.receive_queue_shared ? rq.successor() : nullptr;
    head = rq.consumer_own_head();
    tail = rq.tail();
    if (head != tail) break;
    if (next == nullptr) return nullptr;
    setup_.receive_queue = next;  // every QP of the SRQ runs on this engine: each moves on at its next pop
  }
  ReceiveQueue& rq = *setup_.receive_queue;
  popped_ = rq.slot(head);  // copy before the slot is handed back
  rq.publish_head(head + 1);
  if (setup_.receive_limit_events != nullptr) {
    uint32_t remaining = tail - (head + 1);
    for (const ReceiveQueue* later = rq.successor(); later != nullptr; later = later->successor())
      remaining += later->tail() - later->consumer_own_head();
    setup_.receive_limit_events->on_consumed(remaining);
  }
  return &popped_;
}

uint32_t RcQueuePair::receive_credits() {
  if (setup_.receive_queue_shared) return UINT32_MAX;  // IBTA 9.7.5.1.2: no end-to-end credits with an SRQ
  const ReceiveQueue& rq = *setup_.receive_queue;
  return rq.tail() - rq.consumer_own_head();
}

uint32_t RcQueuePair::send_queue_tail() { return setup_.send_queue->tail(); }

// A full CQ (overrun) drops the entry and fails the CQ: it is reported to the consumer
// through the CQ (STATUS_BUFFER_OVERFLOW), never by overwriting unread entries.
void RcQueuePair::complete_send(const proto::Completion& c) {
  // NDK lets the consumer post again as soon as it has reaped a completion, so the WQE's slot goes back first:
  // push() publishes the entry with a release store, which orders the head's store before it. (The completer
  // has moved the SQ head past the WQE before it completes it; RcQp::complete_wqe.)
  publish_send_queue_head();
  push_completion(*setup_.send_cq, c, false);
}

// The CQ's arm handshake waits for the end of the engine's loop iteration: one RMW per CQ per iteration instead of
// one per completion. Completions come only from the owning engine (a stopped engine takes no commands, so even a
// QP's destruction flushes there), whose list of owed CQs is its own.
void RcQueuePair::push_completion(CompletionQueue& cq, const proto::Completion& c, bool is_receive) {
  assert(ctx_ != nullptr && EngineContext::running_here() == ctx_);
  if (cq.push_deferring_events(c, qpn_.value(), is_receive, setup_.completion_context) ==
      CompletionQueue::Deferred::kFirstOwed)
    ctx_->owe_completion_events(cq);
}

void RcQueuePair::complete_receive(const proto::Completion& c) { push_completion(*setup_.receive_cq, c, true); }

// Local operations act on the shared memory table; the failure statuses are the ones rxe
// uses (LOC_QP_OP_ERR for fast register and invalidate, MW_BIND_ERR for bind).
proto::CompletionStatus RcQueuePair::execute_local(const proto::SendWqe& w) {
  MemoryTable& memory = engine_.memory();
  const proto::MemoryOperation& m = w.memory;
  switch (w.op) {
    case proto::WorkOp::kFastRegister:
      return memory.fast_register(m.token, m.addr, m.length, m.access, setup_.pd, m.page_list)
                 ? proto::CompletionStatus::kSuccess
                 : proto::CompletionStatus::kLocalQpOperationError;
    case proto::WorkOp::kLocalInvalidate:
      return memory.invalidate_local(m.token, setup_.pd) ? proto::CompletionStatus::kSuccess
                                                         : proto::CompletionStatus::kLocalQpOperationError;
    case proto::WorkOp::kBindMemoryWindow:
      return memory.bind_window(m.token, m.region_token, m.addr, m.length, m.access, setup_.pd)
                 ? proto::CompletionStatus::kSuccess
                 : proto::CompletionStatus::kMemoryWindowBindError;
    default:
      return proto::CompletionStatus::kLocalQpOperationError;
  }
}

void RcQueuePair::flush_receives() {
  // An SRQ's receives belong to every QP on it: one QP failing leaves them to the others (proto's enter_error
  // calls this whatever the receive queue is).
  if (setup_.receive_queue_shared) return;
  while (const proto::RecvWqe* r = pop_receive()) {
    proto::Completion c;
    c.context = r->context;
    c.status = proto::CompletionStatus::kWorkRequestFlushed;
    complete_receive(c);
  }
}

// Adds what the QP counted since the last sync to the engine's transport counters
// (exported through telemetry under the rxe/mlx5 names).
void RcQueuePair::sync_counters(TransportCounters& t) noexcept {
  const proto::RcCounters& now = qp_.counters();
  proto::RcCounters& was = synced_;
  const auto add = [](Counter& c, uint64_t current, uint64_t& previous) {
    c.add(current - previous);
    previous = current;
  };
  add(t.out_of_sequence, now.out_of_sequence, was.out_of_sequence);
  add(t.duplicate_request, now.duplicate_request, was.duplicate_request);
  add(t.packet_seq_err, now.packet_seq_err, was.packet_seq_err);
  add(t.implied_nak_seq_err, now.implied_nak_seq_err, was.implied_nak_seq_err);
  add(t.local_ack_timeout_err, now.local_ack_timeout_err, was.local_ack_timeout_err);
  add(t.rnr_nak_retry_err, now.rnr_nak_retry_err, was.rnr_nak_retry_err);
  add(t.rcvd_rnr_err, now.rnr_nak_received, was.rnr_nak_received);
  uint64_t out_of_buffer_seen = was.rnr_nak_sent;  // one event, two names (rxe and mlx5)
  add(t.out_of_buffer, now.rnr_nak_sent, out_of_buffer_seen);
  add(t.send_rnr_err, now.rnr_nak_sent, was.rnr_nak_sent);
  add(t.retry_exceeded_err, now.retry_exceeded_err, was.retry_exceeded_err);
  add(t.rx_write_requests, now.rx_write_requests, was.rx_write_requests);
  add(t.rx_read_requests, now.rx_read_requests, was.rx_read_requests);
  add(t.rx_atomic_requests, now.rx_atomic_requests, was.rx_atomic_requests);
  add(t.resp_local_length_error, now.resp_local_length_error, was.resp_local_length_error);
  add(t.resp_remote_access_errors, now.resp_remote_access_error, was.resp_remote_access_error);
  add(t.req_remote_access_errors, now.req_remote_access_error, was.req_remote_access_error);
  add(t.req_remote_invalid_request, now.req_remote_invalid_request, was.req_remote_invalid_request);
  add(t.resp_invalid_request, now.resp_invalid_request, was.resp_invalid_request);
  add(t.resp_resources_exceeded, now.resp_resources_exceeded, was.resp_resources_exceeded);
  add(t.resp_duplicate_unmatched, now.resp_duplicate_unmatched, was.resp_duplicate_unmatched);
  add(t.req_remote_operational_error, now.req_remote_operational_error, was.req_remote_operational_error);
  add(t.req_response_out_of_window, now.req_response_out_of_window, was.req_response_out_of_window);
  add(t.req_unexpected_response, now.req_unexpected_response, was.req_unexpected_response);
  add(t.rx_qp_not_ready, now.rx_qp_not_ready, was.rx_qp_not_ready);
  add(t.rx_pkey_mismatch, now.rx_pkey_mismatch, was.rx_pkey_mismatch);
  add(t.rx_wrong_transport, now.rx_wrong_transport, was.rx_wrong_transport);
  add(t.rx_path_mismatch, now.rx_path_mismatch, was.rx_path_mismatch);
  add(t.np_ecn_marked_roce_packets, now.np_ecn_marked_roce_packets, was.np_ecn_marked_roce_packets);
  add(t.np_cnp_sent, now.np_cnp_sent, was.np_cnp_sent);
  add(t.rp_cnp_handled, now.rp_cnp_handled, was.rp_cnp_handled);
  add(t.rp_cnp_ignored, now.rp_cnp_ignored, was.rp_cnp_ignored);
  add(t.tx_paced, now.tx_paced, was.tx_paced);
}

// ------------------------------------------------------------ EngineTransport

EngineTransport::EngineTransport(EngineId id, MemoryTable& memory, uint32_t doorbell_capacity, std::size_t port_count)
    : memory_(memory), starved_(port_count) {
  const std::string name = "uroce_db" + std::to_string(id);
  // Many application threads ring, one engine drains: MP/SC.
  doorbells_ = rte_ring_create(name.c_str(), next_pow2(doorbell_capacity + 1), SOCKET_ID_ANY, RING_F_SC_DEQ);
  active_.reserve(doorbell_capacity);  // never grows on the datapath
  ns_per_tsc_q32_ = static_cast<uint64_t>((static_cast<unsigned __int128>(1'000'000'000) << 32) / rte_get_tsc_hz());
  tsc_per_ns_q32_ = static_cast<uint64_t>((static_cast<unsigned __int128>(rte_get_tsc_hz()) << 32) / 1'000'000'000);
  iova_is_va_ = rte_eal_iova_mode() == RTE_IOVA_VA;
}

EngineTransport::~EngineTransport() { rte_ring_free(doorbells_); }

void EngineTransport::activate(RcQueuePair& qp) noexcept {
  if (qp.active) return;
  qp.active = true;
  active_.push_back(&qp);  // capacity reserved for every QP of the engine
}

void EngineTransport::forget(RcQueuePair& qp, EngineContext& ctx) noexcept {
  qp.cancel_wake(ctx);
  if (qp.starved_) {
    // Every port's queue: the QP is in the one of the port it sent on, whatever its setup says by now.
    for (StarvedQueue& q : starved_) {
      RcQueuePair* previous = nullptr;
      for (RcQueuePair** link = &q.head; *link != nullptr; link = &(*link)->next_starved_) {
        if (*link != &qp) {
          previous = *link;
          continue;
        }
        *link = qp.next_starved_;
        if (q.tail == &qp) q.tail = previous;
        break;
      }
    }
    qp.starved_ = false;
  } else if (qp.active) {
    active_.erase(std::find(active_.begin(), active_.end(), &qp));
  }
  qp.active = false;
  // The application may not post while it closes the QP (NDK object lifetime rules),
  // so no new doorbell for it can arrive; drop those already queued.
  RcQueuePair* rung[kMaxRingBurst];
  std::vector<RcQueuePair*> others;
  while (unsigned n = ring_sc_dequeue_burst(doorbells_, rung, kMaxRingBurst)) {
    for (unsigned i = 0; i < n; ++i)
      if (rung[i] != &qp) others.push_back(rung[i]);
  }
  for (RcQueuePair* o : others) {
    o->release_doorbell();
    activate(*o);
  }
}

bool EngineTransport::enqueue_doorbell(RcQueuePair& qp) noexcept {
  return doorbells_ != nullptr && ring_mp_enqueue(doorbells_, &qp);
}

bool EngineTransport::poll(void* self, EngineContext& ctx) {
  auto& et = *static_cast<EngineTransport*>(self);
  RcQueuePair* rung[kMaxRingBurst];
  const unsigned n = ring_sc_dequeue_burst(et.doorbells_, rung, kMaxRingBurst);
  // A rung QP stays claimed while it is active: its posts find the flag set and skip the ring, and this loop
  // reads its SQ tail on every poll anyway (acquire, pairing with the poster's publish_tail()).
  for (unsigned i = 0; i < n; ++i) et.activate(*rung[i]);
  bool worked = n != 0;
  // Idle QPs sync their counters as they leave the active list; busy ones every millisecond or so, so that
  // telemetry also moves while a QP always has work (a request outstanding, a peer that never answers).
  const bool sync_busy = ctx.now() >= et.next_counter_sync_tsc_;
  if (sync_busy) et.next_counter_sync_tsc_ = ctx.now() + ctx.tsc_hz() / 1000;
  // The QPs that found their port's TX full go first, oldest first, while their port has room again.
  for (std::size_t p = 0; p < et.starved_.size(); ++p) {
    StarvedQueue& q = et.starved_[p];
    while (q.head != nullptr && ctx.tx_has_room(static_cast<PortIndex>(p))) {
      RcQueuePair* qp = q.head;
      q.head = qp->next_starved_;
      if (q.head == nullptr) q.tail = nullptr;  // before anything below queues a QP again
      qp->starved_ = false;
      const PollResult r = qp->poll(ctx);
      if (r == PollResult::kStarved) {
        // To the back, even if it sent nothing: a QP with a long message fills the backlog whenever it is polled,
        // and kept at the front it would shut out the QPs behind it until their retries ran out.
        et.push_starved(*qp);
        break;
      }
      worked = true;
      if (r == PollResult::kBusy) {
        et.active_.push_back(qp);  // polled again below; capacity reserved for every QP of the engine
      } else {
        et.go_quiet(*qp, ctx);
      }
    }
  }
  for (std::size_t i = 0; i < et.active_.size();) {
    RcQueuePair* qp = et.active_[i];
    const PollResult r = qp->poll(ctx);
    if (r == PollResult::kBusy) {
      if (sync_busy) qp->sync_counters(ctx.counters().transport);
      worked = true;
      ++i;
      continue;
    }
    et.active_[i] = et.active_.back();
    et.active_.pop_back();
    if (r == PollResult::kStarved) {
      // Its port's TX is full: polling it again before there is room only burns the iteration (with thousands
      // of QPs, most of it), so it waits in its port's queue, in order.
      worked = true;
      et.push_starved(*qp);
    } else {
      worked |= et.go_quiet(*qp, ctx);
    }
  }
  return worked;
}

// Idle, or waiting for a packet or a deadline: clear the doorbell, then look once more. The poster publishes its
// tail, then claims; we clear, then read the tail; both flag accesses are RMWs (release_doorbell), so either its
// claim finds the flag clear and rings again, or this poll sees what it posted. Returns whether that poll worked.
bool EngineTransport::go_quiet(RcQueuePair& qp, EngineContext& ctx) noexcept {
  qp.release_doorbell();
  switch (qp.poll(ctx)) {
    case PollResult::kBusy:
      active_.push_back(&qp);
      return true;
    case PollResult::kStarved:
      push_starved(qp);
      return true;
    case PollResult::kWaiting:
      // Off the list: a QP waiting for ACKs costs nothing per iteration (with 10 000 QPs on one engine, polling
      // those that only waited took nearly all its time). on_packet, a doorbell or the wake timer brings it back.
      qp.sleep_until_deadline(ctx);
      break;
    case PollResult::kIdle:
      break;
  }
  qp.sync_counters(ctx.counters().transport);  // exact whenever the QP leaves the list
  qp.active = false;
  return false;
}

void EngineTransport::push_starved(RcQueuePair& qp) noexcept {
  StarvedQueue& q = starved_[qp.setup().port];
  qp.starved_ = true;
  qp.next_starved_ = nullptr;
  if (q.tail != nullptr) {
    q.tail->next_starved_ = &qp;
  } else {
    q.head = &qp;
  }
  q.tail = &qp;
}

// --------------------------------------------------------------- RcTransport

RcTransport::RcTransport(Dataplane& dataplane)
    : dataplane_(dataplane), memory_(kMemorySlots), random_(std::random_device{}()) {
  key_generation_ = static_cast<uint8_t>(random_());
}

Result<std::unique_ptr<RcTransport>> RcTransport::start(Dataplane& dataplane) {
  std::unique_ptr<RcTransport> t(new RcTransport(dataplane));
  const uint32_t max_qps = dataplane.config().engine.max_qps_per_engine;
  t->qp_table_size_ = qp_table_size(max_qps);
  const uint32_t generations = (kQpnLocalMask + 1) / t->qp_table_size_;
  for (EngineId e = 0; e < dataplane.engine_count(); ++e) {
    t->engines_.push_back(std::make_unique<EngineTransport>(e, t->memory_, max_qps, dataplane.port_count()));
    QpnSpace& space = t->qpn_spaces_.emplace_back();
    space.in_use.assign(max_qps, false);
    space.in_use[0] = true;              // slot 0 serves no QP (it holds QPN 0 on engine 0)
    if (e == 0) space.in_use[1] = true;  // QPN 1 is the GSI QP (connection management)
    space.next_generation.resize(max_qps);
    for (uint32_t& g : space.next_generation) g = static_cast<uint32_t>(t->random_() % generations);
    const Status s = dataplane.engine(e).add_poller(
        Poller{.poll = &EngineTransport::poll, .self = t->engines_.back().get(), .after_others = true});
    if (!s.ok()) return Status::error("RC transport on engine " + std::to_string(e) + ": " + s.message());
  }
  RcTransport* transport = t.get();
  publish_qp_source(transport, QpSource{[transport] { return transport->qp_numbers(); },
                                        [transport](uint32_t qpn) { return transport->report_qp(qpn); }});
  return t;
}

RcTransport::~RcTransport() {
  withdraw_qp_source(this);  // first, and not under mutex_: a telemetry call holds its lock, then takes mutex_
  for (std::size_t e = 0; e < engines_.size(); ++e) {
    (void)dataplane_.engine(static_cast<EngineId>(e)).remove_poller(engines_[e].get());
  }
  for (auto& qp : qps_) (void)dataplane_.engine(engine_of(qp->qpn())).unregister_qp(qp->qpn());
}

Result<RcQueuePair*> RcTransport::create_qp(EngineId engine, const RcQueuePairSetup& setup) {
  if (engine >= engines_.size()) return Status::error("no engine " + std::to_string(engine));
  if (setup.port >= dataplane_.port_count()) return Status::error("no port " + std::to_string(setup.port));
  if (setup.send_queue == nullptr || setup.receive_queue == nullptr || setup.send_cq == nullptr ||
      setup.receive_cq == nullptr)
    return Status::error("a QP needs a send queue, a receive queue and two completion queues");
  if (setup.receive_limit_events != nullptr && !setup.receive_queue_shared)
    return Status::error("a receive limit event needs a shared receive queue");
  const uint32_t sq = setup.send_queue->capacity();
  if (sq == 0 || (sq & (sq - 1)) != 0) return Status::error("send queue capacity must be a power of two");
  std::lock_guard lock(mutex_);
  QpnSpace& space = qpn_spaces_[engine];
  for (const auto now = std::chrono::steady_clock::now();
       !space.time_wait.empty() && space.time_wait.front().first <= now; space.time_wait.pop_front()) {
    space.waiting.erase(space.waiting.find(space.time_wait.front().second));
  }
  // The first free slot from a random one on (so the QPN is not predictable), wrapping around, whose next number
  // is not in time-wait; if every free slot's is, the first free slot's (the number that slot used longest ago).
  const auto slots = static_cast<uint32_t>(space.in_use.size());
  const uint32_t start = random_() % slots;
  std::optional<uint32_t> slot;
  std::optional<uint32_t> first_free;
  for (uint32_t i = 0; i < slots && !slot; ++i) {
    const uint32_t candidate = (start + i) % slots;
    if (space.in_use[candidate]) continue;
    if (!first_free) first_free = candidate;
    if (!space.waiting.contains(next_local_index(space, candidate, false))) slot = candidate;
  }
  if (!slot) slot = first_free;
  if (!slot) return Status::error("engine " + std::to_string(engine) + " has no free QP");
  space.in_use[*slot] = true;
  const proto::Qpn qpn = make_qpn(engine, next_local_index(space, *slot, true));
  auto qp = std::make_unique<RcQueuePair>(qpn, setup, *engines_[engine]);
  const Status s = dataplane_.engine(engine).register_qp(qpn, QpEndpoint{&RcQueuePair::on_packet, qp.get(), true});
  if (!s.ok()) {
    space.in_use[*slot] = false;
    return s;
  }
  qps_.push_back(std::move(qp));
  return qps_.back().get();
}

// The QP's share of config.congestion (rocev2.md §7), once its path MTU is known.
static void set_congestion_control(proto::RcQpAttributes& attrs, const config::CongestionConfig& congestion,
                                   const Port& port) {
  attrs.max_packets_in_flight =
      congestion.max_bytes_in_flight == 0 ? 0 : std::max(1u, congestion.max_bytes_in_flight / attrs.path_mtu);
  const config::NotificationPointConfig& np = congestion.notification_point;
  attrs.notify_congestion = np.enabled;
  attrs.min_time_between_cnps_ns = np.min_time_between_cnps_us * 1000;
  attrs.cnp_traffic_class =
      static_cast<uint8_t>(np.cnp_dscp << 2 | (congestion.ecn ? proto::kEcnEct0 : proto::kEcnNotEct));
  const config::ReactionPointConfig& rp = congestion.reaction_point;
  attrs.rate_control = rp.enabled;
  proto::DcqcnParameters& d = attrs.dcqcn;
  constexpr uint32_t kUnknownLinkMbps = 100'000;
  d.max_rate_mbps =
      rp.max_rate_mbps != 0 ? rp.max_rate_mbps : (port.link_speed_mbps != 0 ? port.link_speed_mbps : kUnknownLinkMbps);
  d.min_rate_mbps = std::min(rp.min_rate_mbps, d.max_rate_mbps);
  d.ai_rate_mbps = rp.ai_rate_mbps;
  d.hai_rate_mbps = rp.hai_rate_mbps;
  d.time_reset_ns = rp.time_reset_us * 1000;
  d.byte_reset = rp.byte_reset;
  d.threshold = rp.threshold;
  d.min_dec_fac = rp.min_dec_fac;
  d.dce_tcp_g = rp.dce_tcp_g;
  d.dce_tcp_rtt_ns = rp.dce_tcp_rtt_us * 1000;
  d.initial_alpha_value = rp.initial_alpha_value;
  d.rate_reduce_monitor_period_ns = rp.rate_reduce_monitor_period_us * 1000;
  d.rate_to_set_on_first_cnp_mbps = rp.rate_to_set_on_first_cnp_mbps;
}

Status RcTransport::connect(RcQueuePair& qp, const RcPeer& peer, const proto::RcQpAttributes& attributes,
                            std::chrono::milliseconds resolve_timeout) {
  if (peer.local_port) {
    if (*peer.local_port >= dataplane_.port_count())
      return Status::error("no port " + std::to_string(*peer.local_port));
    // The engine reads the port only once the QP is connected (tx_commit): the connect
    // command below publishes this store to it.
    qp.setup_.port = *peer.local_port;
  }
  const Port& port = dataplane_.port(qp.setup().port);
  proto::MacAddr mac;
  if (peer.mac) {
    mac = *peer.mac;
  } else {
    Result<proto::MacAddr> resolved = dataplane_.resolve(qp.setup().port, peer.ip, resolve_timeout);
    if (!resolved.ok()) return Status::error("QP " + std::to_string(qp.qpn().value()) + ": " + resolved.error());
    mac = resolved.value();
  }
  // Our source address: the port's first address of the peer's IP version.
  proto::PacketSpec spec;
  if (peer.ip.is_v6) {
    if (port.ipv6.empty()) return Status::error("port " + port.name + " has no IPv6 address for an IPv6 peer");
    std::memcpy(spec.src_gid.data(), port.ipv6.front().data(), 16);
  } else {
    if (port.ipv4.empty()) return Status::error("port " + port.name + " has no IPv4 address for an IPv4 peer");
    spec.src_gid = proto::gid_from_ipv4(port.ipv4.front());
  }
  spec.dst_gid = gid_of(peer.ip);
  spec.src_mac = port.mac;
  spec.dst_mac = mac;
  spec.hop_limit = peer.hop_limit;
  const config::CongestionConfig& congestion =
      qp.setup().congestion != nullptr ? *qp.setup().congestion : dataplane_.config().congestion;
  // ECN is the traffic class's low two bits: ours to set, whatever DSCP the path asked for (RFC 3168).
  spec.traffic_class = static_cast<uint8_t>((peer.traffic_class & ~proto::kEcnCe) |
                                            (congestion.ecn ? proto::kEcnEct0 : proto::kEcnNotEct));
  spec.udp_src_port = proto::roce_udp_source_port(qp.qpn(), peer.qpn);
  spec.dest_qp = peer.qpn;
  proto::PacketTemplate headers;
  headers.init(spec);

  proto::RcQpAttributes attrs = attributes;
  attrs.local_qpn = qp.qpn();
  attrs.remote_qpn = peer.qpn;
  attrs.receive_psn = peer.psn;
  attrs.path_mtu = std::min(attributes.path_mtu, peer.path_mtu);
  attrs.max_rd_atomic = std::min(attributes.max_rd_atomic, peer.max_dest_rd_atomic);
  attrs.access = qp.setup().access;
  attrs.zero_copy_min_payload = dataplane_.config().engine.zero_copy_threshold;
  set_congestion_control(attrs, congestion, port);
  if (port.mtu < attrs.path_mtu + 80) {
    return Status::error("port " + port.name + " MTU " + std::to_string(port.mtu) + " cannot carry path MTU " +
                         std::to_string(attrs.path_mtu));
  }
  qp.peer_ = peer;
  return dataplane_.engine(engine_of(qp.qpn())).call([&](EngineContext& ctx) {
    qp.ctx_ = &ctx;
    qp.qp_.connect(attrs, headers, qp.setup().send_queue->data(), qp.setup().send_queue->capacity(), &qp);
    qp.published_sq_head_ = qp.qp_.send_queue_head();
    engines_[engine_of(qp.qpn())]->activate(qp);
  });
}

Status RcTransport::destroy_qp(RcQueuePair* qp) {
  std::lock_guard lock(mutex_);
  const auto it = std::find_if(qps_.begin(), qps_.end(), [&](const auto& p) { return p.get() == qp; });
  if (it == qps_.end()) return Status::error("no such QP");
  const EngineId e = engine_of(qp->qpn());
  Status s = dataplane_.engine(e).unregister_qp(qp->qpn());
  if (!s.ok()) return s;
  // Off the active list, on the engine, before the memory goes.
  s = dataplane_.engine(e).call([&](EngineContext& ctx) {
    qp->ctx_ = &ctx;
    if (qp->qp_.state() != proto::QpState::kReset) qp->qp_.enter_error(proto::CompletionStatus::kWorkRequestFlushed);
    qp->sync_counters(ctx.counters().transport);
    engines_[e]->forget(*qp, ctx);
  });
  if (!s.ok()) return s;
  QpnSpace& space = qpn_spaces_[e];
  const uint32_t local = local_index_of(qp->qpn());
  space.in_use[qp_slot_of(qp->qpn(), qp_table_size_)] = false;  // free at once: its next number is another
  space.time_wait.emplace_back(std::chrono::steady_clock::now() + kQpnTimeWait, local);
  space.waiting.insert(local);
  qps_.erase(it);
  return Status{};
}

std::optional<std::size_t> RcTransport::active_qps(EngineId engine) {
  std::size_t count = 0;
  if (!dataplane_.engine(engine).call([&](EngineContext&) { count = engines_[engine]->active_count(); }).ok())
    return std::nullopt;
  return count;
}

uint32_t RcTransport::next_local_index(QpnSpace& space, uint32_t slot, bool take) {
  const uint32_t generations = (kQpnLocalMask + 1) / qp_table_size_;
  uint32_t& generation = space.next_generation[slot];
  // Never the local index kQpnLocalMask: on engine 15 it would make the multicast QPN 0xFFFFFF.
  if (generation * qp_table_size_ + slot == kQpnLocalMask) generation = (generation + 1) % generations;
  const uint32_t local = generation * qp_table_size_ + slot;
  if (take) generation = (generation + 1) % generations;
  return local;
}

RcTransport::Usage RcTransport::usage() {
  std::lock_guard lock(mutex_);
  // Slot 0 is never handed out; every other slot below next_memory_slot_ is in use unless it is on the free list.
  return {static_cast<uint32_t>(qps_.size()), static_cast<uint32_t>(next_memory_slot_ - 1 - free_memory_slots_.size())};
}

// A free slot with the next key byte: a token that no earlier registration of the
// slot had, so stale tokens never match. Call with mutex_ held.
std::optional<uint32_t> RcTransport::new_token_locked() {
  reclaim_drained_locked();
  uint32_t slot;
  if (!free_memory_slots_.empty()) {
    slot = free_memory_slots_.back();
    free_memory_slots_.pop_back();
  } else if (next_memory_slot_ < kMemorySlots) {
    slot = next_memory_slot_++;
  } else {
    return std::nullopt;
  }
  return slot << 8 | ++key_generation_;
}

Result<uint32_t> RcTransport::register_memory(uint64_t addr, uint64_t length, uint32_t access, uint32_t pd,
                                              MemoryKind kind) {
  if (length == 0 || addr + length < addr) return Status::error("memory range is empty or wraps");
  // Remote write/atomic access requires local write too (verbs rule, rocev2.md §5).
  if ((access & (proto::kAccessRemoteWrite | proto::kAccessRemoteAtomic)) && !(access & proto::kAccessLocalWrite))
    return Status::error("remote write or atomic access requires local write access");
  std::lock_guard lock(mutex_);
  const std::optional<uint32_t> token = new_token_locked();
  if (!token) return Status::error("no free memory registration slots");
  MemoryRegion region;
  region.addr = addr;
  region.length = length;
  region.access = access;
  region.pd = pd;
  region.token = *token;
  region.kind = kind;
  memory_.insert(region);  // the release in the slot's seqlock publishes it to every engine
  return region.token;
}

Result<uint32_t> RcTransport::reserve_memory(MemoryKind kind, uint32_t pd) {
  if (kind != MemoryKind::kFastRegisterRegion && kind != MemoryKind::kWindow)
    return Status::error("only fast-register regions and memory windows are reserved");
  std::lock_guard lock(mutex_);
  const std::optional<uint32_t> token = new_token_locked();
  if (!token) return Status::error("no free memory registration slots");
  MemoryRegion region;
  region.pd = pd;
  region.token = *token;
  region.kind = kind;
  region.valid = false;
  if (kind == MemoryKind::kFastRegisterRegion) memory_.prepare_page_map(region.token);
  memory_.insert(region);
  return region.token;
}

Status RcTransport::deregister_memory(uint32_t token) {
  std::lock_guard lock(mutex_);
  const uint32_t slot = MemoryTable::index_of(token);
  if (slot == 0 || slot >= next_memory_slot_ || !memory_.read_slot(token)) return Status::error("no such registration");
  memory_.erase(token);  // no engine pins it from now on (MemoryTable::pin_for_tx)
  if (memory_.tx_pins(token) != 0) {
    draining_memory_tokens_.push_back(token);
  } else {
    free_memory_slots_.push_back(slot);
  }
  return Status{};
}

// Moves deregistered slots whose last zero-copy mbuf has been freed to the free list. Call with mutex_ held.
void RcTransport::reclaim_drained_locked() {
  std::erase_if(draining_memory_tokens_, [this](uint32_t token) {
    if (memory_.tx_pins(token) != 0) return false;
    free_memory_slots_.push_back(MemoryTable::index_of(token));
    return true;
  });
}

bool RcTransport::memory_in_flight(uint32_t token) {
  std::lock_guard lock(mutex_);
  reclaim_drained_locked();
  return std::find(draining_memory_tokens_.begin(), draining_memory_tokens_.end(), token) !=
         draining_memory_tokens_.end();
}

void RcTransport::wait_memory_drained(uint32_t token) {
  while (memory_in_flight(token)) std::this_thread::sleep_for(std::chrono::microseconds(50));
}

void RcTransport::release_memory_slot(uint32_t token) {
  std::lock_guard lock(mutex_);
  const uint32_t slot = MemoryTable::index_of(token);
  if (slot == 0 || slot >= next_memory_slot_) return;
  memory_.erase_slot(slot);
  free_memory_slots_.push_back(slot);
}

void RcTransport::ring_doorbell(RcQueuePair& qp) noexcept {
  const EngineId owner = engine_of(qp.qpn());
  EngineTransport& engine = *engines_[owner];
  // A poster on the QP's own engine (an engine poller, or a command) puts it on the active list itself: no ring,
  // and since the transport's poller runs after the other pollers (Poller::after_others), the WQE leaves in this
  // loop iteration. Nothing on the engine rings from inside EngineTransport::poll, whose loop walks that list.
  if (const EngineContext* here = EngineContext::running_here(); here != nullptr && here->id() == owner) {
    engine.activate(qp);
    return;
  }
  if (qp.claim_doorbell() && !engine.enqueue_doorbell(qp)) qp.release_doorbell();
}

void RcTransport::flush(RcQueuePair& qp) noexcept {
  qp.request_flush();
  ring_doorbell(qp);
}

Status RcTransport::post_retarget(EngineId engine, Retarget& retarget) {
  // Under the mutex that destroy_qp holds while it takes a QP off its engine: a QP listed here either is gone
  // already (dropped from the list) or is destroyed by an engine command posted after this one, which the engine
  // runs after it (the mailbox is FIFO), so the engine never touches a freed QP.
  std::lock_guard lock(mutex_);
  std::vector<RcQueuePair*>& listed = retarget.qps;
  std::sort(listed.begin(), listed.end());
  std::vector<bool> exists(listed.size());
  for (const auto& qp : qps_) {
    const auto it = std::lower_bound(listed.begin(), listed.end(), qp.get());
    if (it != listed.end() && *it == qp.get()) exists[static_cast<std::size_t>(it - listed.begin())] = true;
  }
  std::size_t kept = 0;
  for (std::size_t i = 0; i < listed.size(); ++i)
    if (exists[i]) listed[kept++] = listed[i];
  listed.resize(kept);
  retarget.command.run = [](void* arg, EngineContext&) {
    auto& r = *static_cast<Retarget*>(arg);
    for (RcQueuePair* qp : r.qps) qp->retarget_completions(r.from, r.to);
  };
  retarget.command.arg = &retarget;
  return dataplane_.engine(engine).post(retarget.command);
}

namespace {

std::string address_text(const config::IpAddress& ip) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(ip.is_v6 ? AF_INET6 : AF_INET, ip.bytes.data(), text, sizeof(text));
  return text;
}

// The state names of `rdma resource show qp`.
const char* qp_state_name(proto::QpState state) noexcept {
  switch (state) {
    case proto::QpState::kReset:
      return "RESET";
    case proto::QpState::kInit:
      return "INIT";
    case proto::QpState::kReadyToReceive:
      return "RTR";
    case proto::QpState::kReadyToSend:
      return "RTS";
    case proto::QpState::kError:
      return "ERR";
  }
  return "?";
}

}  // namespace

std::vector<uint32_t> RcTransport::qp_numbers() {
  std::lock_guard lock(mutex_);
  std::vector<uint32_t> qpns;
  qpns.reserve(qps_.size());
  for (const auto& qp : qps_) qpns.push_back(qp->qpn().value());
  return qpns;
}

std::optional<QpReport> RcTransport::report_qp(uint32_t qpn) {
  std::lock_guard lock(mutex_);  // keeps the QP from being destroyed while its engine reads it
  const auto it = std::find_if(qps_.begin(), qps_.end(), [&](const auto& qp) { return qp->qpn().value() == qpn; });
  if (it == qps_.end()) return std::nullopt;
  RcQueuePair& qp = **it;
  QpReport report;
  const EngineId engine = engine_of(qp.qpn());
  const Status read = dataplane_.engine(engine).call([&](EngineContext&) {
    const proto::RcQp& state = qp.qp_;
    const proto::RcCounters& c = state.counters();
    report.text = {{"type", "RC"},
                   {"state", qp_state_name(state.state())},
                   {"port", dataplane_.port(qp.setup().port).name},
                   {"peer", qp.peer_ ? address_text(qp.peer_->ip) : std::string()}};
    report.numbers = {{"lqpn", qpn},
                      {"rqpn", state.attributes().remote_qpn.value()},
                      {"engine", engine},
                      {"path_mtu", state.attributes().path_mtu},
                      {"sq_psn", state.next_send_psn().value()},
                      {"unacked_psn", state.oldest_unacked_psn().value()},
                      {"rq_psn", state.expected_receive_psn().value()},
                      {"rx_write_requests", c.rx_write_requests},
                      {"rx_read_requests", c.rx_read_requests},
                      {"rx_atomic_requests", c.rx_atomic_requests},
                      {"rx_send_requests", c.rx_send_requests},
                      {"retransmitted_packets", c.retransmitted_packets},
                      {"local_ack_timeout_err", c.local_ack_timeout_err},
                      {"packet_seq_err", c.packet_seq_err},
                      {"out_of_sequence", c.out_of_sequence},
                      {"duplicate_request", c.duplicate_request},
                      {"rcvd_rnr_err", c.rnr_nak_received},
                      {"send_rnr_err", c.rnr_nak_sent},
                      {"rnr_nak_retry_err", c.rnr_nak_retry_err},
                      {"retry_exceeded_err", c.retry_exceeded_err},
                      {"acks_sent", c.acks_sent},
                      {"naks_sent", c.naks_sent},
                      {"implied_nak_seq_err", c.implied_nak_seq_err},
                      {"rx_qp_not_ready", c.rx_qp_not_ready}};
  });
  if (!read.ok()) return std::nullopt;
  return report;
}

}  // namespace uroce::dataplane
