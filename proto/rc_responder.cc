// RC responder: validates and executes incoming requests, places data, consumes
// receive WQEs, and answers with coalesced ACKs, NAKs, READ responses and atomic
// ACKs (IBTA 9.7.4-9.7.5.1; rocev2.md §4.4-4.7).
#include <algorithm>
#include <atomic>
#include <cstring>

#include "proto/rc_qp.h"

namespace uroce::proto {

namespace {

bool is_first_or_only(const OpcodeInfo& info) noexcept { return info.is(kFirst) || info.is(kOnly); }
bool is_last_or_only(const OpcodeInfo& info) noexcept { return info.is(kLast) || info.is(kOnly); }

}  // namespace

AethSyndrome RcQp::ack_syndrome() const noexcept {
  const uint32_t credits = env_->receive_credits();
  return credits == UINT32_MAX ? AethSyndrome::ack_unlimited() : AethSyndrome::ack_with_credits(credits);
}

// Coalesces: a later ACK or NAK replaces an earlier pending one, since each
// acknowledges everything before its PSN. respond() sends it once no READ response
// or atomic ACK is queued ahead of it, so acknowledgements leave in PSN order.
void RcQp::request_ack(Psn psn, AethSyndrome syndrome) noexcept {
  ack_pending_ = true;
  ack_psn_ = psn;
  ack_syndrome_pending_ = syndrome;
  ack_syndrome_at_send_ = false;
}

// An ACK whose syndrome advertises the receive credits as they are when it leaves: credits
// count receive WQEs beyond the MSN the same ACK carries (rocev2.md §4.6), and send_ack()
// reads that MSN then too. One credit count per coalesced ACK, not one per request.
void RcQp::request_credit_ack(Psn psn) noexcept {
  ack_pending_ = true;
  ack_psn_ = psn;
  ack_syndrome_at_send_ = true;
}

bool RcQp::send_ack(Psn psn, AethSyndrome syndrome) noexcept {
  uint8_t* out = env_->tx_begin(headers_.frame_length(Opcode::kRcAcknowledge, 0));
  if (out == nullptr) return false;
  const auto st = headers_.stamp(out, Opcode::kRcAcknowledge, 0, psn, 0);
  const MutView<Aeth> aeth{st.ext};
  aeth.set(Aeth::syndrome, syndrome.raw());
  aeth.set(Aeth::msn, msn_);
  headers_.seal(out, st, 0);
  env_->tx_commit(st.frame_length);
  ++(syndrome.kind() == AethKind::kAck ? counters_.acks_sent : counters_.naks_sent);
  return true;
}

// The receive WQE that a SEND or a WRITE with immediate took completes with `status`, if it has not completed yet.
// Every receive WQE the QP consumed completes exactly once, in order, ahead of the flushed ones (IBTA 10.8.3.1):
// one taken by a message that then failed, or that an error cut short, must not vanish.
void RcQp::fail_held_receive(CompletionStatus status) noexcept {
  if (!recv_held_) return;
  recv_held_ = false;
  Completion c;
  c.context = recv_.context;
  c.status = status;
  env_->complete_receive(c);
}

// Class B/C errors (IBTA 9.9.3): NAK at once and move the QP to the error state. A
// receive WQE being filled completes with the local status.
void RcQp::responder_fail(Psn psn, NakCode code, CompletionStatus local) noexcept {
  (void)send_ack(psn, AethSyndrome::nak(code));
  fail_held_receive(local);
  enter_error(CompletionStatus::kWorkRequestFlushed);
}

void RcQp::on_request(const ParsedPacket& p) noexcept {
  const Psn psn = p.bth().get(Bth::psn);
  const int32_t d = distance(psn, expected_psn_);
  if (d > 0) {
    // Out of sequence: one PSN sequence error NAK per gap, then silence until the
    // expected PSN arrives (rocev2.md §4.4).
    ++counters_.out_of_sequence;
    if (!sequence_nak_sent_) {
      sequence_nak_sent_ = true;
      request_ack(expected_psn_, AethSyndrome::nak(NakCode::kPsnSequenceError));
    }
    return;
  }
  if (d < 0) {
    on_duplicate(p);
    return;
  }
  const OpcodeInfo& info = *p.info;
  // Opcode sequence (IBTA 9.7.4.1.2): inside a message only its MIDDLE/LAST may follow.
  const bool continues = info.is(kMiddle) || info.is(kLast);
  const Message kind = info.operation == Operation::kSend        ? Message::kSend
                       : info.operation == Operation::kRdmaWrite ? Message::kWrite
                                                                 : Message::kNone;
  if (continues != (in_message_ != Message::kNone) || (continues && kind != in_message_)) {
    ++counters_.resp_invalid_request;
    responder_fail(psn, NakCode::kInvalidRequest, CompletionStatus::kRemoteInvalidRequest);
    return;
  }
  // Per-packet length against our path MTU (rocev2.md §2.4).
  const uint32_t mtu = attrs_.path_mtu;
  if (info.is(kPayload) && ((info.is(kFirst) || info.is(kMiddle)) ? p.payload_length != mtu : p.payload_length > mtu)) {
    ++counters_.resp_invalid_request;
    responder_fail(psn, NakCode::kInvalidRequest, CompletionStatus::kLocalLengthError);
    return;
  }
  bool accepted = false;
  switch (info.operation) {
    case Operation::kSend:
      accepted = receive_send(p);
      break;
    case Operation::kRdmaWrite:
      accepted = receive_write(p);
      break;
    case Operation::kRdmaReadRequest:
      accepted = receive_read(p);
      break;
    case Operation::kCompareSwap:
    case Operation::kFetchAdd:
      accepted = receive_atomic(p);
      break;
    default:
      ++counters_.resp_invalid_request;  // FLUSH, ATOMIC_WRITE: not supported
      responder_fail(psn, NakCode::kInvalidRequest, CompletionStatus::kRemoteInvalidRequest);
      return;
  }
  if (!accepted) return;
  sequence_nak_sent_ = false;
  if (info.operation == Operation::kSend || info.operation == Operation::kRdmaWrite) {
    expected_psn_ = psn + 1;
    if (p.bth().get(Bth::ack_req)) request_credit_ack(psn);
  }
}

// Takes the receive WQE a SEND or WRITE-with-immediate lands in; none is an RNR NAK
// that leaves the expected PSN where it is (rocev2.md §4.4 step 4).
bool RcQp::take_receive_wqe(Psn psn) noexcept {
  const RecvWqe* r = env_->pop_receive();
  if (r == nullptr) {
    ++counters_.rnr_nak_sent;
    sequence_nak_sent_ = true;  // the rest of the message is out of sequence until the retry
    request_ack(psn, AethSyndrome::rnr_nak(attrs_.min_rnr_timer));
    return false;
  }
  recv_ = *r;
  recv_held_ = true;
  recv_offset_ = 0;
  recv_capacity_ = 0;
  recv_paged_sges_ = 0;
  for (unsigned i = 0; i < recv_.num_sge; ++i) {
    const Sge& s = recv_.sge[i];
    bool paged = false;
    if (!check_local_sge(s, kAccessLocalWrite, paged)) {
      // A bad receive L_Key is the responder's local protection error; the requester sees
      // a Remote Operational Error (rocev2.md §5).
      responder_fail(psn, NakCode::kRemoteOperationalError, CompletionStatus::kLocalProtectionError);
      return false;
    }
    if (paged) recv_paged_sges_ |= static_cast<uint8_t>(1u << i);
    recv_capacity_ += s.length;
  }
  return true;
}

bool RcQp::receive_send(const ParsedPacket& p) noexcept {
  const OpcodeInfo& info = *p.info;
  const Psn psn = p.bth().get(Bth::psn);
  if (is_first_or_only(info)) {
    if (!take_receive_wqe(psn)) return false;  // checks the receive WQE's L_Keys
    in_message_ = Message::kSend;
    ++counters_.rx_send_requests;
  }
  if (recv_offset_ + p.payload_length > recv_capacity_) {
    ++counters_.resp_local_length_error;
    responder_fail(psn, NakCode::kInvalidRequest, CompletionStatus::kLocalLengthError);
    return false;
  }
  if (!is_first_or_only(info) && !sges_writable(recv_.sge.data(), recv_.num_sge, recv_offset_, p.payload_length))
      [[unlikely]] {
    // As a bad L_Key when the WQE was taken: the peer sees a Remote Operational Error (rocev2.md §5).
    responder_fail(psn, NakCode::kRemoteOperationalError, CompletionStatus::kLocalProtectionError);
    return false;
  }
  copy_sges<true>(recv_.sge.data(), recv_.num_sge, recv_paged_sges_, recv_offset_, p.payload().data(),
                  p.payload_length);
  recv_offset_ += p.payload_length;
  if (!is_last_or_only(info)) return true;

  Completion c;
  c.context = recv_.context;
  c.byte_length = recv_offset_;
  c.op = WorkOp::kSend;
  if (p.bth().get(Bth::solicited)) c.flags |= kCompletionSolicited;
  if (info.is(kImmediate)) {
    c.op = WorkOp::kSendWithImmediate;
    c.flags |= kCompletionWithImmediate;
    c.immediate = p.ext<ImmDt>(ExtHeader::kImmDt).get(ImmDt::immediate);
  }
  if (info.is(kInvalidate)) {
    // Invalidate after the whole message is placed; a key that cannot be remotely
    // invalidated is an invalid request (rocev2.md §5).
    const RemoteToken key = p.ext<Ieth>(ExtHeader::kIeth).get(Ieth::rkey);
    if (!env_->invalidate_remote(key)) {
      ++counters_.resp_invalid_request;
      responder_fail(psn, NakCode::kInvalidRequest, CompletionStatus::kRemoteInvalidRequest);
      return false;
    }
    c.op = WorkOp::kSendWithInvalidate;
    c.flags |= kCompletionWithInvalidate;
    c.invalidated_rkey = key;
  }
  in_message_ = Message::kNone;
  msn_ += 1;
  recv_held_ = false;
  env_->complete_receive(c);
  return true;
}

// Verify, then commit (IBTA Annex A17.3.3 and rocev2.md §3.3: a packet whose ICRC does not match is dropped
// silently, with no effect). A WRITE payload of kDeferredIcrcMinPayload or more reaches here with its ICRC
// unchecked (ParsedPacket::icrc_deferred) so that the copy into registered memory and the check are one pass
// over the payload (crc32_ieee_copy) instead of two. The copy lands before the check is known, which is
// acceptable only because a bad ICRC then leaves nothing another party can observe as an effect of the packet:
//  - Nothing is committed until the ICRC matches: not the expected PSN, the MSN, the WRITE cursor or length,
//    a completion, an ACK or NAK, or a counter other than rx_icrc_errors. The peer's retransmission (after its
//    ACK timeout, or the sequence NAK the next packet draws; rocev2.md §4.4) writes the same bytes again.
//  - The bytes land only where the peer may write anyway. A MIDDLE or LAST packet writes at the cursor a
//    checked FIRST packet's RETH set, inside that message's range: bytes the message in flight is about to
//    overwrite anyway, and which no completion has declared whole yet (an RDMA WRITE's data is the
//    requester's to announce, after its completion). A FIRST or ONLY packet is placed unchecked only if its
//    R_Key is the one the last checked WRITE FIRST/ONLY of this connection named, so the peer demonstrably
//    holds that key, and resolve_remote() still makes every check of rocev2.md §5 (valid, full key, PD,
//    REMOTE_WRITE, [VA, VA+len) inside the region): a corrupted VA can move the bytes only within a region
//    whose key grants the peer the whole of it. An R_Key seen for the first time is checked first.
//  - Any other path (a duplicate, a gap, an error NAK, a WRITE with immediate, which takes a receive WQE)
//    checks the ICRC first (fused_write_candidate() fails, or settle_icrc() runs before the error is acted on).
// The ICRC is no defence against a forger (anyone can compute it); the PSN, path and key checks are, and every
// one of them runs before the placement exactly as for a checked packet.
bool RcQp::fused_write_candidate(const ParsedPacket& p) const noexcept {
  if (state_ != QpState::kReadyToReceive && state_ != QpState::kReadyToSend) return false;
  if (!headers_.is_reply(p) || !pkey_matches(p.bth().get(Bth::pkey), attrs_.pkey)) return false;
  const OpcodeInfo& info = *p.info;  // may_defer_icrc(): an RC WRITE without immediate, with a payload
  if (!info.is(kRequest) || p.bth().get(Bth::psn) != expected_psn_) return false;
  const uint32_t mtu = attrs_.path_mtu;
  if ((info.is(kFirst) || info.is(kMiddle)) ? p.payload_length != mtu : p.payload_length > mtu) return false;
  if (info.is(kMiddle) || info.is(kLast)) {
    return in_message_ == Message::kWrite && p.payload_length <= write_remaining_ &&
           (info.is(kMiddle) || p.payload_length == write_remaining_);
  }
  return in_message_ == Message::kNone && last_write_rkey_known_ && (attrs_.access & kAccessRemoteWrite) &&
         p.ext<Reth>(ExtHeader::kReth).get(Reth::rkey) == last_write_rkey_;
}

// Checks a deferred ICRC now, before the caller acts on the packet. False: it did not match, the packet is
// dropped and counted, and the caller returns without any effect.
bool RcQp::settle_icrc(const ParsedPacket& p) noexcept {
  if (!icrc_unverified_) return true;
  icrc_unverified_ = false;
  if (icrc_matches(p)) return true;
  ++counters_.rx_icrc_errors;
  return false;
}

// Copies the payload to `dst`; with a deferred ICRC, checks it in the same pass. False: the ICRC did not match
// (counted); the caller commits nothing.
bool RcQp::place_write_payload(uint8_t* dst, const ParsedPacket& p) noexcept {
  if (!icrc_unverified_) {
    std::memcpy(dst, p.payload().data(), p.payload_length);
    return true;
  }
  icrc_unverified_ = false;
  const uint32_t state = crc32_ieee_copy(icrc_state_before_payload(p), dst, p.payload().data(), p.payload_length);
  if (icrc_matches_after_payload(p, state)) return true;
  ++counters_.rx_icrc_errors;
  return false;
}

bool RcQp::receive_write(const ParsedPacket& p) noexcept {
  const OpcodeInfo& info = *p.info;
  const Psn psn = p.bth().get(Bth::psn);
  // WRITE with immediate needs its receive WQE before anything of the last packet is placed.
  if (info.is(kImmediate) && !take_receive_wqe(psn)) return false;
  // The message's state, as this packet leaves it; stored only once the packet is accepted (verify, then
  // commit: see fused_write_candidate).
  const bool first = is_first_or_only(info);
  uint8_t* cursor = nullptr;
  uint32_t remaining = write_remaining_;
  uint32_t length = write_length_;
  bool paged = write_paged_;
  RemoteToken rkey = write_rkey_;
  uint64_t va = write_va_;
  if (first) {
    const auto reth = p.ext<Reth>(ExtHeader::kReth);
    rkey = reth.get(Reth::rkey);
    va = reth.get(Reth::va);
    length = remaining = reth.get(Reth::dma_length);
    paged = false;
    if (length > kMaxMessageLength) {
      if (!settle_icrc(p)) return false;
      ++counters_.resp_invalid_request;
      responder_fail(psn, NakCode::kInvalidRequest, CompletionStatus::kRemoteInvalidRequest);
      return false;
    }
    // A zero-length WRITE does not validate the R_Key (IBTA C9-88).
    if (length != 0) {
      const bool allowed = (attrs_.access & kAccessRemoteWrite) != 0;
      cursor = allowed ? env_->resolve_remote(rkey, va, length, kAccessRemoteWrite) : nullptr;
      paged = cursor == nullptr && allowed && env_->grants_paged(rkey.value(), va, length, kAccessRemoteWrite, false);
      if (cursor == nullptr && !paged) {
        if (!settle_icrc(p)) return false;
        ++counters_.resp_remote_access_error;
        responder_fail(psn, NakCode::kRemoteAccessError, CompletionStatus::kRemoteAccessError);
        return false;
      }
    }
  }
  const bool last = is_last_or_only(info);
  // The packets must add up to exactly the RETH DMA length.
  if (p.payload_length > remaining || (last && p.payload_length != remaining)) {
    if (!settle_icrc(p)) return false;
    ++counters_.resp_invalid_request;
    responder_fail(psn, NakCode::kInvalidRequest, CompletionStatus::kRemoteInvalidRequest);
    return false;
  }
  // A MIDDLE or LAST packet checks the R_Key again over its own bytes: the region may have been invalidated
  // (LOCAL_INV, SEND with Invalidate) or deregistered since the FIRST, and from then on the key grants nothing
  // (IBTA 10.6.6, rocev2.md §5). The peer chooses when its next packet comes, so a pointer resolved at the FIRST
  // would let it write into memory the application has taken back. The QP's key cache makes this one compare.
  if (!first && !paged && p.payload_length != 0) {
    cursor = env_->resolve_remote(rkey, va, p.payload_length, kAccessRemoteWrite);
    if (cursor == nullptr) {
      if (!settle_icrc(p)) return false;
      ++counters_.resp_remote_access_error;
      responder_fail(psn, NakCode::kRemoteAccessError, CompletionStatus::kRemoteAccessError);
      return false;
    }
  }
  if (p.payload_length != 0) {
    if (!paged) [[likely]] {
      if (!place_write_payload(cursor, p)) return false;
    } else {
      // Paged memory: the ICRC first, then the copy, page by page, with every check of the R_Key again (an
      // invalidation may have come between the packets of the message).
      if (!settle_icrc(p)) return false;
      if (!env_->copy_paged(rkey.value(), va, const_cast<uint8_t*>(p.payload().data()), p.payload_length,
                            kAccessRemoteWrite, false, true)) {
        ++counters_.resp_remote_access_error;
        responder_fail(psn, NakCode::kRemoteAccessError, CompletionStatus::kRemoteAccessError);
        return false;
      }
    }
    va += p.payload_length;
    remaining -= p.payload_length;
  }
  if (first) {
    in_message_ = Message::kWrite;
    ++counters_.rx_write_requests;
    write_length_ = length;
    write_paged_ = paged;
    write_rkey_ = rkey;
    if (length != 0) {
      last_write_rkey_ = rkey;
      last_write_rkey_known_ = true;
    }
  }
  write_remaining_ = remaining;
  write_va_ = va;
  if (!last) return true;
  in_message_ = Message::kNone;
  msn_ += 1;
  if (info.is(kImmediate)) {
    Completion c;
    c.context = recv_.context;
    c.op = WorkOp::kRdmaWriteWithImmediate;
    c.flags = kCompletionWithImmediate;
    c.immediate = p.ext<ImmDt>(ExtHeader::kImmDt).get(ImmDt::immediate);
    c.byte_length = write_length_;
    if (p.bth().get(Bth::solicited)) c.flags |= kCompletionSolicited;
    recv_held_ = false;
    env_->complete_receive(c);
  }
  return true;
}

uint8_t RcQp::resource_limit() const noexcept {
  return std::clamp<uint8_t>(attrs_.max_dest_rd_atomic, 1, kMaxResponderResources);
}

// The saved requests are a ring of max_dest_rd_atomic slots, and a new READ or atomic takes the oldest, as rxe
// does (rocev2.md §4.4 step 4): a slot whose response has gone out is kept only to replay a duplicate. A slot
// whose response is still queued is live, and the peer then has more READs/atomics outstanding than it was
// granted: that is an Invalid Request (IBTA 9.7.5.2.3; C9-?: more than the responder resources), never a reuse
// of a slot a queued response still reads from. Checked before the request acts on anything.
bool RcQp::claim_resource(Psn psn) noexcept {
  if (!resources_[resource_next_].responding) return true;
  ++counters_.resp_resources_exceeded;
  ++counters_.resp_invalid_request;
  responder_fail(psn, NakCode::kInvalidRequest, CompletionStatus::kRemoteInvalidRequest);
  return false;
}

uint8_t RcQp::save_resource(const Resource& r) noexcept {
  const uint8_t slot = resource_next_;
  resources_[slot] = r;
  resources_[slot].saved = true;
  resource_next_ = static_cast<uint8_t>((slot + 1) % resource_limit());
  return slot;
}

// At most one response per slot is queued (claim_resource, on_duplicate), and at most resource_limit() slots
// exist, so the ring, twice kMaxResponderResources long, never fills.
void RcQp::queue_response(uint8_t resource, Psn psn, uint32_t offset) noexcept {
  resources_[resource].responding = true;
  responses_[resp_tail_++ % responses_.size()] = {resource, psn, offset};
}

bool RcQp::receive_read(const ParsedPacket& p) noexcept {
  const Psn psn = p.bth().get(Bth::psn);
  if (!claim_resource(psn)) return false;
  const auto reth = p.ext<Reth>(ExtHeader::kReth);
  Resource r;
  r.first_psn = psn;
  r.length = reth.get(Reth::dma_length);
  if (r.length > kMaxMessageLength) {
    ++counters_.resp_invalid_request;
    responder_fail(psn, NakCode::kInvalidRequest, CompletionStatus::kRemoteInvalidRequest);
    return false;
  }
  r.last_psn = psn + (packets_for(r.length) - 1);
  r.va = reth.get(Reth::va);
  r.rkey = reth.get(Reth::rkey);
  if (r.length != 0) {
    // Checked here for the NAK; each response packet checks the key again (send_read_response).
    const bool allowed = (attrs_.access & kAccessRemoteRead) != 0;
    if (!allowed || (env_->resolve_remote(r.rkey, r.va, r.length, kAccessRemoteRead) == nullptr &&
                     !env_->grants_paged(r.rkey.value(), r.va, r.length, kAccessRemoteRead, false))) {
      ++counters_.resp_remote_access_error;
      responder_fail(psn, NakCode::kRemoteAccessError, CompletionStatus::kRemoteAccessError);
      return false;
    }
  }
  ++counters_.rx_read_requests;
  queue_response(save_resource(r), psn, 0);
  expected_psn_ = r.last_psn + 1;  // a READ consumes one PSN per response packet
  msn_ += 1;
  return true;
}

bool RcQp::receive_atomic(const ParsedPacket& p) noexcept {
  const Psn psn = p.bth().get(Bth::psn);
  const auto a = p.ext<AtomicEth>(ExtHeader::kAtomicEth);
  const uint64_t va = a.get(AtomicEth::va);
  if (va % 8 != 0) {  // IBTA C9-?: misaligned atomics are invalid requests (as rxe reports them)
    ++counters_.resp_invalid_request;
    responder_fail(psn, NakCode::kInvalidRequest, CompletionStatus::kRemoteInvalidRequest);
    return false;
  }
  if (!claim_resource(psn)) return false;
  uint8_t* target = (attrs_.access & kAccessRemoteAtomic)
                        ? env_->resolve_remote(a.get(AtomicEth::rkey), va, 8, kAccessRemoteAtomic)
                        : nullptr;
  if (target == nullptr) {
    ++counters_.resp_remote_access_error;
    responder_fail(psn, NakCode::kRemoteAccessError, CompletionStatus::kRemoteAccessError);
    return false;
  }
  // Atomic with respect to other atomics and to CPU atomics on the same memory; the
  // target is 8-byte aligned, as atomic_ref requires.
  std::atomic_ref<uint64_t> word(*reinterpret_cast<uint64_t*>(target));
  uint64_t original;
  if (p.info->operation == Operation::kCompareSwap) {
    original = a.get(AtomicEth::compare);
    word.compare_exchange_strong(original, a.get(AtomicEth::swap_or_add), std::memory_order_acq_rel);
  } else {
    original = word.fetch_add(a.get(AtomicEth::swap_or_add), std::memory_order_acq_rel);
  }
  Resource r;
  r.first_psn = r.last_psn = psn;
  r.atomic = true;
  r.va = va;
  r.atomic_original = original;
  ++counters_.rx_atomic_requests;
  queue_response(save_resource(r), psn, 0);
  expected_psn_ = psn + 1;
  msn_ += 1;
  return true;
}

// PSN behind the expected one (rocev2.md §4.7): SEND/WRITE are re-ACKed, never
// re-executed; READs are replayed from saved state; atomics replay the saved result.
void RcQp::on_duplicate(const ParsedPacket& p) noexcept {
  ++counters_.duplicate_request;
  const Psn psn = p.bth().get(Bth::psn);
  const Operation op = p.info->operation;
  if (op == Operation::kSend || op == Operation::kRdmaWrite) {
    request_credit_ack(expected_psn_ - 1);
    return;
  }
  const uint8_t limit = resource_limit();
  for (uint8_t i = 0; i < limit; ++i) {
    const Resource& r = resources_[i];
    if (!r.saved || is_before(psn, r.first_psn) || is_after(psn, r.last_psn) ||
        (r.length == 0 && !r.atomic && psn != r.first_psn))
      continue;
    if (r.responding) return;  // its response is still going out, and answers the duplicate too
    if (op == Operation::kRdmaReadRequest && !r.atomic) {
      // The retry may ask for the tail only: it must lie inside the original READ.
      const auto reth = p.ext<Reth>(ExtHeader::kReth);
      const auto offset = static_cast<uint32_t>(distance(psn, r.first_psn)) * attrs_.path_mtu;
      if (reth.get(Reth::rkey) != r.rkey || reth.get(Reth::va) != r.va + offset ||
          reth.get(Reth::dma_length) != r.length - offset) {
        ++counters_.resp_duplicate_unmatched;
        return;
      }
      queue_response(i, psn, offset);
      return;
    }
    if ((op == Operation::kCompareSwap || op == Operation::kFetchAdd) && r.atomic && r.first_psn == psn) {
      queue_response(i, psn, 0);
      return;
    }
  }
  ++counters_.resp_duplicate_unmatched;  // no saved request matches: drop silently
}

// Returns the frame's length, or 0 when there was no buffer for it (backpressure: nothing changed).
std::size_t RcQp::send_read_response(PendingResponse& pr) noexcept {
  const Resource& r = resources_[pr.resource];
  const uint32_t mtu = attrs_.path_mtu;
  const uint32_t length = std::min(mtu, r.length - pr.offset);
  const bool first = pr.next_psn == r.first_psn;
  const bool last = pr.offset + length == r.length;
  // A replay that starts inside the READ continues with MIDDLE/LAST, as rxe does.
  const Opcode op = first && last ? Opcode::kRcRdmaReadResponseOnly
                    : first       ? Opcode::kRcRdmaReadResponseFirst
                    : last        ? Opcode::kRcRdmaReadResponseLast
                                  : Opcode::kRcRdmaReadResponseMiddle;
  uint8_t* out = env_->tx_begin(headers_.frame_length(op, length));
  if (out == nullptr) return 0;
  const auto st = headers_.stamp(out, op, length, pr.next_psn, 0);
  if (opcode_info(op).carries(ExtHeader::kAeth)) {
    const MutView<Aeth> aeth{st.ext};
    aeth.set(Aeth::syndrome, ack_syndrome().raw());
    aeth.set(Aeth::msn, msn_);
  }
  // The R_Key is checked again for every response packet, a replay's included: the region may have been
  // invalidated or deregistered since the request, and the peer chooses when it asks again (a duplicate READ is
  // answered from the saved request). What it no longer grants goes out as zeros, never as what the memory holds
  // now. Paged memory resolves to null and copies through copy_paged, which makes the same checks.
  const uint8_t* const data =
      length != 0 ? env_->resolve_remote(r.rkey, r.va + pr.offset, length, kAccessRemoteRead) : nullptr;
  if (data != nullptr || length == 0) [[likely]] {
    headers_.copy_and_seal(out, st, data, length);
  } else {
    if (!env_->copy_paged(r.rkey.value(), r.va + pr.offset, st.payload, length, kAccessRemoteRead, false, false)) {
      std::memset(st.payload, 0, length);
    }
    headers_.seal(out, st, length);
  }
  env_->tx_commit(st.frame_length);
  pr.offset += length;
  pr.next_psn += 1;
  return st.frame_length;
}

bool RcQp::send_atomic_ack(const PendingResponse& pr) noexcept {
  const Resource& r = resources_[pr.resource];
  uint8_t* out = env_->tx_begin(headers_.frame_length(Opcode::kRcAtomicAcknowledge, 0));
  if (out == nullptr) return false;
  const auto st = headers_.stamp(out, Opcode::kRcAtomicAcknowledge, 0, pr.next_psn, 0);
  const MutView<Aeth> aeth{st.ext};
  aeth.set(Aeth::syndrome, ack_syndrome().raw());
  aeth.set(Aeth::msn, msn_);
  MutView<AtomicAckEth>{st.ext + Aeth::kSize}.set(AtomicAckEth::original_data, r.atomic_original);
  headers_.seal(out, st, 0);
  env_->tx_commit(st.frame_length);
  return true;
}

// Notification point: one CNP per min_time_between_cnps_ns at most, however many marked packets arrive (NVIDIA's
// np_min_time_between_cnps; the paper's N = 50 us). Sent from respond(), ahead of the responses.
void RcQp::note_congestion_experienced() noexcept {
  ++counters_.np_ecn_marked_roce_packets;
  const uint64_t now = env_->now_ns();
  if (cnp_sent_before_ && now - last_cnp_ns_ < attrs_.min_time_between_cnps_ns) return;
  cnp_sent_before_ = true;
  last_cnp_ns_ = now;
  cnp_pending_ = true;
}

bool RcQp::send_cnp() noexcept {
  uint8_t* out = env_->tx_begin(headers_.frame_length(Opcode::kCnp, 0));
  if (out == nullptr) return false;
  env_->tx_commit(headers_.stamp_cnp(out, attrs_.cnp_traffic_class));
  ++counters_.np_cnp_sent;
  return true;
}

unsigned RcQp::respond(unsigned budget) noexcept {
  if (state_ == QpState::kError || env_ == nullptr) return 0;
  unsigned sent = 0;
  if (cnp_pending_) [[unlikely]] {
    if (!send_cnp()) {
      ++counters_.tx_backpressure;
      return 0;
    }
    cnp_pending_ = false;
    ++sent;
  }
  while (sent < budget && resp_head_ != resp_tail_) {
    PendingResponse& pr = responses_[resp_head_ % responses_.size()];
    const Resource& r = resources_[pr.resource];
    if (r.atomic) {
      if (!send_atomic_ack(pr)) {
        ++counters_.tx_backpressure;
        return sent;
      }
    } else {
      // READ response data is the QP's data as much as its requests are: a paced QP's responses wait for the
      // pacer too (pace_deadline_ns_ wakes the QP), and each is charged to the rate.
      if (!pacer_allows()) return sent;
      const std::size_t frame_length = send_read_response(pr);
      if (frame_length == 0) {
        ++counters_.tx_backpressure;
        return sent;
      }
      if (rate_.limited()) rate_.on_sent(static_cast<uint32_t>(frame_length), pace_now_ns_);
    }
    ++sent;
    if (r.atomic || pr.offset >= r.length) {  // a zero-length READ is done after its one ONLY
      resources_[pr.resource].responding = false;
      ++resp_head_;
    }
  }
  if (resp_head_ == resp_tail_ && ack_pending_ && sent < budget) {
    if (send_ack(ack_psn_, ack_syndrome_at_send_ ? ack_syndrome() : ack_syndrome_pending_)) {
      ack_pending_ = false;
      ++sent;
    } else {
      ++counters_.tx_backpressure;
    }
  }
  return sent;
}

// A lone ACK (or NAK) waits one turn when this turn sent requests, so the request leaves first and the peer
// reaches it without first parsing, steering and acting on the ACK: in a WRITE ping-pong each answer would
// otherwise carry, in the same burst and ahead of it, the ACK of the request it answers. Only once in a row, so a
// QP that sends on every turn still acknowledges on every other one. READ responses, atomic ACKs and CNPs never
// wait. The delay is one engine loop iteration (~1 us), far inside any requester's ACK timeout (4.096 us x
// 2^ack_timeout, IBTA 9.7.6.1.3), and has_responses() keeps the QP polled until the ACK is out.
RcQp::Transmitted RcQp::transmit(unsigned budget) noexcept {
  Transmitted t;
  t.requests = send(budget);
  if (t.requests != 0 && !ack_held_ && ack_pending_ && resp_head_ == resp_tail_ && !cnp_pending_) {
    ack_held_ = true;
    return t;
  }
  ack_held_ = false;
  t.responses = respond(budget);
  return t;
}

}  // namespace uroce::proto
