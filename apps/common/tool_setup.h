// What every uroce tool sets up the same way: its configuration (the YAML file or the embedded default, with
// command-line overrides) and the addresses it announces to a peer.
//
// The configuration options are taken out of argv before the tool parses its own, so a tool keeps its own
// option parser (perftest's or ibv_rc_pingpong's option names) and every tool spells these alike:
//   --config FILE        the YAML configuration (config/README.md); default: the embedded one
//   --port NAME          which configured port the tool drives; default: the first
//   --device DEVARGS     the port's DPDK device, e.g. net_af_packet0,iface=uroce0
//   --ip ADDR[/LEN]      the port's address (uroce answers ARP/ND for it); replaces the configured ones
//   --mac MAC            the port's MAC address
//   --lcores LIST        the engines' CPUs, e.g. 0 or 0-1, or auto
//   --capture FILE       write every packet the engines send and receive to a pcapng file
//   --set KEY=VALUE      any configuration key, e.g. --set rdma.ack_timeout=16 (repeatable)
// The overrides go through the same validation as the file, so a bad value names its key.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <sys/socket.h>

#include "config/config.h"

namespace uroce::apps {

struct ConfigOptions {
  std::string path;  // empty: the embedded default
  std::string port;  // empty: the first configured port
  struct Setting {
    bool on_port = false;  // the key is relative to the chosen port ("device"), else from the root ("rdma.path_mtu")
    config::Override override;
  };
  std::vector<Setting> settings;  // in command-line order
};

// Removes the options above (and their values) from argv, shifting the rest down and updating argc.
// On a missing or malformed value, prints "<tool>: ..." to stderr and returns nothing.
[[nodiscard]] std::optional<ConfigOptions> take_config_options(int& argc, char** argv, const char* tool);

// The --help lines for those options.
extern const char* const kConfigOptionsHelp;

struct ToolConfig {
  config::Config config;
  std::size_t port = 0;  // index of the chosen port in config.ports
};

// Loads the configuration with the overrides applied and validated. one_port: keep only the chosen port (a
// tool that talks to a remote peer drives one port; the default's second ring end would only be in the way).
// Prints every error, naming the source, and returns nothing on failure.
// application_sections: top-level keys the tool reads itself from the same file (config::LoadOptions).
[[nodiscard]] std::optional<ToolConfig> load_tool_config(const ConfigOptions& options, bool one_port, const char* tool,
                                                         const std::vector<std::string>& application_sections = {});

// A command-line number, decimal or 0x, in [min, max]; otherwise prints "<tool>: <option>: '<text>' is not a
// number from min to max" and returns nothing.
[[nodiscard]] std::optional<uint64_t> parse_number(const char* tool, std::string_view option, const char* text,
                                                   uint64_t min, uint64_t max);

// The port's first address as a socket address (port number 0), for UroceConnectAttributes.
[[nodiscard]] sockaddr_storage to_sockaddr(const config::IpAddress& ip);
// The address as text: "198.18.0.1", "fd00::1".
[[nodiscard]] std::string ip_text(const config::IpAddress& ip);

// The RoCEv2 GID of an address: IPv6 as is, IPv4 mapped (::ffff:a.b.c.d), rocev2.md §1.5.
[[nodiscard]] std::array<uint8_t, 16> gid_of(const config::IpAddress& ip);

// A GID read back as an address: IPv4-mapped GIDs become IPv4.
[[nodiscard]] sockaddr_storage sockaddr_of_gid(const std::array<uint8_t, 16>& gid);

}  // namespace uroce::apps
