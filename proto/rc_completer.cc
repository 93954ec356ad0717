// RC completer: acknowledgements, READ responses and atomic ACKs retire send WQEs
// in order; NAKs and timeouts drive go-back-N retransmission (IBTA 9.7.5.2, 9.9).
#include <algorithm>
#include <cstring>

#include "proto/rc_qp.h"

namespace uroce::proto {

void RcQp::restart_timer() noexcept {
  const uint64_t timeout = ack_timeout_ns(attrs_.ack_timeout);
  retransmit_deadline_ns_ = timeout != 0 && has_outstanding() && awaits_answer() ? env_->now_ns() + timeout : 0;
}

uint64_t RcQp::next_deadline_ns() const noexcept {
  if (rnr_deadline_ns_ != 0) return rnr_deadline_ns_;
  if (pace_deadline_ns_ != 0 && (retransmit_deadline_ns_ == 0 || pace_deadline_ns_ < retransmit_deadline_ns_))
    return pace_deadline_ns_;  // the pacer holds a packet back until then (on_timer() has nothing to do for it)
  return retransmit_deadline_ns_;
}

// After a rewind (go-back-N), acknowledgements and responses for packets sent before it can overtake the send
// cursor: it moves up to the oldest unacknowledged PSN, so the next request it sends starts there, with the PSN
// and the offset into its WQE agreeing (a READ re-requested from a PSN whose offset disagrees would have its
// responses placed at the wrong offset).
void RcQp::keep_send_cursor_ahead() noexcept {
  if (static_cast<int32_t>(sq_next_ - sq_oldest_) < 0) {
    sq_next_ = sq_oldest_;
    send_offset_ = 0;
  }
  if (is_before(next_psn_, unacked_psn_)) {
    next_psn_ = unacked_psn_;
    if (sq_next_ == sq_oldest_ && progress(sq_oldest_).started) send_offset_ = offset_at(sq_oldest_, unacked_psn_);
  }
}

// The byte offset in WQE `index` of its packet at `psn`, held to the WQE's own PSN range: whatever a peer's ACKs made
// of the PSNs, the send cursor never points past the end of a WQE (the packet it built there would carry no data of
// the WQE, only what the mbuf held before).
uint32_t RcQp::offset_at(uint32_t index, Psn psn) const noexcept {
  const WqeProgress& pr = progress(index);
  if (is_atomic(wqe(index).op)) return 0;
  const int32_t packets = std::clamp(distance(psn, pr.first_psn), 0, distance(pr.last_psn, pr.first_psn));
  return static_cast<uint32_t>(packets) * attrs_.path_mtu;
}

// Forward progress gives the oldest outstanding message the full retry budgets again: retry_count bounds the retries
// without progress, and rnr_retry the RNR NAKs one message meets, not those of the connection's whole life (IBTA
// 9.7.5.2.8; rxe's reset_retry_counters()). Without the second, a finite rnr_retry let a receiver that was short
// of receive buffers rnr_retry times, at any moments over hours, fail the connection at the next one.
void RcQp::reset_retry_counters() noexcept {
  retries_left_ = attrs_.retry_count;
  rnr_retries_left_ = attrs_.rnr_retry;
  retry_pending_ = false;
}

// Everything up to and including `psn` is acknowledged: retire the WQEs it covers.
// A READ or atomic it covers whose response never came means that response was
// lost (rocev2.md §4.5: implied NAK): stop there so the caller can go back to it.
RcQp::AckResult RcQp::acknowledge_through(Psn psn) noexcept {
  bool progressed = false;
  AckResult result = AckResult::kProgress;
  const uint32_t tail = env_->send_queue_tail();
  // Walk started WQEs, not just those before sq_next_: after a go-back-N rewind an ACK
  // for packets sent before the rewind still retires them.
  while (sq_oldest_ != tail) {
    WqeProgress& pr = progress(sq_oldest_);
    if (pr.local) {  // an executed local operation retires with the WQEs before it
      if (pr.local_status != CompletionStatus::kSuccess) {
        enter_error(pr.local_status, sq_oldest_);
        return AckResult::kProgress;
      }
      complete_wqe(sq_oldest_++, CompletionStatus::kSuccess);
      continue;
    }
    if (!pr.started || is_before(psn, pr.first_psn)) break;
    const SendWqe& w = wqe(sq_oldest_);
    if (is_read_class(w.op)) {
      // Lost only if `psn` reaches a response not yet received: a NAK at the PSN of the response the READ waits for
      // (psn = unacked - 1 here) acknowledges nothing new, and its own rule applies (rocev2.md §4.5, §4.9).
      if (!is_before(psn, unacked_psn_)) result = AckResult::kLostResponse;
      break;
    }
    if (is_before(psn, pr.last_psn)) {  // part of a multi-packet message
      if (is_before(unacked_psn_, psn + 1)) {
        set_unacked(psn + 1);
        progressed = true;
      }
      break;
    }
    set_unacked(pr.last_psn + 1);
    complete_wqe(sq_oldest_++, CompletionStatus::kSuccess);
    progressed = true;
  }
  keep_send_cursor_ahead();
  if (progressed) {
    reset_retry_counters();
    restart_timer();
  }
  return result;
}

void RcQp::on_ack(const ParsedPacket& p) noexcept {
  const Psn psn = p.bth().get(Bth::psn);
  const AethSyndrome syndrome(p.ext<Aeth>(ExtHeader::kAeth).get(Aeth::syndrome));
  switch (syndrome.kind()) {
    case AethKind::kAck:
      if (acknowledge_through(psn) == AckResult::kLostResponse) on_lost_response();
      return;
    case AethKind::kRnrNak:
      // The responder had no receive WQE for PSN `psn`: wait, then resend from it (IBTA 9.7.5.2.8).
      ++counters_.rnr_nak_received;
      if (acknowledge_through(psn - 1) == AckResult::kLostResponse) {
        on_lost_response();
        return;
      }
      if (state_ == QpState::kError) return;  // a failed local operation retired on the way
      if (attrs_.rnr_retry != 7) {
        if (rnr_retries_left_ == 0) {
          ++counters_.rnr_nak_retry_err;
          enter_error(CompletionStatus::kRnrRetryExceeded);
          return;
        }
        --rnr_retries_left_;
      }
      rnr_deadline_ns_ = env_->now_ns() + syndrome.rnr_wait_ns();
      retransmit_deadline_ns_ = 0;
      return;
    case AethKind::kNak:
      break;
    case AethKind::kReserved:
      return;
  }
  if (acknowledge_through(psn - 1) == AckResult::kLostResponse) {
    on_lost_response();
    return;
  }
  if (state_ == QpState::kError) return;  // a failed local operation retired on the way
  if (syndrome.nak_code() == NakCode::kPsnSequenceError) {
    ++counters_.packet_seq_err;
    if (!retry_pending_) retry_or_fail(CompletionStatus::kRetryExceeded);
    return;
  }
  switch (syndrome.nak_code()) {
    case NakCode::kInvalidRequest:
      ++counters_.req_remote_invalid_request;
      enter_error(CompletionStatus::kRemoteInvalidRequest);
      break;
    case NakCode::kRemoteAccessError:
      ++counters_.req_remote_access_error;
      enter_error(CompletionStatus::kRemoteAccessError);
      break;
    default:
      ++counters_.req_remote_operational_error;
      enter_error(CompletionStatus::kRemoteOperationalError);
      break;
  }
}

void RcQp::on_read_response(const ParsedPacket& p) noexcept {
  const Psn psn = p.bth().get(Bth::psn);
  // A response implicitly acknowledges every earlier request (rocev2.md §4.5).
  if (psn != unacked_psn_ && acknowledge_through(psn - 1) == AckResult::kLostResponse) {
    on_lost_response();
    return;
  }
  if (state_ == QpState::kError) return;
  if (sq_oldest_ == env_->send_queue_tail() || !progress(sq_oldest_).started ||
      wqe(sq_oldest_).op != WorkOp::kRdmaRead) {
    ++counters_.req_unexpected_response;
    return;
  }
  const SendWqe& w = wqe(sq_oldest_);
  WqeProgress& pr = progress(sq_oldest_);
  if (psn != unacked_psn_) {  // earlier responses of this READ were lost: ask again for the tail
    on_lost_response();
    return;
  }
  const uint32_t mtu = attrs_.path_mtu;
  const bool ends = p.info->is(kLast) || p.info->is(kOnly);
  // The response belongs to this READ's PSN range, and the one at its last PSN, and only that one, ends it (IBTA
  // 9.7.5.1.6: a response outside the expected sequence is an invalid response). Otherwise a peer could answer
  // past the READ's last PSN into a later request's, completing the READ without placing its data and moving the
  // send cursor to an offset beyond a later WQE.
  if (is_before(psn, pr.first_psn) || is_after(psn, pr.last_psn) || ends != (psn == pr.last_psn)) {
    enter_error(CompletionStatus::kBadResponse);
    return;
  }
  const auto offset = static_cast<uint32_t>(distance(psn, pr.first_psn)) * mtu;
  const uint32_t length = p.payload_length;
  // Each response but the last carries a full PMTU, and the last ends the READ exactly.
  if (offset + length > w.length || (ends ? offset + length != w.length : length != mtu)) {
    enter_error(CompletionStatus::kBadResponse);
    return;
  }
  if (!sges_writable(w.sge.data(), w.num_sge, offset, length)) [[unlikely]] {
    enter_error(CompletionStatus::kLocalProtectionError);
    return;
  }
  copy_sges<true>(w.sge.data(), w.num_sge, pr.paged_sges, offset, p.payload().data(), p.payload_length);
  set_unacked(psn + 1);
  reset_retry_counters();
  if (ends) {
    if (sq_next_ == sq_oldest_) {  // the READ was being re-requested and is now whole
      ++sq_next_;
      send_offset_ = 0;
      next_psn_ = pr.last_psn + 1;
    }
    complete_wqe(sq_oldest_++, CompletionStatus::kSuccess);
    retire_local_operations();
  }
  keep_send_cursor_ahead();
  restart_timer();
}

void RcQp::on_atomic_ack(const ParsedPacket& p) noexcept {
  const Psn psn = p.bth().get(Bth::psn);
  if (psn != unacked_psn_ && acknowledge_through(psn - 1) == AckResult::kLostResponse) {
    on_lost_response();
    return;
  }
  if (state_ == QpState::kError) return;
  if (sq_oldest_ == env_->send_queue_tail() || !progress(sq_oldest_).started || !is_atomic(wqe(sq_oldest_).op) ||
      progress(sq_oldest_).first_psn != psn) {
    ++counters_.req_unexpected_response;
    return;
  }
  const SendWqe& w = wqe(sq_oldest_);
  uint8_t original[8];
  const uint64_t value = p.ext<AtomicAckEth>(ExtHeader::kAtomicAckEth).get(AtomicAckEth::original_data);
  std::memcpy(original, &value, sizeof original);  // host order in local memory, as verbs returns it
  if (!sges_writable(w.sge.data(), w.num_sge, 0, sizeof original)) [[unlikely]] {
    enter_error(CompletionStatus::kLocalProtectionError);
    return;
  }
  copy_sges<true>(w.sge.data(), w.num_sge, progress(sq_oldest_).paged_sges, 0, original, sizeof original);
  set_unacked(psn + 1);
  if (sq_next_ == sq_oldest_) {
    ++sq_next_;
    next_psn_ = psn + 1;
  }
  reset_retry_counters();
  complete_wqe(sq_oldest_++, CompletionStatus::kSuccess);
  retire_local_operations();
  keep_send_cursor_ahead();
  restart_timer();
}

// Go-back-N: resend everything from the oldest unacknowledged PSN (rocev2.md §4.8).
// WQEs keep their PSN ranges, so the resent packets are the same packets.
void RcQp::go_back_n() noexcept {
  if (is_after(next_psn_, resend_limit_psn_)) resend_limit_psn_ = next_psn_;
  for (uint32_t i = sq_oldest_; static_cast<int32_t>(sq_next_ - i) > 0; ++i) retire_read(progress(i));  // resent later
  retire_read(progress(sq_next_));
  sq_next_ = sq_oldest_;
  packets_since_ack_req_ = 0;
  const WqeProgress& pr = progress(sq_oldest_);
  if (sq_oldest_ == env_->send_queue_tail() || !pr.started) {
    send_offset_ = 0;
    next_psn_ = unacked_psn_;
    return;
  }
  send_offset_ = offset_at(sq_oldest_, unacked_psn_);
  next_psn_ = unacked_psn_;
  retry_pending_ = true;
}

// A response or ACK skipped a READ/atomic whose answer never arrived (rocev2.md §4.5).
// One go-back-N pass answers every such signal until it makes progress; counting each
// would burn the retry budget on packets that were already on their way.
void RcQp::on_lost_response() noexcept {
  ++counters_.implied_nak_seq_err;
  if (!retry_pending_) retry_or_fail(CompletionStatus::kRetryExceeded);
}

// Slow restart: a loss halves the window under the in-flight cap. Go-back-N resends everything from the lost packet;
// a receiver that dropped it because its buffer was full would otherwise meet the same burst again, behind the stale
// packets still queued ahead of it, and drop again. The window, not what happened to be in flight, is halved: a QP
// that lost its only packet keeps half its window for the next burst instead of collapsing to one packet. Called
// once per loss (a go-back-N pass ignores the further sequence NAKs of the same gap), never for an RNR NAK.
void RcQp::slow_restart() noexcept {
  if (!attrs_.slow_restart || window_packets_ == 0) return;
  window_packets_ = std::max(1u, window_packets_ / 2);
  window_growth_ = 0;
  ++counters_.roce_slow_restart;
}

// Additive increase (from set_unacked, while the window is below the cap): one packet more each time a whole
// window's worth has been acknowledged, i.e. about one per round trip.
void RcQp::grow_window(uint32_t acknowledged) noexcept {
  window_growth_ += acknowledged;
  while (window_growth_ >= window_packets_ && window_packets_ < attrs_.max_packets_in_flight) {
    window_growth_ -= window_packets_;
    ++window_packets_;
  }
}

void RcQp::retry_or_fail(CompletionStatus exhausted) noexcept {
  // retry_count 7 is seven retries in the IBTA (rxe treats it as infinite; we follow the spec).
  if (retries_left_ == 0) {
    ++counters_.retry_exceeded_err;
    enter_error(exhausted);
    return;
  }
  --retries_left_;
  slow_restart();
  go_back_n();
  restart_timer();
}

void RcQp::on_timer() noexcept {
  if (state_ != QpState::kReadyToSend) return;
  const uint64_t now = env_->now_ns();
  if (rnr_deadline_ns_ != 0) {
    if (now < rnr_deadline_ns_) return;
    rnr_deadline_ns_ = 0;
    go_back_n();
    restart_timer();
    return;
  }
  if (retransmit_deadline_ns_ == 0 || now < retransmit_deadline_ns_) return;
  if (!has_outstanding() || !awaits_answer()) {
    retransmit_deadline_ns_ = 0;
    return;
  }
  ++counters_.local_ack_timeout_err;
  retry_pending_ = false;
  retry_or_fail(CompletionStatus::kRetryExceeded);
}

void RcQp::on_packet(const ParsedPacket& p) noexcept {
  const uint64_t icrc_errors = counters_.rx_icrc_errors;
  // The notification point (rocev2.md §7.1): a CE mark on a packet from the connected peer whose ICRC held (a
  // fused WRITE checks its ICRC while it is placed, so this is decided after it) asks for a CNP. The ECN bits
  // are masked out of the ICRC, as switches rewrite them.
  if (accept_packet(p) && attrs_.notify_congestion && p.ecn() == kEcnCe && p.info->transport == Transport::kRc &&
      counters_.rx_icrc_errors == icrc_errors)
    note_congestion_experienced();
}

// A CNP from the connected peer for this QP: the reaction point (DCQCN) cuts the QP's rate. Not acknowledged, not
// sequenced: its PSN means nothing.
void RcQp::on_congestion_notification() noexcept {
  if (!attrs_.rate_control || state_ != QpState::kReadyToSend) {
    ++counters_.rp_cnp_ignored;
    return;
  }
  ++counters_.rp_cnp_handled;
  rate_.on_cnp(env_->now_ns());
}

// Every packet is checked against the connected path before anything acts on it (treat every peer as an
// attacker): the QP's state, the addresses, the P_Key and the transport. Each drop is counted by its reason.
// Returns false for a packet dropped by those checks.
bool RcQp::accept_packet(const ParsedPacket& p) noexcept {
  // A deferred ICRC is checked before anything below looks at the packet, unless the packet is a WRITE whose
  // payload the responder can place while it checks (fused_write_candidate; the reasoning is there).
  icrc_unverified_ = p.icrc_deferred;
  if (icrc_unverified_ && !fused_write_candidate(p) && !settle_icrc(p)) return false;
  if (state_ == QpState::kError || state_ == QpState::kReset || state_ == QpState::kInit) {
    ++counters_.rx_qp_not_ready;
    return false;
  }
  if (!headers_.is_reply(p)) {
    ++counters_.rx_path_mismatch;
    return false;
  }
  if (!pkey_matches(p.bth().get(Bth::pkey), attrs_.pkey)) {
    ++counters_.rx_pkey_mismatch;
    return false;
  }
  if (p.info->transport == Transport::kCnp) {
    on_congestion_notification();
    return true;
  }
  if (p.info->transport != Transport::kRc) {
    ++counters_.rx_wrong_transport;
    return false;
  }
  if (p.info->is(kRequest)) {
    on_request(p);
    return true;
  }
  if (state_ != QpState::kReadyToSend) {
    ++counters_.rx_qp_not_ready;
    return false;
  }
  if (!in_response_window(p.bth().get(Bth::psn))) {  // a duplicate, a stray, or a forgery
    ++counters_.req_response_out_of_window;
    return false;
  }
  if (p.has(ExtHeader::kAeth)) {
    // A syndrome with bit 7 set, of the reserved kind or a reserved NAK code (IBTA 9.7.5.2, Table 45) means nothing
    // to act on; and a READ response or atomic ACK carries an ACK syndrome (a NAK travels alone, as an Acknowledge).
    const AethSyndrome syndrome(p.ext<Aeth>(ExtHeader::kAeth).get(Aeth::syndrome));
    if (!syndrome.valid() || (p.info->operation != Operation::kAcknowledge && syndrome.kind() != AethKind::kAck)) {
      ++counters_.req_invalid_aeth;
      return false;
    }
  }
  switch (p.info->operation) {
    case Operation::kAcknowledge:
      on_ack(p);
      break;
    case Operation::kRdmaReadResponse:
      on_read_response(p);
      break;
    case Operation::kAtomicAcknowledge:
      on_atomic_ack(p);
      break;
    default:
      ++counters_.req_unexpected_response;
      break;
  }
  return true;
}

}  // namespace uroce::proto
