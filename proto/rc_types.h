// Work requests, completions and QP attributes shared by the RC requester,
// responder and completer (and, above them, the dataplane and the API).
#pragma once

#include <array>
#include <cstdint>

#include "proto/dcqcn.h"
#include "proto/types.h"

namespace uroce::proto {

inline constexpr unsigned kMaxSge = 8;
inline constexpr unsigned kMaxResponderResources = 32;  // saved READ/atomic requests per QP
// The largest message RC carries (IBTA's 2^31-byte maximum message size; rdma_rxe's max_msg_sz). A READ or WRITE
// whose RETH asks for more is an invalid request: at PMTU 256 it would need 2^23 PSNs, past what 24-bit PSN
// comparison can order, and a DMA length near 2^32 would wrap the packet count to zero.
inline constexpr uint32_t kMaxMessageLength = uint32_t{1} << 31;

enum class WorkOp : uint8_t {
  kSend,
  kSendWithImmediate,
  kSendWithInvalidate,
  kRdmaWrite,
  kRdmaWriteWithImmediate,
  kRdmaRead,
  kCompareSwap,
  kFetchAdd,
  // Local operations: executed by the requester against registered memory when they reach
  // the head of the send cursor, in posting order; they send nothing and consume no PSN.
  kFastRegister,      // make a fast-register MR valid over a new range (verbs REG_MR, NDK NdkFastRegister)
  kLocalInvalidate,   // make a fast-register MR or memory window invalid (verbs LOCAL_INV, NdkInvalidate)
  kBindMemoryWindow,  // bind a type-2 memory window inside an MR (verbs BIND_MW, NdkBind)
};

constexpr bool is_read_class(WorkOp op) noexcept {
  return op == WorkOp::kRdmaRead || op == WorkOp::kCompareSwap || op == WorkOp::kFetchAdd;
}
constexpr bool is_atomic(WorkOp op) noexcept { return op == WorkOp::kCompareSwap || op == WorkOp::kFetchAdd; }
constexpr bool is_local_operation(WorkOp op) noexcept {
  return op == WorkOp::kFastRegister || op == WorkOp::kLocalInvalidate || op == WorkOp::kBindMemoryWindow;
}

// Access rights, verbs values (rocev2.md §5).
enum Access : uint32_t {
  kAccessLocalWrite = 0x1,
  kAccessRemoteWrite = 0x2,
  kAccessRemoteRead = 0x4,
  kAccessRemoteAtomic = 0x8,
};

// A scatter/gather element. `addr` is a virtual address in this process; the
// token names the registration that must cover [addr, addr + length).
struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  LocalToken lkey{};
};

enum WqeFlag : uint8_t {
  kWqeSignaled = 1u << 0,   // produce a completion on success (failures always complete)
  kWqeSolicited = 1u << 1,  // set SE on the last packet
  kWqeReadFence = 1u << 2,  // wait for earlier READ/atomic to complete before starting
  kWqeInline = 1u << 3,     // sge[0] points at data copied at post time; no key check
};

// What a local operation does to registered memory (tokens are index << 8 | key byte).
struct MemoryOperation {
  uint64_t addr = 0;  // kFastRegister: the region's first byte; kBindMemoryWindow: the window's
  uint64_t length = 0;
  uint32_t token = 0;         // the token made valid (fast register, bind) or invalid (local invalidate)
  uint32_t region_token = 0;  // kBindMemoryWindow: the MR the window lies in
  uint32_t access = 0;        // Access bits the new region or window grants
  uint8_t page_list = 0;      // kFastRegister: 0, or the page list staged for it (dataplane/memory_table.h)
};

struct SendWqe {
  uint64_t context = 0;
  WorkOp op = WorkOp::kSend;
  uint8_t flags = 0;
  uint8_t num_sge = 0;
  uint32_t length = 0;  // sum of the SGE lengths (8 for atomics)
  std::array<Sge, kMaxSge> sge{};
  uint64_t remote_addr = 0;
  RemoteToken rkey{};
  uint32_t immediate = 0;  // host order; ImmDt carries it big-endian
  RemoteToken invalidate_rkey{};
  uint64_t compare_add = 0;  // CompareSwap: compare; FetchAdd: add
  uint64_t swap = 0;
  MemoryOperation memory{};  // local operations only
};

struct RecvWqe {
  uint64_t context = 0;
  uint8_t num_sge = 0;
  std::array<Sge, kMaxSge> sge{};
};

// Completion statuses, named and numbered as ibv_wc_status (rocev2.md §4.9), so
// that the API can map them to NTSTATUS in one table.
enum class CompletionStatus : uint8_t {
  kSuccess = 0,
  kLocalLengthError = 1,
  kLocalQpOperationError = 2,
  kLocalProtectionError = 4,
  kWorkRequestFlushed = 5,
  kMemoryWindowBindError = 6,
  kBadResponse = 7,
  kLocalAccessError = 8,
  kRemoteInvalidRequest = 9,
  kRemoteAccessError = 10,
  kRemoteOperationalError = 11,
  kRetryExceeded = 12,
  kRnrRetryExceeded = 13,
};

enum CompletionFlag : uint8_t {
  kCompletionWithImmediate = 1u << 0,
  kCompletionWithInvalidate = 1u << 1,
  kCompletionSolicited = 1u << 2,
};

struct Completion {
  uint64_t context = 0;
  CompletionStatus status = CompletionStatus::kSuccess;
  WorkOp op = WorkOp::kSend;  // for receives: kSend, kSendWithImmediate, kSendWithInvalidate or kRdmaWriteWithImmediate
  uint8_t flags = 0;
  uint32_t byte_length = 0;
  uint32_t immediate = 0;
  RemoteToken invalidated_rkey{};
};

enum class QpState : uint8_t { kReset, kInit, kReadyToReceive, kReadyToSend, kError };

// What connecting a QP fixes (verbs RTR + RTS attributes; rocev2.md §4.1).
struct RcQpAttributes {
  Qpn local_qpn{};
  Qpn remote_qpn{};
  Psn send_psn{};     // our first request PSN
  Psn receive_psn{};  // the peer's first request PSN
  uint32_t path_mtu = 1024;
  uint8_t ack_timeout = 14;  // 4.096 us * 2^n; 0 = no retransmit timer
  uint8_t retry_count = 7;
  uint8_t rnr_retry = 7;  // 7 = infinite
  uint8_t min_rnr_timer = 12;
  uint8_t max_rd_atomic = 16;       // our READ/atomic in flight
  uint8_t max_dest_rd_atomic = 16;  // the peer's READ/atomic we hold state for
  uint16_t ack_request_interval = 64;
  PKey pkey = kDefaultPKey;
  uint32_t access = kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;  // what the peer may do to us
  // Request packets with at least this many payload bytes, taken from one SGE of registered memory, are offered
  // to RcEnv::tx_begin_zero_copy() instead of being copied into the frame; 0 = never.
  uint32_t zero_copy_min_payload = 0;
  // Congestion control (rocev2.md §7, cm-nvmf-dcqcn.md §4).
  // At most this many request PSNs outstanding (sent and not yet acknowledged or answered; a READ counts its
  // response packets); 0 = no cap. A slow or lossy receiver then meets a bounded burst, not a whole window of
  // go-back-N (IRN's BDP flow control).
  uint32_t max_packets_in_flight = 0;
  // Slow restart (NVIDIA's name, the roce_slow_restart counter): a loss (a PSN sequence NAK, an implied NAK or an
  // ACK timeout) halves the window under that cap, and acknowledged packets grow it back by one packet per window
  // (TCP Reno's AIMD), so a receiver that drops what it cannot buffer meets half the burst on the resend, not the
  // same one. Needs a cap (max_packets_in_flight != 0).
  bool slow_restart = true;
  // Notification point: answer CE-marked packets with a CNP to the peer's QP, at most one per interval.
  bool notify_congestion = false;
  uint32_t min_time_between_cnps_ns = 4'000;
  uint8_t cnp_traffic_class = 48 << 2;  // the CNP's IP TOS / traffic class byte: DSCP 48 by default
  // Reaction point: pace the QP at the DCQCN rate its CNPs set.
  bool rate_control = false;
  DcqcnParameters dcqcn{};
};

// Local ACK timeout in nanoseconds: 4.096 us * 2^timeout (IBTA 9.7.6.1.3).
constexpr uint64_t ack_timeout_ns(uint8_t timeout) noexcept {
  return timeout == 0 ? 0 : 4096ull << (timeout > 31 ? 31 : timeout);
}
static_assert(ack_timeout_ns(14) == 67'108'864);

// Per-QP counters, named as rxe/mlx5 name them so users recognise them.
struct RcCounters {
  uint64_t rx_write_requests = 0;
  uint64_t rx_read_requests = 0;
  uint64_t rx_atomic_requests = 0;
  uint64_t rx_send_requests = 0;
  uint64_t out_of_sequence = 0;        // responder: request PSN ahead of the expected PSN
  uint64_t duplicate_request = 0;      // responder: request PSN behind (re-ACKed or replayed)
  uint64_t packet_seq_err = 0;         // requester: PSN sequence error NAKs received
  uint64_t local_ack_timeout_err = 0;  // requester: retransmit timer expirations
  uint64_t rnr_nak_received = 0;
  uint64_t rnr_nak_sent = 0;
  uint64_t rnr_nak_retry_err = 0;
  uint64_t retry_exceeded_err = 0;
  uint64_t implied_nak_seq_err = 0;  // requester: a response skipped an unanswered READ/atomic
  uint64_t retransmitted_packets = 0;
  uint64_t acks_sent = 0;
  uint64_t naks_sent = 0;
  uint64_t resp_local_length_error = 0;
  uint64_t resp_remote_access_error = 0;
  uint64_t resp_invalid_request = 0;
  uint64_t req_remote_access_error = 0;
  uint64_t req_remote_invalid_request = 0;
  uint64_t req_remote_operational_error = 0;
  uint64_t tx_backpressure = 0;  // no TX buffer: the state machine retries later
  // Dropped before anything acts on them (each names the first check the packet failed):
  uint64_t rx_qp_not_ready = 0;             // the QP is in RESET, INIT or ERROR (or not yet RTS, for a response)
  uint64_t rx_pkey_mismatch = 0;            // BTH P_Key is not the QP's (IBTA C9-42)
  uint64_t rx_wrong_transport = 0;          // a UC, UD or other transport's opcode at an RC QP
  uint64_t rx_path_mismatch = 0;            // not from the connected peer's IP address to ours, or another IP version
  uint64_t req_response_out_of_window = 0;  // an ACK, NAK or response for PSNs outside [oldest unacked, next)
  uint64_t req_invalid_aeth = 0;            // a reserved AETH syndrome, or a NAK on a READ response or atomic ACK
  uint64_t req_unexpected_response = 0;     // a READ response or atomic ACK that the oldest request did not ask for
  uint64_t resp_duplicate_unmatched = 0;    // a duplicate READ/atomic that no saved request matches
  uint64_t resp_resources_exceeded = 0;     // a READ/atomic beyond max_dest_rd_atomic outstanding (NAKed)
  uint64_t rx_icrc_errors = 0;  // a deferred ICRC (ParsedPacket::icrc_deferred) did not match: dropped, no effect
  // Congestion control, named as mlx5 names them.
  uint64_t np_ecn_marked_roce_packets = 0;  // packets that arrived CE-marked
  uint64_t np_cnp_sent = 0;
  uint64_t rp_cnp_handled = 0;     // CNPs that cut the QP's rate (or would have, inside the monitor period)
  uint64_t rp_cnp_ignored = 0;     // CNPs for a QP without rate control, or not yet able to send
  uint64_t tx_paced = 0;           // times the pacer held a packet back
  uint64_t roce_slow_restart = 0;  // losses that halved the in-flight window (RcQpAttributes::slow_restart)
};

}  // namespace uroce::proto
