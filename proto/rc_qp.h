// An RC queue pair's transport: requester, completer and responder (IBTA ch. 9.7).
//
// The three roles live in separate files (rc_requester.cc, rc_completer.cc,
// rc_responder.cc) but one owner, the engine that owns the QP, runs them one after
// another (STYLE.md §4): no locks, no tasks kicking each other. Everything outside
// the protocol — TX buffers, memory keys, receive WQEs, completions, time — goes
// through RcEnv, so the state machines run unchanged on DPDK engines and in the
// deterministic simulated network of the tests.
//
// Datapath rules: no allocation (buffers are sized at connect()), no exceptions,
// bounded work per call (the `budget` arguments).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "proto/aeth.h"
#include "proto/crc32.h"
#include "proto/packet_parser.h"
#include "proto/packet_template.h"
#include "proto/rc_types.h"

namespace uroce::proto {

// What an RC QP needs from its owner. Implementations are called only from the
// owning engine's thread.
class RcEnv {
 public:
  // A buffer for one frame of `length` bytes, or nullptr when none is available now
  // (an empty mempool is backpressure: the caller retries on a later call).
  virtual uint8_t* tx_begin(std::size_t length) = 0;
  // Sends the frame tx_begin() (or tx_begin_zero_copy()) returned, now filled in.
  virtual void tx_commit(std::size_t length) = 0;
  // Zero-copy TX (RcQpAttributes::zero_copy_min_payload): a frame of `header_length` bytes of headers, then the
  // `payload_length` bytes at `payload` left where they are (inside the registration `token` names), then
  // `tail_length` bytes (pad and ICRC). Returns where the headers and the tail go, or {nullptr, nullptr} if the
  // frame cannot go out that way now; the requester then copies the payload through tx_begin(). The payload is
  // read after tx_commit() returns (by the NIC, or the peer's engine on a ring link), and again if the packet is
  // retransmitted, so the owner keeps the registration alive until the last reader is done with it.
  struct SplitFrame {
    uint8_t* headers = nullptr;
    uint8_t* tail = nullptr;
  };
  virtual SplitFrame tx_begin_zero_copy(std::size_t header_length, const uint8_t* payload, uint32_t payload_length,
                                        LocalToken token, std::size_t tail_length) {
    (void)header_length, (void)payload, (void)payload_length, (void)token, (void)tail_length;
    return {};
  }
  virtual uint64_t now_ns() = 0;
  // The memory [addr, addr + length) if `token` is valid in the QP's PD and grants
  // `access` over all of it, else nullptr. Never called with length 0.
  virtual uint8_t* resolve_local(LocalToken token, uint64_t addr, uint32_t length, uint32_t access) = 0;
  virtual uint8_t* resolve_remote(RemoteToken token, uint64_t addr, uint32_t length, uint32_t access) = 0;
  // Paged memory (a fast-register MR whose pages do not follow each other, NdkFastRegister): its bytes are not
  // at their addresses, and resolve_*() gives a pointer only for a range whose pages are adjacent. These make
  // every check of resolve_*() on `token` (local: an L_Key) without that condition, and copy page by page.
  // copy_paged: `into_memory` copies from `buffer` into the memory. False: a check failed, nothing was copied.
  // The defaults serve an owner without paged memory.
  virtual bool grants_paged(uint32_t token, uint64_t addr, uint32_t length, uint32_t access, bool local) {
    (void)token, (void)addr, (void)length, (void)access, (void)local;
    return false;
  }
  virtual bool copy_paged(uint32_t token, uint64_t addr, uint8_t* buffer, uint32_t length, uint32_t access, bool local,
                          bool into_memory) {
    (void)token, (void)addr, (void)buffer, (void)length, (void)access, (void)local, (void)into_memory;
    return false;
  }
  // A FastRegister WQE that carried page list `page_list` (MemoryOperation) has retired, executed or flushed.
  virtual void retire_page_list(uint32_t token, uint8_t page_list) { (void)token, (void)page_list; }
  // Send with Invalidate: invalidates `token` if it may be remotely invalidated.
  virtual bool invalidate_remote(RemoteToken token) = 0;
  // The next posted receive WQE (RQ or SRQ), consumed, or nullptr if none (RNR).
  virtual const RecvWqe* pop_receive() = 0;
  // Receive WQEs still posted, for the ACK credit field (UINT32_MAX: unlimited/SRQ).
  virtual uint32_t receive_credits() = 0;
  // The producer index of the send queue as the application last published it.
  virtual uint32_t send_queue_tail() = 0;
  virtual void complete_send(const Completion& c) = 0;
  virtual void complete_receive(const Completion& c) = 0;
  // The QP entered the error state: every posted receive completes as flushed.
  virtual void flush_receives() = 0;
  // Performs local operation `w` (is_local_operation: fast register, local invalidate,
  // bind) on registered memory and returns the status it completes with. Called exactly
  // once per WQE, when the send cursor reaches it in posting order; never again after a
  // go-back-N rewind.
  virtual CompletionStatus execute_local(const SendWqe& w) = 0;

 protected:
  ~RcEnv() = default;
};

class RcQp {
 public:
  // Moves the QP to RTS with `attrs`. `send_queue` has `sq_size` slots (a power of
  // two) filled by the application; WQE index i lives in slot i & (sq_size - 1).
  // attrs.path_mtu is a power of two from 256 to 4096 (IBTA 9.7.6); the owner checks it.
  // Control path: allocates the per-WQE progress array.
  void connect(const RcQpAttributes& attrs, const PacketTemplate& headers, const SendWqe* send_queue, uint32_t sq_size,
               RcEnv* env);

  // Handles one received packet addressed to this QP (already parsed and
  // ICRC-checked). Requests go to the responder, responses to the completer.
  void on_packet(const ParsedPacket& packet) noexcept;

  // Requester: sends up to `budget` packets of posted work, within the PSN, READ and
  // fence windows. Returns the number of packets sent.
  unsigned send(unsigned budget) noexcept;

  // Responder: sends up to `budget` queued READ responses / atomic ACKs, then the
  // coalesced ACK or NAK if nothing is queued before it. Call after each RX burst.
  unsigned respond(unsigned budget) noexcept;
  // One turn of the QP's transmit side, as the engine polls it: send(), then respond(), except that a lone
  // ACK or NAK waits one turn when requests just went out (see rc_responder.cc). Each count is at most `budget`.
  struct Transmitted {
    unsigned requests = 0;
    unsigned responses = 0;
  };
  Transmitted transmit(unsigned budget) noexcept;

  // Completer: retransmission and RNR timers. Call when now >= next_deadline_ns().
  void on_timer() noexcept;
  // The earliest time on_timer() has work, or 0 if no timer runs.
  [[nodiscard]] uint64_t next_deadline_ns() const noexcept;

  // Moves the QP to the error state: outstanding and later work completes flushed.
  void enter_error(CompletionStatus first_status) noexcept;
  // The QP is destroyed: the error state, and everything posted up to the SQ tail completes flushed now. A QP
  // already in the error state flushes what was posted after the error only when it is next polled, and a QP
  // being destroyed may never be (ndkpi.md §10.3: a close cancels pending work).
  void flush_for_close() noexcept;

  [[nodiscard]] QpState state() const noexcept { return state_; }
  [[nodiscard]] const RcQpAttributes& attributes() const noexcept { return attrs_; }
  [[nodiscard]] const RcCounters& counters() const noexcept { return counters_; }
  // The PSNs `rdma resource show qp` reports (for telemetry): sq_psn, the oldest unacknowledged, rq_psn.
  [[nodiscard]] Psn next_send_psn() const noexcept { return next_psn_; }
  [[nodiscard]] Psn oldest_unacked_psn() const noexcept { return unacked_psn_; }
  // The cap on request packets in flight now: attributes().max_packets_in_flight, less what slow restart took.
  [[nodiscard]] uint32_t window_packets() const noexcept { return window_packets_; }
  [[nodiscard]] Psn expected_receive_psn() const noexcept { return expected_psn_; }
  // The oldest WQE index not yet retired: slots before it may be reused by the
  // application (the SQ consumer index the owner publishes).
  [[nodiscard]] uint32_t send_queue_head() const noexcept { return sq_oldest_; }
  // True while requests are sent but not yet acknowledged or answered.
  [[nodiscard]] bool has_outstanding() const noexcept { return sq_oldest_ != sq_next_ || send_offset_ != 0; }
  // True while a request sent awaits its answer (an ACK, a READ response, an atomic ACK): what the retransmit timer
  // guards. A message part sent whose packets were all acknowledged (held back by pacing, the window or the TX
  // backlog) has nothing to time out: the timer starts again with its next packet.
  [[nodiscard]] bool awaits_answer() const noexcept { return next_psn_ != unacked_psn_; }
  // True when posted work waits to be sent (it may be held by a window or backpressure).
  [[nodiscard]] bool has_unsent_work() noexcept {
    return state_ == QpState::kError ? sq_oldest_ != env_->send_queue_tail() : sq_next_ != env_->send_queue_tail();
  }
  // True when the responder has READ responses, atomic ACKs or an ACK/NAK to send.
  [[nodiscard]] bool has_responses() const noexcept { return resp_head_ != resp_tail_ || ack_pending_ || cnp_pending_; }
  // True when the DCQCN pacer held a packet back in the last transmit(): nothing moves before next_deadline_ns().
  [[nodiscard]] bool paced() const noexcept { return pace_deadline_ns_ != 0; }
  // The reaction point's rate (DCQCN), for reports and tests.
  [[nodiscard]] const DcqcnRate& rate() const noexcept { return rate_; }

 private:
  // --- requester (rc_requester.cc) ---
  struct WqeProgress {
    Psn first_psn{};
    Psn last_psn{};  // last request PSN (READ: last response PSN)
    bool started = false;
    bool counted_in_flight = false;  // READ/atomic: its request is out and counted in reads_in_flight_
    bool local = false;              // a local operation that has been executed, with this outcome:
    CompletionStatus local_status = CompletionStatus::kSuccess;
    uint8_t paged_sges = 0;  // bit i: sge[i] lies in paged memory (RcEnv::copy_paged), found by start_wqe
  };
  [[nodiscard]] const SendWqe& wqe(uint32_t index) const noexcept { return sq_[index & sq_mask_]; }
  [[nodiscard]] WqeProgress& progress(uint32_t index) noexcept { return progress_[index & sq_mask_]; }
  [[nodiscard]] const WqeProgress& progress(uint32_t index) const noexcept { return progress_[index & sq_mask_]; }
  [[nodiscard]] uint32_t packets_for(uint32_t length) const noexcept;
  // One past the highest request PSN ever sent (next_psn_ rewinds on go-back-N).
  [[nodiscard]] Psn sent_limit() const noexcept {
    return is_after(next_psn_, resend_limit_psn_) ? next_psn_ : resend_limit_psn_;
  }
  // A response acts only on PSNs that were sent and are not yet acknowledged (IBTA 9.7.5.1; rxe's completer
  // drops the rest): a forged ACK or NAK needs a PSN inside that window, not just anywhere before it.
  [[nodiscard]] bool in_response_window(Psn psn) const noexcept {
    return !is_before(psn, unacked_psn_) && is_before(psn, sent_limit());
  }
  bool start_wqe(uint32_t index) noexcept;
  void execute_local(uint32_t index) noexcept;
  void retire_local_operations() noexcept;
  [[nodiscard]] bool may_send_packet() noexcept;
  [[nodiscard]] bool pacer_allows() noexcept;
  std::size_t send_packet(const SendWqe& w, WqeProgress& pr) noexcept;
  void retire_read(WqeProgress& pr) noexcept;
  void flush_posted() noexcept;
  void enter_error(CompletionStatus status, uint32_t failing_index) noexcept;
  void complete_wqe(uint32_t index, CompletionStatus status) noexcept;

  // --- completer (rc_completer.cc) ---
  enum class AckResult : uint8_t { kProgress, kLostResponse };
  void keep_send_cursor_ahead() noexcept;
  [[nodiscard]] uint32_t offset_at(uint32_t index, Psn psn) const noexcept;
  AckResult acknowledge_through(Psn psn) noexcept;
  void on_ack(const ParsedPacket& p) noexcept;
  void on_read_response(const ParsedPacket& p) noexcept;
  void on_atomic_ack(const ParsedPacket& p) noexcept;
  bool accept_packet(const ParsedPacket& p) noexcept;
  void on_congestion_notification() noexcept;
  void go_back_n() noexcept;
  void retry_or_fail(CompletionStatus exhausted) noexcept;
  void reset_retry_counters() noexcept;
  void on_lost_response() noexcept;
  void restart_timer() noexcept;
  void set_unacked(Psn psn) noexcept;
  void slow_restart() noexcept;
  void grow_window(uint32_t acknowledged) noexcept;
  // Copies `length` bytes between `buffer` and a scatter/gather list, starting `offset` bytes into the list
  // (`into_sges`: from the buffer into the list's memory). SGEs whose bit is set in `paged` go through
  // RcEnv::copy_paged; a paged SGE that no longer passes its checks is skipped (and a gather zero-fills it).
  // A gather given `crc` continues that CRC over the bytes it writes to the buffer, in the same pass
  // (crc32_ieee_copy) where the memory is not paged (PacketTemplate::icrc_before_payload).
  template <bool kIntoSges>
  void copy_sges(const Sge* sge, unsigned count, uint8_t paged, uint32_t offset,
                 std::conditional_t<kIntoSges, const uint8_t*, uint8_t*> buffer, std::size_t length,
                 uint32_t* crc = nullptr) noexcept;
  // One paged SGE's part of that, out of line (the common case never comes here).
  template <bool kIntoSges>
  void copy_paged_sge(const Sge& s, uint32_t offset, std::conditional_t<kIntoSges, const uint8_t*, uint8_t*> buffer,
                      uint32_t length) noexcept;
  // resolve_local(), and whether the SGE's bytes are elsewhere than its address (paged memory). False: the
  // L_Key does not grant `access` over the SGE.
  bool check_local_sge(const Sge& s, uint32_t access, bool& paged) noexcept;
  // Whether every SGE that bytes [offset, offset + length) of the list land in still grants local write. Bytes a
  // peer sends us (READ responses, atomic ACKs, a SEND's later packets) check the L_Keys again per packet: the
  // peer chooses when they come, and the application may have invalidated or deregistered the memory since the
  // work request started checked it. Hardware fails such a request with a local protection error; without the
  // check the bytes went to memory the application had taken back.
  bool sges_writable(const Sge* sge, unsigned count, uint32_t offset, std::size_t length) noexcept;

  // --- responder (rc_responder.cc) ---
  enum class Message : uint8_t { kNone, kSend, kWrite };
  struct Resource {  // a saved READ or atomic, for responses and duplicate replay (IBTA 9.7.5.1.3)
    Psn first_psn{};
    Psn last_psn{};
    bool atomic = false;
    uint64_t va = 0;
    RemoteToken rkey{};
    uint32_t length = 0;
    uint64_t atomic_original = 0;
    bool saved = false;  // holds a request (the ring starts empty)
    // A response from this slot is queued or being sent. The slot is then live: a new request may not take it
    // (that peer has more READs/atomics outstanding than it was granted), and a duplicate is answered by the
    // response already on its way.
    bool responding = false;
  };
  struct PendingResponse {
    uint8_t resource;
    Psn next_psn;
    uint32_t offset;
  };
  void on_request(const ParsedPacket& p) noexcept;
  void on_duplicate(const ParsedPacket& p) noexcept;
  bool receive_send(const ParsedPacket& p) noexcept;
  bool receive_write(const ParsedPacket& p) noexcept;
  [[nodiscard]] bool fused_write_candidate(const ParsedPacket& p) const noexcept;
  bool settle_icrc(const ParsedPacket& p) noexcept;
  bool place_write_payload(uint8_t* dst, const ParsedPacket& p) noexcept;
  bool receive_read(const ParsedPacket& p) noexcept;
  bool receive_atomic(const ParsedPacket& p) noexcept;
  bool take_receive_wqe(Psn psn) noexcept;
  void queue_response(uint8_t resource, Psn psn, uint32_t offset) noexcept;
  [[nodiscard]] uint8_t resource_limit() const noexcept;
  bool claim_resource(Psn psn) noexcept;
  uint8_t save_resource(const Resource& r) noexcept;
  std::size_t send_read_response(PendingResponse& pr) noexcept;
  bool send_atomic_ack(const PendingResponse& pr) noexcept;
  bool send_ack(Psn psn, AethSyndrome syndrome) noexcept;
  void request_ack(Psn psn, AethSyndrome syndrome) noexcept;
  void request_credit_ack(Psn psn) noexcept;
  void note_congestion_experienced() noexcept;
  bool send_cnp() noexcept;
  void fail_held_receive(CompletionStatus status) noexcept;
  void responder_fail(Psn psn, NakCode code, CompletionStatus local) noexcept;
  [[nodiscard]] AethSyndrome ack_syndrome() const noexcept;

  RcQpAttributes attrs_{};
  PacketTemplate headers_{};
  RcEnv* env_ = nullptr;
  QpState state_ = QpState::kReset;
  RcCounters counters_{};

  // Requester and completer state. WQE indices are free-running uint32.
  const SendWqe* sq_ = nullptr;
  uint32_t sq_mask_ = 0;
  // log2(attrs_.path_mtu), a power of two (IBTA: 256 to 4096): packet counts and offsets shift rather than divide,
  // since a 32-bit division is a long-latency instruction on the per-packet path.
  uint8_t mtu_shift_ = 10;
  std::vector<WqeProgress> progress_;
  uint32_t sq_oldest_ = 0;    // oldest WQE not yet retired
  uint32_t sq_next_ = 0;      // WQE being (or next to be) sent
  uint32_t send_offset_ = 0;  // bytes of sq_next_ already sent (READ: already answered)
  Psn next_psn_{};            // PSN of the next request packet
  Psn unacked_psn_{};         // oldest PSN not yet acknowledged (or answered)
  Psn resend_limit_psn_{};    // packets before this PSN were sent before: counted as retransmissions
  uint32_t packets_since_ack_req_ = 0;
  uint64_t last_ack_req_ns_ = 0;  // when the last request with AckReq left, while paced (pace_now_ns_)
  uint32_t window_packets_ = 0;   // request packets allowed in flight (0: no cap); below the cap after a loss
  uint32_t window_growth_ = 0;    // packets acknowledged toward the window's next packet
  uint8_t reads_in_flight_ = 0;
  uint8_t retries_left_ = 0;
  uint8_t rnr_retries_left_ = 0;
  bool retry_pending_ = false;  // a go-back-N pass is in progress: ignore further sequence NAKs for it
  uint64_t retransmit_deadline_ns_ = 0;
  uint64_t rnr_deadline_ns_ = 0;
  // Congestion control: the DCQCN rate (reaction point), and when the pacer next lets a packet out if it held one
  // back (0: it holds nothing).
  DcqcnRate rate_{};
  uint64_t pace_deadline_ns_ = 0;
  uint64_t pace_now_ns_ = 0;  // the clock as may_send_packet() read it for the packet being sent

  // Responder state.
  Psn expected_psn_{};
  Msn msn_{};
  bool sequence_nak_sent_ = false;  // one NAK per gap (rocev2.md §4.4)
  Message in_message_ = Message::kNone;
  RecvWqe recv_{};          // the receive WQE of the SEND (or WRITE with immediate) in progress
  bool recv_held_ = false;  // recv_ was consumed and has not completed yet
  uint32_t recv_offset_ = 0;
  uint32_t recv_capacity_ = 0;
  uint8_t recv_paged_sges_ = 0;  // WqeProgress::paged_sges for recv_
  uint32_t write_remaining_ = 0;
  uint32_t write_length_ = 0;
  // Where the WRITE in progress goes on: every packet resolves its R_Key over its own bytes there, or with paged
  // memory goes through RcEnv::copy_paged.
  bool write_paged_ = false;
  uint64_t write_va_ = 0;
  RemoteToken write_rkey_{};
  // The packet on_packet() is handling carries a deferred ICRC (ParsedPacket::icrc_deferred) that nothing has
  // checked yet: every path that acts on it checks first (settle_icrc), except the fused placement of a WRITE
  // payload, which checks while it copies and commits nothing unless the ICRC matches.
  bool icrc_unverified_ = false;
  // The R_Key of the last WRITE FIRST/ONLY this QP took from an ICRC-checked packet: the peer holds it.
  RemoteToken last_write_rkey_{};
  bool last_write_rkey_known_ = false;
  std::array<Resource, kMaxResponderResources> resources_{};
  uint8_t resource_next_ = 0;
  std::array<PendingResponse, std::size_t{kMaxResponderResources} * 2> responses_{};
  uint32_t resp_head_ = 0;
  uint32_t resp_tail_ = 0;
  bool ack_pending_ = false;
  bool ack_held_ = false;  // transmit() held the pending ACK back behind requests once
  Psn ack_psn_{};
  AethSyndrome ack_syndrome_pending_{0x1F};
  bool ack_syndrome_at_send_ = false;  // a plain ACK: its credit count is read when it is sent
  // Notification point: a CNP is due, and when the last one was (one per min_time_between_cnps_ns at most).
  bool cnp_pending_ = false;
  bool cnp_sent_before_ = false;
  uint64_t last_cnp_ns_ = 0;
};

// Small steps the requester and completer share, inline: each runs once or more per message.

inline uint32_t RcQp::packets_for(uint32_t length) const noexcept {
  return length == 0 ? 1 : static_cast<uint32_t>((uint64_t{length} + attrs_.path_mtu - 1) >> mtu_shift_);
}

// Acknowledgement moves the oldest unacknowledged PSN forward. The highest PSN ever sent
// (resend_limit_psn_, for go-back-N) must stay within 2^23 of the PSNs it is compared
// with, so it moves along: outstanding PSNs are bounded far below 2^23, so after this
// every comparison in sent_limit() is meaningful however long the QP runs.
inline void RcQp::set_unacked(Psn psn) noexcept {
  if (window_packets_ < attrs_.max_packets_in_flight) [[unlikely]]
    grow_window(static_cast<uint32_t>(std::max<int32_t>(0, distance(psn, unacked_psn_))));
  unacked_psn_ = psn;
  if (is_after(psn, resend_limit_psn_)) resend_limit_psn_ = psn;
}

// The initiator depth counts exactly the READ/atomic requests that are out and
// unanswered: the responder keeps only max_dest_rd_atomic of them to replay, so
// exceeding it would make a lost response unrecoverable.
inline void RcQp::retire_read(WqeProgress& pr) noexcept {
  if (pr.counted_in_flight) {
    pr.counted_in_flight = false;
    --reads_in_flight_;
  }
}

// Called with sq_oldest_ already past `index`, so that the environment may hand the slot back to the
// application before the completion becomes visible (NDK: a reaped completion frees its slot).
inline void RcQp::complete_wqe(uint32_t index, CompletionStatus status) noexcept {
  const SendWqe& w = wqe(index);
  retire_read(progress(index));
  progress(index) = WqeProgress{};
  if (w.op == WorkOp::kFastRegister && w.memory.page_list != 0) [[unlikely]]
    env_->retire_page_list(w.memory.token, w.memory.page_list);
  // SILENT_SUCCESS: unsignaled successes retire without a completion; failures always complete.
  if (status != CompletionStatus::kSuccess || (w.flags & kWqeSignaled)) {
    Completion c;
    c.context = w.context;
    c.status = status;
    c.op = w.op;
    c.byte_length = status == CompletionStatus::kSuccess ? w.length : 0;
    env_->complete_send(c);
  }
}

template <bool kIntoSges>
inline void RcQp::copy_sges(const Sge* sge, unsigned count, uint8_t paged, uint32_t offset,
                            std::conditional_t<kIntoSges, const uint8_t*, uint8_t*> buffer, std::size_t length,
                            [[maybe_unused]] uint32_t* crc) noexcept {
  for (unsigned i = 0; i < count && length > 0; ++i) {
    const Sge& s = sge[i];
    if (offset >= s.length) {
      offset -= s.length;
      continue;
    }
    const std::size_t n = std::min<std::size_t>(s.length - offset, length);
    auto* memory = reinterpret_cast<uint8_t*>(s.addr) + offset;
    if (paged & (1u << i)) [[unlikely]] {
      copy_paged_sge<kIntoSges>(s, offset, buffer, static_cast<uint32_t>(n));
      if constexpr (!kIntoSges) {
        if (crc != nullptr) *crc = crc32_ieee(*crc, buffer, n);
      }
    } else if constexpr (kIntoSges) {
      std::memcpy(memory, buffer, n);
    } else if (crc != nullptr) {
      *crc = crc32_ieee_copy(*crc, buffer, memory, n);
    } else {
      std::memcpy(buffer, memory, n);
    }
    buffer += n;
    length -= n;
    offset = 0;
  }
}

inline bool RcQp::check_local_sge(const Sge& s, uint32_t access, bool& paged) noexcept {
  if (s.length == 0) return true;  // never checked (IBTA C9-88)
  const uint8_t* memory = env_->resolve_local(s.lkey, s.addr, s.length, access);
  if (memory != nullptr && memory == reinterpret_cast<const uint8_t*>(s.addr)) [[likely]]
    return true;
  paged = true;  // nullptr, or paged memory that translated
  return memory != nullptr || env_->grants_paged(s.lkey.value(), s.addr, s.length, access, true);
}

inline bool RcQp::sges_writable(const Sge* sge, unsigned count, uint32_t offset, std::size_t length) noexcept {
  for (unsigned i = 0; i < count && length > 0; ++i) {
    const Sge& s = sge[i];
    if (offset >= s.length) {
      offset -= s.length;
      continue;
    }
    bool paged = false;
    if (!check_local_sge(s, kAccessLocalWrite, paged)) return false;
    length -= std::min<std::size_t>(s.length - offset, length);
    offset = 0;
  }
  return true;
}

}  // namespace uroce::proto
