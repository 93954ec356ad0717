// Per-engine and per-port counters, written only by the owning engine and read by anyone.
//
// Names follow the rxe and mlx5 hw_counters users already know (rx_icrc_encapsulated, out_of_sequence,
// local_ack_timeout_err, ...) and DPDK's ethdev names for the packet totals. They are exported through DPDK
// telemetry as /uroce/engine,<id> and /uroce/port,<index> (dataplane.cc).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "proto/packet_parser.h"

namespace uroce::dataplane {

// A statistic with one writer (the engine that owns it) and any number of readers on other threads.
// The writer needs no read-modify-write: a relaxed load and a relaxed store compile to the same plain
// load/add/store as `++` on x86, but make the concurrent reads well defined. Readers get a value that
// was current at some recent point; counters carry no ordering with anything else.
class Counter {
 public:
  Counter() = default;
  Counter(const Counter&) = delete;  // a copy would be a racy read; use read()
  Counter& operator=(const Counter&) = delete;

  void add(uint64_t n = 1) noexcept {
    const std::atomic_ref<uint64_t> v{value_};
    v.store(v.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  [[nodiscard]] uint64_t read() const noexcept {
    return std::atomic_ref<uint64_t>{value_}.load(std::memory_order_relaxed);
  }

 private:
  alignas(std::atomic_ref<uint64_t>::required_alignment) mutable uint64_t value_ = 0;
};

inline constexpr std::size_t kParseErrorCount = static_cast<std::size_t>(proto::ParseError::kCount);

// Counters the RC/UC/UD transport increments (mlx5 names, rxe's where mlx5 has none).
struct TransportCounters {
  Counter out_of_sequence;        // responder: request PSN ahead of the expected one (NAK sent)
  Counter duplicate_request;      // responder: request PSN behind the expected one
  Counter packet_seq_err;         // requester: NAK sequence error received
  Counter implied_nak_seq_err;    // requester: READ/atomic response implies lost packets
  Counter local_ack_timeout_err;  // requester: retransmit timer fired
  Counter rnr_nak_retry_err;      // requester: RNR retries exhausted
  Counter rcvd_rnr_err;           // requester: RNR NAK received (rxe)
  Counter send_rnr_err;           // responder: RNR NAK sent (rxe)
  Counter out_of_buffer;          // responder: no receive WQE for a SEND
  Counter retry_exceeded_err;     // requester: transport retries exhausted (rxe)
  Counter rx_write_requests;
  Counter rx_read_requests;
  Counter rx_atomic_requests;
  Counter resp_local_length_error;
  Counter resp_remote_access_errors;
  Counter req_remote_access_errors;
  Counter req_remote_invalid_request;
  Counter resp_invalid_request;          // responder: Invalid Request NAK sent
  Counter resp_resources_exceeded;       // responder: READ/atomic beyond max_dest_rd_atomic (NAKed)
  Counter resp_duplicate_unmatched;      // responder: duplicate READ/atomic matching no saved request
  Counter req_remote_operational_error;  // requester: Remote Operational Error NAK received
  Counter req_response_out_of_window;    // requester: ACK/NAK/response outside [unacked, next)
  Counter req_invalid_aeth;              // requester: reserved AETH syndrome, or a NAK on a READ response / atomic ACK
  Counter req_unexpected_response;       // requester: response the oldest request did not ask for
  Counter rx_qp_not_ready;               // QP in RESET/INIT/ERROR
  Counter rx_pkey_mismatch;              // BTH P_Key is not the QP's
  Counter rx_wrong_transport;            // another transport's opcode at an RC QP
  Counter rx_path_mismatch;              // not from the connected peer's address to ours
  // Congestion control (mlx5's names; rp_cnp_ignored as mlx5 counts CNPs it does not act on).
  Counter np_cnp_sent;                 // CNPs sent for CE-marked packets
  Counter rp_cnp_handled;              // CNPs that reached a rate-controlled QP
  Counter np_ecn_marked_roce_packets;  // RoCE packets that arrived CE-marked
  Counter rp_cnp_ignored;              // CNPs for a QP without rate control
  Counter tx_paced;                    // times the DCQCN pacer held a QP's packet back
  Counter roce_slow_restart;           // losses that halved a QP's in-flight window (congestion.slow_restart)
};

struct EngineCounters {
  // Receive, counted where the packet left the NIC queue (before a redirect).
  Counter rx_packets;
  Counter rx_bytes;
  Counter rx_not_roce;        // neither ARP, ND nor UDP 4791 (ParseError not_ip, not_udp, not_rocev2)
  Counter rx_not_for_us;      // unicast to another MAC
  Counter rx_drop_nonlinear;  // a chained mbuf that could not be made contiguous
  // Indexed by ParseError for the reasons that are real drops of a RoCE packet. kBadIcrc is exported under
  // mlx5's name rx_icrc_encapsulated, the others as rx_drop_<parse_error_name>.
  std::array<Counter, kParseErrorCount> rx_drop;
  Counter rx_unknown_qp;  // well-formed, but no QP registered under its destination QPN
  Counter rx_delivered;   // handed to a QP endpoint
  // Neighbour resolution (engine 0 only: it owns ARP/ND).
  Counter arp_requests_answered;
  Counter arp_requests_sent;
  Counter arp_replies_received;
  Counter nd_solicitations_answered;
  Counter nd_solicitations_sent;
  Counter nd_advertisements_received;
  Counter rx_neighbor_malformed;  // ARP/ICMPv6 that failed validation
  Counter rx_neighbor_refused;    // from nobody's address (group, own), or re-pointing a known one: ignored
  // Inter-engine redirect rings.
  Counter redirect_enqueued;   // sent to the owning engine
  Counter redirect_ring_full;  // dropped: the owner's ring was full
  Counter redirect_received;   // taken from other engines' rings
  // Transmit.
  Counter tx_packets;
  Counter tx_bytes;
  Counter tx_backlog_drops;     // a short burst met a full backlog
  Counter tx_backpressure;      // an RC QP held a packet back because the port's TX backlog was full
  Counter mbuf_alloc_failures;  // the engine's mempool was empty (backpressure to the caller)
  // Where the engine's time goes, in TSC cycles (DPDK's lcore usage names): every loop iteration adds its length to
  // total_cycles, and to busy_cycles when it found work. busy / total is the engine's busy share.
  Counter busy_cycles;
  Counter total_cycles;
  // Timers and control.
  Counter timers_fired;
  Counter commands_executed;
  Counter invalidation_waits;  // invalidations that found another engine inside an iteration and waited for it
  // Test-only fault injection (config.faults).
  Counter fault_dropped;
  Counter fault_duplicated;
  Counter fault_reordered;
  Counter fault_corrupted;
  // Test-only bottleneck link (config.faults.bottleneck, link_model.h).
  Counter bottleneck_forwarded;         // left the queue for the engine
  Counter bottleneck_dropped;           // did not fit the buffer
  Counter bottleneck_ecn_marked;        // ECT set to CE
  Counter bottleneck_queue_peak_bytes;  // a high-water mark, not a count: the deepest any of the engine's queues got
  Counter bottleneck_queue_bytes;       // a gauge, not a count: the bytes the engine's queues hold now
  // pcapng capture (config.capture).
  Counter capture_packets;
  Counter capture_drops;  // the writer thread fell behind: the packet is not in the file

  TransportCounters transport;
};

// Per (engine, port); telemetry sums them over engines.
struct PortCounters {
  Counter rx_packets;
  Counter rx_bytes;
  Counter tx_packets;
  Counter tx_bytes;
};

// Every counter as (name, value), in a stable order: what telemetry and tests print.
[[nodiscard]] std::vector<std::pair<std::string, uint64_t>> counter_values(const EngineCounters& c);
[[nodiscard]] std::vector<std::pair<std::string, uint64_t>> counter_values(const PortCounters& c);
// One counter by its exported name; empty for an unknown name.
[[nodiscard]] std::optional<uint64_t> counter_value(const EngineCounters& c, const std::string& name);

}  // namespace uroce::dataplane
