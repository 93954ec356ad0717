// RcQueuePair: one proto::RcQp on its engine. The RcEnv that binds the protocol to mbufs (template and zero-copy
// frames), the memory table, the SQ/RQ rings shared with the API, and the CQs; its poll on the engine.
#include <algorithm>
#include <cassert>
#include <cstring>

#include <rte_cycles.h>
#include <rte_mbuf.h>

#include "dataplane/rc_transport.h"

namespace uroce::dataplane {

namespace {

constexpr unsigned kPacketBudget = 32;  // per QP per poll: bounded work per loop iteration

}  // namespace

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

// The QP is destroyed (RcTransport::destroy_qp, on its engine): every post the application made completes
// flushed now (ndkpi.md §10.3, §10.6), whether or not a doorbell for it reached the engine: the destruction drops
// the doorbells still queued, and a QP in the error state or in Reset flushes only as it is polled. Before the
// connect the SQ takes no post (STATUS_CONNECTION_INVALID) and proto has no queue to flush; the receives may be
// posted at any time. The application may not post any more while it closes the QP.
void RcQueuePair::flush_for_close() noexcept {
  if (qp_.state() != proto::QpState::kReset) qp_.flush_for_close();
  flush_receives();  // an SRQ's receives are its other QPs': flush_receives() leaves them
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
  // Responses the pacer held back (answered none) wait for its deadline, as paced requests do.
  const bool responses_move = qp_.has_responses() && !(answered == 0 && qp_.paced());
  // A QP in the error state flushes whatever is posted, which needs no packet: it stays busy until done.
  if (sent != 0 || answered != 0 || responses_move || qp_.state() == proto::QpState::kError) {
    const bool more = sent != 0 || answered != 0 || qp_.has_unsent_work() || qp_.has_outstanding() || responses_move;
    return more ? PollResult::kBusy : PollResult::kIdle;
  }
  // Nothing moved: whatever is posted waits behind a window (outstanding PSNs, READ credits, a fence, an RNR
  // wait) that only an incoming packet or a deadline opens, or the requests in flight wait for their ACKs, or the
  // pacer holds responses until its deadline.
  return qp_.has_unsent_work() || qp_.has_outstanding() || qp_.has_responses() ? PollResult::kWaiting
                                                                               : PollResult::kIdle;
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
  MemoryTable& memory = table();
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

MemoryTable& RcQueuePair::table() noexcept {
  ctx_->begin_memory_access();
  return engine_.memory();
}

uint8_t* RcQueuePair::resolve_local(proto::LocalToken token, uint64_t addr, uint32_t length, uint32_t access) {
  return table().resolve(local_keys_, token.value(), addr, length, access, requester(), true);
}

uint8_t* RcQueuePair::resolve_remote(proto::RemoteToken token, uint64_t addr, uint32_t length, uint32_t access) {
  return table().resolve(remote_keys_, token.value(), addr, length, access, requester());
}

bool RcQueuePair::grants_paged(uint32_t token, uint64_t addr, uint32_t length, uint32_t access, bool local) {
  return table().grants(token, addr, length, access, requester(), local);
}

bool RcQueuePair::copy_paged(uint32_t token, uint64_t addr, uint8_t* buffer, uint32_t length, uint32_t access,
                             bool local, bool into_memory) {
  return table().copy(token, addr, buffer, length, access, requester(), local, into_memory);
}

void RcQueuePair::retire_page_list(uint32_t token, uint8_t page_list) { table().unstage_pages(token, page_list); }

bool RcQueuePair::invalidate_remote(proto::RemoteToken token) { return invalidate_and_wait(token.value()); }

// Send with Invalidate and LOCAL_INV. Before the invalidation completes, an engine that resolved the key before it
// may be placing or reading one packet in the memory right now (a QP of the same PD on another engine). The consumer
// may reuse the memory once it sees the completion, and the peer may no longer reach it (IBTA 10.6.7), so the
// completion waits for that packet. Both callers are between packets. Memory only this engine ever read, the usual
// case, costs one fence and a load.
//
// A fast-register region takes the windows bound onto it along, as deregistration does (rc_transport.cc): the wait
// covers every engine once a window was ever bound onto it (MemoryTable::engines_that_may_hold), so a bind that found
// the region valid before the invalidation has written its window when the scan runs, and every later bind finds
// the region invalid. A window the scan ended may have been resolved meanwhile: wait once more.
bool RcQueuePair::invalidate_and_wait(uint32_t token) noexcept {
  MemoryTable& memory = table();
  if (!memory.invalidate_remote(token, requester())) return false;
  ctx_->wait_for_engines(memory.engines_that_may_hold(token));
  if (memory.windows_may_exist(token) && memory.invalidate_windows_of(token, memory.capacity()))
    ctx_->wait_for_engines(memory.engines_that_may_hold(token));
  return true;
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
  MemoryTable& memory = table();
  const proto::MemoryOperation& m = w.memory;
  switch (w.op) {
    case proto::WorkOp::kFastRegister: {
      if (memory.fast_register(m.token, m.addr, m.length, m.access, setup_.pd, m.page_list))
        return proto::CompletionStatus::kSuccess;
      // Onto a registration still valid (IBTA: a fast register needs a free MR), it fails. The poster has moved the
      // MR's key on, so no invalidation could name the old key any more: it ends here, as an invalidation ends it.
      const std::optional<MemoryRegion> current = memory.read_slot_at(MemoryTable::index_of(m.token));
      if (current && current->valid && current->kind == MemoryKind::kFastRegisterRegion && current->token != m.token)
        (void)invalidate_and_wait(current->token);
      return proto::CompletionStatus::kLocalQpOperationError;
    }
    case proto::WorkOp::kLocalInvalidate:
      return invalidate_and_wait(m.token) ? proto::CompletionStatus::kSuccess
                                          : proto::CompletionStatus::kLocalQpOperationError;
    case proto::WorkOp::kBindMemoryWindow:
      return memory.bind_window(m.token, m.region_token, m.addr, m.length, m.access, requester())
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
void RcQueuePair::sync_counters(EngineCounters& engine) noexcept {
  TransportCounters& t = engine.transport;
  const proto::RcCounters& now = qp_.counters();
  proto::RcCounters& was = synced_;
  const auto add = [](Counter& c, uint64_t current, uint64_t& previous) {
    c.add(current - previous);
    previous = current;
  };
  // A deferred ICRC that failed where the payload was placed: an ICRC error like those parse_packet() finds, under
  // the same name (rx_icrc_encapsulated).
  add(engine.rx_drop[static_cast<std::size_t>(proto::ParseError::kBadIcrc)], now.rx_icrc_errors, was.rx_icrc_errors);
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
  add(t.req_invalid_aeth, now.req_invalid_aeth, was.req_invalid_aeth);
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
  add(t.roce_slow_restart, now.roce_slow_restart, was.roce_slow_restart);
}

}  // namespace uroce::dataplane
