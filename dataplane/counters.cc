#include "dataplane/counters.h"

#include <string_view>

namespace uroce::dataplane {

namespace {

template <class Struct>
struct NamedCounter {
  std::string_view name;
  Counter Struct::*member;
};

using E = EngineCounters;
constexpr NamedCounter<E> kEngineCounters[] = {
    {"rx_packets", &E::rx_packets},
    {"rx_bytes", &E::rx_bytes},
    {"rx_not_roce", &E::rx_not_roce},
    {"rx_not_for_us", &E::rx_not_for_us},
    {"rx_drop_nonlinear", &E::rx_drop_nonlinear},
    {"rx_unknown_qp", &E::rx_unknown_qp},
    {"rx_delivered", &E::rx_delivered},
    {"arp_requests_answered", &E::arp_requests_answered},
    {"arp_requests_sent", &E::arp_requests_sent},
    {"arp_replies_received", &E::arp_replies_received},
    {"nd_solicitations_answered", &E::nd_solicitations_answered},
    {"nd_solicitations_sent", &E::nd_solicitations_sent},
    {"nd_advertisements_received", &E::nd_advertisements_received},
    {"rx_neighbor_malformed", &E::rx_neighbor_malformed},
    {"rx_neighbor_refused", &E::rx_neighbor_refused},
    {"redirect_enqueued", &E::redirect_enqueued},
    {"redirect_ring_full", &E::redirect_ring_full},
    {"redirect_received", &E::redirect_received},
    {"tx_packets", &E::tx_packets},
    {"tx_bytes", &E::tx_bytes},
    {"tx_backlog_drops", &E::tx_backlog_drops},
    {"tx_backpressure", &E::tx_backpressure},
    {"mbuf_alloc_failures", &E::mbuf_alloc_failures},
    {"busy_cycles", &E::busy_cycles},
    {"total_cycles", &E::total_cycles},
    {"timers_fired", &E::timers_fired},
    {"commands_executed", &E::commands_executed},
    {"invalidation_waits", &E::invalidation_waits},
    {"fault_dropped", &E::fault_dropped},
    {"fault_duplicated", &E::fault_duplicated},
    {"fault_reordered", &E::fault_reordered},
    {"fault_corrupted", &E::fault_corrupted},
    {"bottleneck_forwarded", &E::bottleneck_forwarded},
    {"bottleneck_dropped", &E::bottleneck_dropped},
    {"bottleneck_ecn_marked", &E::bottleneck_ecn_marked},
    {"bottleneck_queue_peak_bytes", &E::bottleneck_queue_peak_bytes},
    {"bottleneck_queue_bytes", &E::bottleneck_queue_bytes},
    {"capture_packets", &E::capture_packets},
    {"capture_drops", &E::capture_drops},
};

using T = TransportCounters;
constexpr NamedCounter<T> kTransportCounters[] = {
    {"out_of_sequence", &T::out_of_sequence},
    {"duplicate_request", &T::duplicate_request},
    {"packet_seq_err", &T::packet_seq_err},
    {"implied_nak_seq_err", &T::implied_nak_seq_err},
    {"local_ack_timeout_err", &T::local_ack_timeout_err},
    {"rnr_nak_retry_err", &T::rnr_nak_retry_err},
    {"rcvd_rnr_err", &T::rcvd_rnr_err},
    {"send_rnr_err", &T::send_rnr_err},
    {"out_of_buffer", &T::out_of_buffer},
    {"retry_exceeded_err", &T::retry_exceeded_err},
    {"rx_write_requests", &T::rx_write_requests},
    {"rx_read_requests", &T::rx_read_requests},
    {"rx_atomic_requests", &T::rx_atomic_requests},
    {"resp_local_length_error", &T::resp_local_length_error},
    {"resp_remote_access_errors", &T::resp_remote_access_errors},
    {"req_remote_access_errors", &T::req_remote_access_errors},
    {"req_remote_invalid_request", &T::req_remote_invalid_request},
    {"resp_invalid_request", &T::resp_invalid_request},
    {"resp_resources_exceeded", &T::resp_resources_exceeded},
    {"resp_duplicate_unmatched", &T::resp_duplicate_unmatched},
    {"req_remote_operational_error", &T::req_remote_operational_error},
    {"req_response_out_of_window", &T::req_response_out_of_window},
    {"req_invalid_aeth", &T::req_invalid_aeth},
    {"req_unexpected_response", &T::req_unexpected_response},
    {"rx_qp_not_ready", &T::rx_qp_not_ready},
    {"rx_pkey_mismatch", &T::rx_pkey_mismatch},
    {"rx_wrong_transport", &T::rx_wrong_transport},
    {"rx_path_mismatch", &T::rx_path_mismatch},
    {"np_cnp_sent", &T::np_cnp_sent},
    {"rp_cnp_handled", &T::rp_cnp_handled},
    {"np_ecn_marked_roce_packets", &T::np_ecn_marked_roce_packets},
    {"rp_cnp_ignored", &T::rp_cnp_ignored},
    {"tx_paced", &T::tx_paced},
    {"roce_slow_restart", &T::roce_slow_restart},
};

using P = PortCounters;
constexpr NamedCounter<P> kPortCounters[] = {
    {"rx_packets", &P::rx_packets},
    {"rx_bytes", &P::rx_bytes},
    {"tx_packets", &P::tx_packets},
    {"tx_bytes", &P::tx_bytes},
};

// The reasons counted by rx_not_roce instead of a drop bucket: the frame is simply not RoCE.
constexpr bool is_not_roce(proto::ParseError e) noexcept {
  return e == proto::ParseError::kOk || e == proto::ParseError::kNotIp || e == proto::ParseError::kNotUdp ||
         e == proto::ParseError::kNotRoceV2;
}

std::string drop_counter_name(proto::ParseError e) {
  if (e == proto::ParseError::kBadIcrc) return "rx_icrc_encapsulated";  // mlx5's name for ICRC errors
  return "rx_drop_" + std::string(proto::parse_error_name(e));
}

}  // namespace

std::vector<std::pair<std::string, uint64_t>> counter_values(const EngineCounters& c) {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const auto& [name, member] : kEngineCounters) out.emplace_back(name, (c.*member).read());
  for (std::size_t i = 0; i < kParseErrorCount; ++i) {
    const auto e = static_cast<proto::ParseError>(i);
    if (!is_not_roce(e)) out.emplace_back(drop_counter_name(e), c.rx_drop[i].read());
  }
  for (const auto& [name, member] : kTransportCounters) out.emplace_back(name, (c.transport.*member).read());
  return out;
}

std::vector<std::pair<std::string, uint64_t>> counter_values(const PortCounters& c) {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const auto& [name, member] : kPortCounters) out.emplace_back(name, (c.*member).read());
  return out;
}

std::optional<uint64_t> counter_value(const EngineCounters& c, const std::string& name) {
  for (const auto& [n, v] : counter_values(c))
    if (n == name) return v;
  return std::nullopt;
}

}  // namespace uroce::dataplane
