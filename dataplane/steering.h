// How RoCEv2 packets reach the engines' RX queues on one port (config: ports[i].steering).
//
// rte_flow: rules send IPv4 and IPv6 UDP to port 4791 to the engines' queues, spread by RSS over the UDP source
// port alone. That port is the RoCE entropy field (each QP sends from its own), so one QP's packets stay in order
// on one queue. Before the port is configured, flow isolation is asked for: then only traffic a rule matches reaches
// the engines, and the rest stays with the kernel (mlx5's bifurcated model) or is dropped by the NIC (ice). Isolated,
// ARP and ICMPv6 (neighbour discovery) get rules of their own to engine 0's queue, which owns ARP/ND. Where the PMD
// cannot isolate, the rules still apply and everything else takes the port's default RSS.
//
// RSS (the fallback): no rules. The port's RSS over the UDP 4-tuple, where the device has any, spreads packets
// over the queues, and an engine that receives another engine's QP's packet passes it on through a redirect ring.
// The QPN picks the owning engine and the peer picks the UDP source port, so no hash can replicate the QPN's
// choice: the redirect rings carry the difference either way (ARCHITECTURE.md, Steering).
//
// `auto` tries rte_flow and falls back to RSS when the PMD refuses a rule (validate or create), saying so in the
// log; `rte_flow` makes that refusal a start-up error. Control path only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "dataplane/status.h"

struct rte_flow;

namespace uroce::dataplane {

enum class SteeringMode : uint8_t {
  kRss,              // no rules: the port's RSS and the redirect rings
  kRteFlow,          // rules for RoCE; everything else takes the port's default RSS
  kRteFlowIsolated,  // rules for RoCE, ARP and ICMPv6; everything else stays with the kernel or is dropped
};
[[nodiscard]] const char* steering_mode_name(SteeringMode mode) noexcept;

// What the rules match besides the port.
struct SteeringTarget {
  uint16_t port_id = 0;
  uint16_t queues = 1;  // the engines' RX queues 0..queues-1; queue 0 is engine 0's (ARP/ND)
  bool ipv4 = false;    // the port has IPv4 (resp. IPv6) addresses: steer that family's RoCE (and ARP or ND)
  bool ipv6 = false;
  std::string label;  // "port cx0 (0000:3b:00.0)", for messages
};

// The rte_flow rules of one port. Use: request_isolation() before rte_eth_dev_configure(), install() once the port
// has started, remove() before it stops.
class PortSteering {
 public:
  PortSteering() = default;
  ~PortSteering() = default;  // rules die with the port; remove() takes them out while it lives
  PortSteering(const PortSteering&) = delete;
  PortSteering& operator=(const PortSteering&) = delete;
  PortSteering(PortSteering&&) noexcept = default;
  PortSteering& operator=(PortSteering&&) noexcept = default;

  // Before rte_eth_dev_configure. Under `rss`, does nothing. Otherwise asks for flow isolation; a PMD that refuses
  // keeps the port un-isolated, which install() then reports.
  void request_isolation(const SteeringTarget& target, config::Steering steering);
  // After rte_eth_dev_start: validates and creates every rule. A refusal under `auto` (or a PMD without rte_flow)
  // removes what was created, leaves isolation if it was on (restarting the port), logs why and returns kRss;
  // under `rte_flow` it is an error naming the rule and the PMD's message.
  [[nodiscard]] Result<SteeringMode> install(const SteeringTarget& target, config::Steering steering);
  // Destroys the rules (before the port stops). Idempotent.
  void remove(uint16_t port_id) noexcept;

  [[nodiscard]] bool isolated() const noexcept { return isolated_; }

 private:
  [[nodiscard]] Status leave_isolation(const SteeringTarget& target);

  std::vector<rte_flow*> rules_;
  bool isolated_ = false;
};

}  // namespace uroce::dataplane
