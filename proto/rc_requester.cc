// RC requester: segments posted work into request packets (IBTA 9.7.1-9.7.3).
#include <algorithm>
#include <cstring>

#include "proto/rc_qp.h"

namespace uroce::proto {

namespace {

// Requests may have at most 2^23 - 1 PSNs outstanding, or PSN comparison breaks
// (rocev2.md §4.2). Stay far below: the SQ bounds it in practice anyway.
constexpr int32_t kMaxOutstandingPsns = 1 << 20;

Opcode send_opcode(const SendWqe& w, bool first, bool last) noexcept {
  if (first && last) {
    switch (w.op) {
      case WorkOp::kSendWithImmediate:
        return Opcode::kRcSendOnlyWithImmediate;
      case WorkOp::kSendWithInvalidate:
        return Opcode::kRcSendOnlyWithInvalidate;
      case WorkOp::kRdmaWrite:
        return Opcode::kRcRdmaWriteOnly;
      case WorkOp::kRdmaWriteWithImmediate:
        return Opcode::kRcRdmaWriteOnlyWithImmediate;
      default:
        return Opcode::kRcSendOnly;
    }
  }
  const bool write = w.op == WorkOp::kRdmaWrite || w.op == WorkOp::kRdmaWriteWithImmediate;
  if (first) return write ? Opcode::kRcRdmaWriteFirst : Opcode::kRcSendFirst;
  if (!last) return write ? Opcode::kRcRdmaWriteMiddle : Opcode::kRcSendMiddle;
  switch (w.op) {
    case WorkOp::kSendWithImmediate:
      return Opcode::kRcSendLastWithImmediate;
    case WorkOp::kSendWithInvalidate:
      return Opcode::kRcSendLastWithInvalidate;
    case WorkOp::kRdmaWrite:
      return Opcode::kRcRdmaWriteLast;
    case WorkOp::kRdmaWriteWithImmediate:
      return Opcode::kRcRdmaWriteLastWithImmediate;
    default:
      return Opcode::kRcSendLast;
  }
}

}  // namespace

void RcQp::connect(const RcQpAttributes& attrs, const PacketTemplate& headers, const SendWqe* send_queue,
                   uint32_t sq_size, RcEnv* env) {
  attrs_ = attrs;
  mtu_shift_ = static_cast<uint8_t>(std::countr_zero(attrs.path_mtu));
  headers_ = headers;
  env_ = env;
  sq_ = send_queue;
  sq_mask_ = sq_size - 1;
  progress_.assign(sq_size, WqeProgress{});
  sq_oldest_ = sq_next_ = env->send_queue_tail();
  send_offset_ = 0;
  next_psn_ = unacked_psn_ = resend_limit_psn_ = attrs.send_psn;
  window_packets_ = attrs.max_packets_in_flight;
  window_growth_ = 0;
  expected_psn_ = attrs.receive_psn;
  retries_left_ = attrs.retry_count;
  rnr_retries_left_ = attrs.rnr_retry;
  rate_ = attrs.rate_control ? DcqcnRate(attrs.dcqcn) : DcqcnRate{};
  pace_deadline_ns_ = 0;
  cnp_pending_ = cnp_sent_before_ = false;
  state_ = QpState::kReadyToSend;
}

template <bool kIntoSges>
void RcQp::copy_paged_sge(const Sge& s, uint32_t offset, std::conditional_t<kIntoSges, const uint8_t*, uint8_t*> buffer,
                          uint32_t length) noexcept {
  if constexpr (kIntoSges) {
    // copy_paged only reads the buffer when it copies into memory.
    (void)env_->copy_paged(s.lkey.value(), s.addr + offset, const_cast<uint8_t*>(buffer), length, kAccessLocalWrite,
                           true, true);
  } else if (!env_->copy_paged(s.lkey.value(), s.addr + offset, buffer, length, 0, true, false)) {
    std::memset(buffer, 0, length);  // invalidated under the WQE: never send what the buffer held before
  }
}
template void RcQp::copy_paged_sge<true>(const Sge&, uint32_t, const uint8_t*, uint32_t) noexcept;
template void RcQp::copy_paged_sge<false>(const Sge&, uint32_t, uint8_t*, uint32_t) noexcept;

// First transmission of a WQE: check its local keys (IBTA C10-?: local protection
// errors complete the WR in error) and give it its PSN range.
bool RcQp::start_wqe(uint32_t index) noexcept {
  const SendWqe& w = wqe(index);
  WqeProgress& pr = progress(index);
  if (!(w.flags & kWqeInline)) {
    const uint32_t access = w.op == WorkOp::kRdmaRead || is_atomic(w.op) ? uint32_t{kAccessLocalWrite} : 0u;
    for (unsigned i = 0; i < w.num_sge; ++i) {
      bool paged = false;
      if (!check_local_sge(w.sge[i], access, paged)) {
        enter_error(CompletionStatus::kLocalProtectionError, index);
        return false;
      }
      if (paged) pr.paged_sges |= static_cast<uint8_t>(1u << i);
    }
  }
  pr.first_psn = next_psn_;
  pr.last_psn = next_psn_ + (is_atomic(w.op) ? 0 : packets_for(w.length) - 1);
  pr.started = true;
  return true;
}

unsigned RcQp::send(unsigned budget) noexcept {
  if (state_ == QpState::kError) {
    flush_posted();
    return 0;
  }
  if (state_ != QpState::kReadyToSend || rnr_deadline_ns_ != 0) return 0;
  pace_deadline_ns_ = 0;
  const uint32_t tail = env_->send_queue_tail();
  unsigned sent = 0;
  unsigned executed = 0;  // local operations: no packet, but they count against the budget
  while (sent + executed < budget && sq_next_ != tail) {
    const SendWqe& w = wqe(sq_next_);
    WqeProgress& pr = progress(sq_next_);
    if (is_local_operation(w.op)) {
      if (!pr.local) {
        if ((w.flags & kWqeReadFence) && reads_in_flight_ > 0) break;
        execute_local(sq_next_);
        ++executed;
      }
      // A failed local operation holds the cursor: nothing after it may start, and it
      // completes in error once everything before it has retired (IBTA 10.8.3.1).
      if (pr.local_status == CompletionStatus::kSuccess) ++sq_next_;
      retire_local_operations();
      if (state_ == QpState::kError || pr.local_status != CompletionStatus::kSuccess) break;
      continue;
    }
    if (!may_send_packet()) break;
    if (send_offset_ == 0) {
      // Windows that hold a WQE back before its first packet (IBTA 9.7.5.1.3, 10.8.3.3).
      if ((w.flags & kWqeReadFence) && reads_in_flight_ > 0) break;
      if (is_read_class(w.op) && reads_in_flight_ >= attrs_.max_rd_atomic) break;
      if (distance(next_psn_, unacked_psn_) >= kMaxOutstandingPsns) break;
      if (!pr.started && !start_wqe(sq_next_)) return sent;
    }
    const std::size_t frame_length = send_packet(w, pr);
    if (frame_length == 0) {
      ++counters_.tx_backpressure;
      break;
    }
    if (rate_.limited()) rate_.on_sent(static_cast<uint32_t>(frame_length), pace_now_ns_);
    ++sent;
  }
  if (sent != 0 && retransmit_deadline_ns_ == 0) restart_timer();
  return sent + executed;
}

// The windows every request packet passes, first transmission or not: the cap on packets in flight (as slow restart
// left it) and the DCQCN pacer (rocev2.md §7). A QP held by either waits for an ACK, or for pace_deadline_ns_.
bool RcQp::may_send_packet() noexcept {
  if (window_packets_ != 0 && distance(next_psn_, unacked_psn_) >= static_cast<int32_t>(window_packets_)) return false;
  return pacer_allows();
}

// The DCQCN pacer alone: whether the QP's rate lets a packet out now. Requests and READ responses pass it (the
// reaction point limits the QP's data whichever way it flows, rocev2.md §7.1); a held one sets pace_deadline_ns_.
bool RcQp::pacer_allows() noexcept {
  if (!rate_.limited()) [[likely]]
    return true;
  pace_now_ns_ = env_->now_ns();  // charged by on_sent() with the same reading: one clock read per packet
  if (rate_.may_send(pace_now_ns_)) return true;
  pace_deadline_ns_ = rate_.next_send_ns();
  ++counters_.tx_paced;
  return false;
}

// A local operation runs when the send cursor reaches it, so it sees the memory effects
// of every earlier local operation and none of the later ones. It consumes no PSN, and a
// go-back-N rewind passes over it without running it again (pr.local stays set until it
// retires).
void RcQp::execute_local(uint32_t index) noexcept {
  WqeProgress& pr = progress(index);
  pr.local_status = env_->execute_local(wqe(index));
  pr.local = true;
  pr.started = true;
  pr.first_psn = pr.last_psn = next_psn_;
}

// Completions leave in posting order: an executed local operation retires as soon as
// every WQE before it has. A failed one moves the QP to the error state at that point.
void RcQp::retire_local_operations() noexcept {
  const uint32_t tail = env_->send_queue_tail();
  while (state_ != QpState::kError && sq_oldest_ != tail) {
    const WqeProgress& pr = progress(sq_oldest_);
    if (!pr.local) return;
    if (pr.local_status != CompletionStatus::kSuccess) {
      enter_error(pr.local_status, sq_oldest_);
      return;
    }
    complete_wqe(sq_oldest_++, CompletionStatus::kSuccess);
  }
}

// Sends the next packet of WQE sq_next_ and advances the cursor past it. Returns the frame's length, or 0 if there
// was no buffer for it (backpressure: nothing changed).
std::size_t RcQp::send_packet(const SendWqe& w, WqeProgress& pr) noexcept {
  const uint32_t mtu = attrs_.path_mtu;
  uint8_t flags = 0;
  if (is_read_class(w.op)) {
    const bool read = w.op == WorkOp::kRdmaRead;
    const Opcode op = read ? Opcode::kRcRdmaReadRequest
                           : (w.op == WorkOp::kCompareSwap ? Opcode::kRcCompareSwap : Opcode::kRcFetchAdd);
    uint8_t* out = env_->tx_begin(headers_.frame_length(op, 0));
    if (out == nullptr) return 0;
    const auto st = headers_.stamp(out, op, 0, next_psn_, 0);
    const OpcodeInfo& info = opcode_info(op);
    if (read) {
      // A retried READ asks only for the part not yet answered (rocev2.md §4.7).
      const MutView<Reth> reth{st.ext + info.offset_of(ExtHeader::kReth)};
      reth.set(Reth::va, w.remote_addr + send_offset_);
      reth.set(Reth::rkey, w.rkey);
      reth.set(Reth::dma_length, w.length - send_offset_);
    } else {
      const MutView<AtomicEth> a{st.ext + info.offset_of(ExtHeader::kAtomicEth)};
      a.set(AtomicEth::va, w.remote_addr);
      a.set(AtomicEth::rkey, w.rkey);
      a.set(AtomicEth::swap_or_add, w.op == WorkOp::kCompareSwap ? w.swap : w.compare_add);
      a.set(AtomicEth::compare, w.op == WorkOp::kCompareSwap ? w.compare_add : 0);
    }
    headers_.seal(out, st, 0);
    env_->tx_commit(st.frame_length);
    if (is_before(next_psn_, resend_limit_psn_)) ++counters_.retransmitted_packets;
    next_psn_ = pr.last_psn + 1;
    if (!pr.counted_in_flight) {
      pr.counted_in_flight = true;
      ++reads_in_flight_;
    }
    ++sq_next_;
    send_offset_ = 0;
    return st.frame_length;
  }

  const bool first = send_offset_ == 0;
  const uint32_t length = std::min(mtu, w.length - send_offset_);
  const bool last = send_offset_ + length == w.length;
  const Opcode op = send_opcode(w, first, last);
  // rocev2.md §4.3: the last packet, and every N packets; and the packet that fills the in-flight cap, or a
  // responder that ACKs only on AckReq (rxe) would leave the window shut until the retransmission timer.
  const bool fills_window =
      window_packets_ != 0 && distance(next_psn_ + 1, unacked_psn_) >= static_cast<int32_t>(window_packets_);
  // Paced by DCQCN, packets may leave so far apart that ack_request_interval of them outlast the ACK timeout, and the
  // responder ACKs only on AckReq: the timer would fire with nothing lost. Then AckReq goes at least every quarter of
  // the timeout. (pace_now_ns_ is this packet's clock reading while the rate is limited.)
  const bool paced_ack_due = rate_.limited() && attrs_.ack_timeout != 0 &&
                             pace_now_ns_ - last_ack_req_ns_ >= ack_timeout_ns(attrs_.ack_timeout) / 4;
  if (last || fills_window || paced_ack_due || ++packets_since_ack_req_ >= attrs_.ack_request_interval) {
    flags |= kBthAckReq;
    packets_since_ack_req_ = 0;
    last_ack_req_ns_ = pace_now_ns_;
  }
  if (last && (w.flags & kWqeSolicited)) flags |= kBthSolicited;
  // Zero-copy when the packet's payload is one piece of one SGE of registered memory (inline data lives in the
  // SQ slot, which the application reuses once the WQE completes, so it is always copied; so is paged memory).
  const uint8_t* zero_copy_payload = nullptr;
  LocalToken zero_copy_token{};
  if (attrs_.zero_copy_min_payload != 0 && length >= attrs_.zero_copy_min_payload && !(w.flags & kWqeInline) &&
      pr.paged_sges == 0) {
    uint32_t offset = send_offset_;
    for (unsigned i = 0; i < w.num_sge; ++i) {
      const Sge& s = w.sge[i];
      if (offset >= s.length) {
        offset -= s.length;
        continue;
      }
      if (s.length - offset >= length) {
        zero_copy_payload = reinterpret_cast<const uint8_t*>(s.addr) + offset;
        zero_copy_token = s.lkey;
      }
      break;
    }
  }
  RcEnv::SplitFrame split{};
  if (zero_copy_payload != nullptr) {
    split = env_->tx_begin_zero_copy(headers_.header_length(op), zero_copy_payload, length, zero_copy_token,
                                     PacketTemplate::tail_length(length));
  }
  uint8_t* out = split.headers;
  if (out == nullptr) {
    out = env_->tx_begin(headers_.frame_length(op, length));
    if (out == nullptr) return 0;
  }
  const Psn psn = pr.first_psn + (send_offset_ >> mtu_shift_);
  const auto st = headers_.stamp(out, op, length, psn, flags);
  const OpcodeInfo& info = opcode_info(op);
  if (info.carries(ExtHeader::kReth)) {
    const MutView<Reth> reth{st.ext + info.offset_of(ExtHeader::kReth)};
    reth.set(Reth::va, w.remote_addr);
    reth.set(Reth::rkey, w.rkey);
    reth.set(Reth::dma_length, w.length);
  }
  if (info.carries(ExtHeader::kImmDt))
    MutView<ImmDt>{st.ext + info.offset_of(ExtHeader::kImmDt)}.set(ImmDt::immediate, w.immediate);
  if (info.carries(ExtHeader::kIeth))
    MutView<Ieth>{st.ext + info.offset_of(ExtHeader::kIeth)}.set(Ieth::rkey, w.invalidate_rkey);
  if (split.headers != nullptr) {
    headers_.seal_split(out, st, zero_copy_payload, length, split.tail);
  } else if (length >= kSealWhileCopyingMinPayload) {
    uint32_t crc = headers_.icrc_before_payload(out, st);
    copy_sges<false>(w.sge.data(), w.num_sge, pr.paged_sges, send_offset_, st.payload, length, &crc);
    headers_.seal_after_payload(st, length, crc);
  } else {
    copy_sges<false>(w.sge.data(), w.num_sge, pr.paged_sges, send_offset_, st.payload, length);
    headers_.seal(out, st, length);
  }
  env_->tx_commit(st.frame_length);
  if (is_before(psn, resend_limit_psn_)) ++counters_.retransmitted_packets;
  next_psn_ = psn + 1;
  if (last) {
    ++sq_next_;
    send_offset_ = 0;
  } else {
    send_offset_ += length;
  }
  return st.frame_length;
}

// In the error state, everything posted completes flushed, in posting order.
void RcQp::flush_posted() noexcept {
  const uint32_t tail = env_->send_queue_tail();
  while (sq_oldest_ != tail) complete_wqe(sq_oldest_++, CompletionStatus::kWorkRequestFlushed);
  sq_next_ = sq_oldest_;
  send_offset_ = 0;
}

void RcQp::enter_error(CompletionStatus status) noexcept { enter_error(status, sq_oldest_); }

void RcQp::flush_for_close() noexcept {
  enter_error(CompletionStatus::kWorkRequestFlushed);
  flush_posted();
}

// The failing WQE completes with its real status, every other one flushed, all in
// posting order (IBTA 10.8.3.1; rocev2.md §4.9).
void RcQp::enter_error(CompletionStatus status, uint32_t failing) noexcept {
  if (state_ == QpState::kError) return;
  state_ = QpState::kError;
  const uint32_t tail = env_->send_queue_tail();
  while (sq_oldest_ != tail) {
    const uint32_t index = sq_oldest_++;
    complete_wqe(index, index == failing ? status : CompletionStatus::kWorkRequestFlushed);
  }
  sq_next_ = sq_oldest_;
  send_offset_ = 0;
  fail_held_receive(CompletionStatus::kWorkRequestFlushed);  // a SEND cut short: its WQE goes before the rest
  env_->flush_receives();
  retransmit_deadline_ns_ = rnr_deadline_ns_ = pace_deadline_ns_ = 0;
  cnp_pending_ = false;
  resp_head_ = resp_tail_ = 0;
  for (Resource& r : resources_) r.responding = false;
  ack_pending_ = ack_held_ = false;
  in_message_ = Message::kNone;
}

}  // namespace uroce::proto
