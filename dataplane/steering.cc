#include "dataplane/steering.h"

#include <array>
#include <cerrno>
#include <numeric>

#include <rte_byteorder.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_flow.h>
#include <rte_log.h>

namespace uroce::dataplane {

namespace {

constexpr uint16_t kRoceV2UdpPort = 4791;
constexpr uint16_t kEtherTypeArp = 0x0806;

std::string flow_error_text(const rte_flow_error& error, int rc) {
  std::string text = error.message != nullptr ? error.message : rte_strerror(rc < 0 ? -rc : rc);
  return text + " (error type " + std::to_string(static_cast<int>(error.type)) + ")";
}

// One rule: its pattern and actions, with the item specs they point at kept alive beside them.
struct Rule {
  std::string what;  // for messages: "IPv4 UDP/4791 -> RSS over 2 queues"
  rte_flow_item_eth eth_spec{}, eth_mask{};
  rte_flow_item_udp udp_spec{}, udp_mask{};
  rte_flow_action_queue queue{};
  rte_flow_action_rss rss{};
  std::vector<uint16_t> rss_queues;
  std::vector<rte_flow_item> pattern;
  std::vector<rte_flow_action> actions;
};

// UDP to 4791 over one IP version, spread by the UDP source port over every engine's queue.
void make_roce_rule(Rule& rule, bool ipv6, uint16_t queues) {
  rule.udp_spec.hdr.dst_port = rte_cpu_to_be_16(kRoceV2UdpPort);
  rule.udp_mask.hdr.dst_port = rte_cpu_to_be_16(0xFFFF);
  rule.pattern = {{RTE_FLOW_ITEM_TYPE_ETH, nullptr, nullptr, nullptr},
                  {ipv6 ? RTE_FLOW_ITEM_TYPE_IPV6 : RTE_FLOW_ITEM_TYPE_IPV4, nullptr, nullptr, nullptr},
                  {RTE_FLOW_ITEM_TYPE_UDP, &rule.udp_spec, nullptr, &rule.udp_mask},
                  {RTE_FLOW_ITEM_TYPE_END, nullptr, nullptr, nullptr}};
  if (queues == 1) {
    // One engine: a QUEUE action. RSS over one queue does the same, and some PMDs refuse it: net_tap (DPDK 22.11)
    // builds every RSS action from a BPF program that Linux 6.1's verifier rejects.
    rule.queue.index = 0;
    rule.actions = {{RTE_FLOW_ACTION_TYPE_QUEUE, &rule.queue}, {RTE_FLOW_ACTION_TYPE_END, nullptr}};
    rule.what = std::string(ipv6 ? "IPv6" : "IPv4") + " UDP/4791 -> engine 0's queue";
    return;
  }
  rule.rss_queues.resize(queues);
  std::iota(rule.rss_queues.begin(), rule.rss_queues.end(), uint16_t{0});
  rule.rss.func = RTE_ETH_HASH_FUNCTION_DEFAULT;
  rule.rss.level = 0;
  rule.rss.types = (ipv6 ? RTE_ETH_RSS_NONFRAG_IPV6_UDP : RTE_ETH_RSS_NONFRAG_IPV4_UDP) | RTE_ETH_RSS_L4_SRC_ONLY;
  rule.rss.queue_num = queues;
  rule.rss.queue = rule.rss_queues.data();
  rule.actions = {{RTE_FLOW_ACTION_TYPE_RSS, &rule.rss}, {RTE_FLOW_ACTION_TYPE_END, nullptr}};
  rule.what = std::string(ipv6 ? "IPv6" : "IPv4") + " UDP/4791 -> RSS on the UDP source port over " +
              std::to_string(queues) + " engine queue(s)";
}

// ARP to engine 0's queue: it owns ARP. Needed only under isolation, where nothing else reaches the engines.
void make_arp_rule(Rule& rule) {
  rule.eth_spec.hdr.ether_type = rte_cpu_to_be_16(kEtherTypeArp);
  rule.eth_mask.hdr.ether_type = rte_cpu_to_be_16(0xFFFF);
  rule.pattern = {{RTE_FLOW_ITEM_TYPE_ETH, &rule.eth_spec, nullptr, &rule.eth_mask},
                  {RTE_FLOW_ITEM_TYPE_END, nullptr, nullptr, nullptr}};
  rule.queue.index = 0;
  rule.actions = {{RTE_FLOW_ACTION_TYPE_QUEUE, &rule.queue}, {RTE_FLOW_ACTION_TYPE_END, nullptr}};
  rule.what = "ARP -> engine 0's queue";
}

// ICMPv6 (neighbour solicitations and advertisements) to engine 0's queue, likewise.
void make_icmpv6_rule(Rule& rule) {
  rule.pattern = {{RTE_FLOW_ITEM_TYPE_ETH, nullptr, nullptr, nullptr},
                  {RTE_FLOW_ITEM_TYPE_IPV6, nullptr, nullptr, nullptr},
                  {RTE_FLOW_ITEM_TYPE_ICMP6, nullptr, nullptr, nullptr},
                  {RTE_FLOW_ITEM_TYPE_END, nullptr, nullptr, nullptr}};
  rule.queue.index = 0;
  rule.actions = {{RTE_FLOW_ACTION_TYPE_QUEUE, &rule.queue}, {RTE_FLOW_ACTION_TYPE_END, nullptr}};
  rule.what = "ICMPv6 -> engine 0's queue";
}

}  // namespace

const char* steering_mode_name(SteeringMode mode) noexcept {
  switch (mode) {
    case SteeringMode::kRss:
      return "rss";
    case SteeringMode::kRteFlow:
      return "rte_flow";
    case SteeringMode::kRteFlowIsolated:
      return "rte_flow_isolated";
  }
  return "?";
}

void PortSteering::request_isolation(const SteeringTarget& target, config::Steering steering) {
  if (steering == config::Steering::kRss) return;
  rte_flow_error error{};
  isolated_ = rte_flow_isolate(target.port_id, 1, &error) == 0;
}

Status PortSteering::leave_isolation(const SteeringTarget& target) {
  if (!isolated_) return {};
  // PMDs change isolation only on a stopped port.
  if (const int rc = rte_eth_dev_stop(target.port_id); rc != 0)
    return Status::error(target.label + ": rte_eth_dev_stop (to leave flow isolation): " + rte_strerror(-rc));
  rte_flow_error error{};
  if (const int rc = rte_flow_isolate(target.port_id, 0, &error); rc != 0)
    return Status::error(target.label + ": cannot leave flow isolation: " + flow_error_text(error, rc));
  isolated_ = false;
  if (const int rc = rte_eth_dev_start(target.port_id); rc != 0)
    return Status::error(target.label + ": rte_eth_dev_start (after leaving flow isolation): " + rte_strerror(-rc));
  return {};
}

Result<SteeringMode> PortSteering::install(const SteeringTarget& target, config::Steering steering) {
  if (steering == config::Steering::kRss) return SteeringMode::kRss;
  // Rules hold pointers into themselves: a fixed array, never resized.
  std::array<Rule, 4> storage;
  std::size_t count = 0;
  if (target.ipv4) make_roce_rule(storage[count++], false, target.queues);
  if (target.ipv6) make_roce_rule(storage[count++], true, target.queues);
  if (isolated_ && target.ipv4) make_arp_rule(storage[count++]);
  if (isolated_ && target.ipv6) make_icmpv6_rule(storage[count++]);

  std::string refusal;
  bool no_flow_api = false;
  for (std::size_t i = 0; i < count && refusal.empty(); ++i) {
    Rule& rule = storage[i];
    rte_flow_attr attr{};
    attr.ingress = 1;
    rte_flow_error error{};
    if (const int rc = rte_flow_validate(target.port_id, &attr, rule.pattern.data(), rule.actions.data(), &error);
        rc != 0) {
      refusal = "rte_flow_validate refused " + rule.what + ": " + flow_error_text(error, rc);
      no_flow_api = rc == -ENOSYS;
      break;
    }
    rte_flow* flow = rte_flow_create(target.port_id, &attr, rule.pattern.data(), rule.actions.data(), &error);
    if (flow == nullptr) {
      refusal = "rte_flow_create failed for " + rule.what + ": " + flow_error_text(error, -rte_errno);
      break;
    }
    rules_.push_back(flow);
  }
  if (refusal.empty()) return isolated_ ? SteeringMode::kRteFlowIsolated : SteeringMode::kRteFlow;

  remove(target.port_id);
  if (steering == config::Steering::kRteFlow) {
    return Status::error(target.label + ": steering is rte_flow but the PMD refuses it: " + refusal +
                         " (use steering: auto or rss to run with RSS and the redirect rings)");
  }
  if (Status s = leave_isolation(target); !s.ok()) return s;
  // A PMD with no flow API at all (the vdevs: -ENOSYS) is the normal case there, not worth a warning per start.
  const uint32_t level = no_flow_api ? RTE_LOG_INFO : RTE_LOG_WARNING;
  rte_log(level, RTE_LOGTYPE_USER1,
          "uroce: %s: rte_flow steering unavailable (%s); falling back to RSS with the redirect rings\n",
          target.label.c_str(), refusal.c_str());
  return SteeringMode::kRss;
}

void PortSteering::remove(uint16_t port_id) noexcept {
  for (rte_flow* flow : rules_) {
    rte_flow_error error{};
    (void)rte_flow_destroy(port_id, flow, &error);
  }
  rules_.clear();
}

}  // namespace uroce::dataplane
