// The sections of the configuration that live in their own files, and the steps of load_config() they provide.
// Internal to config/ (config.cc is the only caller).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "config/config.h"
#include "config/yaml_reader.h"

namespace uroce::config::detail {

// rxe's rule (rxe_set_mtu): the Ethernet MTU must hold the PMTU plus the largest header stack it reserves.
constexpr unsigned kRoceHeaderAllowance = 80;
constexpr std::string_view kRingPrefix = "ring:";  // ports[i].device naming one end of an in-process ring link

// eal_section.cc
void read_eal_section(Reader& r, const YAML::Node& node, const std::string& key, Config& out);
// "0-3,8" (DPDK's -l syntax without the @ and () forms, and the kernel's CPU list format) as inclusive ranges.
// Nothing if the text isn't of that shape.
[[nodiscard]] std::optional<std::vector<std::pair<uint64_t, uint64_t>>> parse_cpu_ranges(std::string_view text);
// The config's engine lcores against the CPUs the machine has and this process may use.
void check_machine(Reader& r, const Config& config, const Machine& machine);

// port_section.cc
void read_ports(Reader& r, const YAML::Node& node, const std::string& key, Config& out);
// Names, ring links and addresses across ports.
void check_ports(Reader& r, const Config& config);
[[nodiscard]] std::string format_ip(const IpAddress& ip);

// congestion_section.cc
void read_congestion_section(Reader& r, const YAML::Node& node, const std::string& key, Config& out);
// The reaction point's rates against each other.
void check_congestion(Reader& r, const Config& config);

// overrides.cc: each returns an error message, or nothing when it applied.
// Walks `o.key` from the root, adding missing map keys, and sets the node it names to `o.value` (YAML text).
[[nodiscard]] std::optional<std::string> apply_override(const YAML::Node& root, const Override& o);
// Keeps the one port `selector` names (an index or a name).
[[nodiscard]] std::optional<std::string> keep_only_port(YAML::Node root, const std::string& selector);

}  // namespace uroce::config::detail
