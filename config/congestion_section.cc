// The `congestion` section: the in-flight cap, ECN, and DCQCN's notification and reaction points.
#include <limits>

#include "config/sections.h"

namespace uroce::config::detail {

namespace {

constexpr uint64_t kU32Max = std::numeric_limits<uint32_t>::max();
constexpr uint64_t kMaxRateMbps = 1'600'000;  // 1.6 Tb/s: beyond any Ethernet port
// 4 s: every DCQCN clock is microseconds to milliseconds, and the transport keeps them in 32-bit nanoseconds.
constexpr uint64_t kMaxMicroseconds = 4'000'000;
static_assert(kMaxMicroseconds * 1000 <= kU32Max, "the *_us keys become uint32_t nanoseconds (rc_transport.cc)");

constexpr std::array<Field<NotificationPointConfig>, 3> kNotificationPointFields = {{
    {"enabled", boolean<&NotificationPointConfig::enabled>()},
    {"min_time_between_cnps_us", integer<&NotificationPointConfig::min_time_between_cnps_us, 0, kMaxMicroseconds>()},
    {"cnp_dscp", integer<&NotificationPointConfig::cnp_dscp, 0, 63>()},
}};

constexpr std::array<Field<ReactionPointConfig>, 15> kReactionPointFields = {{
    {"enabled", boolean<&ReactionPointConfig::enabled>()},
    {"max_rate_mbps", integer<&ReactionPointConfig::max_rate_mbps, 0, kMaxRateMbps>()},
    {"min_rate_mbps", integer<&ReactionPointConfig::min_rate_mbps, 1, kMaxRateMbps>()},
    {"ai_rate_mbps", integer<&ReactionPointConfig::ai_rate_mbps, 0, kMaxRateMbps>()},
    {"hai_rate_mbps", integer<&ReactionPointConfig::hai_rate_mbps, 0, kMaxRateMbps>()},
    {"time_reset_us", integer<&ReactionPointConfig::time_reset_us, 1, kMaxMicroseconds>()},
    // Below a frame's size the byte counter would count several increase events per packet.
    {"byte_reset", integer<&ReactionPointConfig::byte_reset, 64, kU32Max>()},
    {"threshold", integer<&ReactionPointConfig::threshold, 1, 255>()},
    {"min_dec_fac", integer<&ReactionPointConfig::min_dec_fac, 1, 100>()},
    {"dce_tcp_g", integer<&ReactionPointConfig::dce_tcp_g, 0, 1024>()},
    {"dce_tcp_rtt_us", integer<&ReactionPointConfig::dce_tcp_rtt_us, 1, kMaxMicroseconds>()},
    {"initial_alpha_value", integer<&ReactionPointConfig::initial_alpha_value, 0, 1023>()},
    {"rate_reduce_monitor_period_us",
     integer<&ReactionPointConfig::rate_reduce_monitor_period_us, 0, kMaxMicroseconds>()},
    {"rate_to_set_on_first_cnp_mbps", integer<&ReactionPointConfig::rate_to_set_on_first_cnp_mbps, 0, kMaxRateMbps>()},
}};

constexpr std::array<Field<CongestionConfig>, 5> kCongestionFields = {{
    // 0 = no cap; otherwise at least one packet of the smallest path MTU.
    {"max_bytes_in_flight",
     [](Reader& r, const YAML::Node& node, const std::string& key, CongestionConfig& out) {
       const auto v = r.integer(node, key, 0, 1u << 30);
       if (!v) return;
       if (*v != 0 && *v < 256) {
         r.error(key, "must be 0 (no cap) or at least 256 bytes (one packet of the smallest path MTU), got " +
                          node.Scalar());
         return;
       }
       out.max_bytes_in_flight = static_cast<uint32_t>(*v);
     }},
    {"slow_restart", boolean<&CongestionConfig::slow_restart>()},
    {"ecn", boolean<&CongestionConfig::ecn>()},
    {"notification_point",
     [](Reader& r, const YAML::Node& node, const std::string& key, CongestionConfig& out) {
       read_map(r, node, key, kNotificationPointFields, out.notification_point);
     }},
    {"reaction_point", [](Reader& r, const YAML::Node& node, const std::string& key,
                          CongestionConfig& out) { read_map(r, node, key, kReactionPointFields, out.reaction_point); }},
}};

}  // namespace

void read_congestion_section(Reader& r, const YAML::Node& node, const std::string& key, Config& out) {
  read_map(r, node, key, kCongestionFields, out.congestion);
}

void check_congestion(Reader& r, const Config& config) {
  const ReactionPointConfig& rp = config.congestion.reaction_point;
  const std::string max_key = "congestion.reaction_point.max_rate_mbps";
  const std::string min_key = "congestion.reaction_point.min_rate_mbps";
  if (rp.max_rate_mbps != 0 && rp.min_rate_mbps > rp.max_rate_mbps && r.ok(max_key) && r.ok(min_key)) {
    r.error(min_key, "must not exceed max_rate_mbps (" + std::to_string(rp.max_rate_mbps) + "), got " +
                         std::to_string(rp.min_rate_mbps));
  }
}

}  // namespace uroce::config::detail
