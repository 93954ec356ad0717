#include "apps/common/tool_setup.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <arpa/inet.h>
#include <netinet/in.h>

namespace uroce::apps {

namespace {

// A shortcut option and the key it sets, relative to the chosen port or from the root.
struct Shortcut {
  std::string_view option;
  std::string_view key;
  bool on_port;
  bool as_list;  // the value becomes a one-element list ([ADDR])
};

constexpr Shortcut kShortcuts[] = {
    {"--device", "device", true, false},
    {"--ip", "addresses", true, true},
    {"--mac", "mac", true, false},
    {"--lcores", "eal.lcores", false, false},
    {"--capture", "capture.pcapng_path", false, false},
};

// `value` as one YAML double-quoted scalar: a shortcut's value is a string whatever it holds ('#', ': ', '[').
std::string yaml_quoted(std::string_view value) {
  std::string out = "\"";
  for (const char c : value) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out += '"';
}

}  // namespace

const char* const kConfigOptionsHelp =
    "configuration (any tool; overrides go through the same checks as the YAML file):\n"
    "      --config FILE      YAML configuration (config/README.md); default: the embedded one\n"
    "      --port NAME        the configured port to use (default: the first)\n"
    "      --device DEVARGS   the port's DPDK device, e.g. net_af_packet0,iface=uroce0\n"
    "      --ip ADDR[/LEN]    the port's address; uroce answers ARP/ND for it\n"
    "      --mac MAC          the port's MAC address\n"
    "      --lcores LIST      the engines' CPUs, e.g. 0 or 0-1, or auto\n"
    "      --capture FILE     write every packet sent and received to a pcapng file\n"
    "      --set KEY=VALUE    any configuration key, e.g. --set rdma.ack_timeout=16 (repeatable)\n";

std::optional<ConfigOptions> take_config_options(int& argc, char** argv, const char* tool) {
  ConfigOptions options;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") {  // the rest belongs to the tool
      while (i < argc) argv[kept++] = argv[i++];
      break;
    }
    std::string_view name = arg, value;
    bool inline_value = false;
    if (const std::size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      inline_value = true;
    }
    const Shortcut* shortcut = nullptr;
    for (const Shortcut& s : kShortcuts) {
      if (name == s.option) shortcut = &s;
    }
    const bool ours = shortcut != nullptr || name == "--config" || name == "--port" || name == "--set";
    if (!ours) {
      argv[kept++] = argv[i];
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s: %.*s needs a value\n", tool, static_cast<int>(name.size()), name.data());
        return std::nullopt;
      }
      value = argv[++i];
    }
    if (name == "--config") {
      if (value.empty()) {  // e.g. an unset variable: never the embedded default in its place
        std::fprintf(stderr, "%s: --config needs a file name, got an empty one\n", tool);
        return std::nullopt;
      }
      options.path = value;
    } else if (name == "--port") {
      options.port = value;
    } else if (name == "--set") {
      const std::size_t eq = value.find('=');
      if (eq == std::string_view::npos || eq == 0) {
        std::fprintf(stderr, "%s: --set needs KEY=VALUE (e.g. rdma.path_mtu=1024), got '%.*s'\n", tool,
                     static_cast<int>(value.size()), value.data());
        return std::nullopt;
      }
      options.settings.push_back({false, {std::string(value.substr(0, eq)), std::string(value.substr(eq + 1))}});
    } else {
      std::string text = yaml_quoted(value);
      if (shortcut->as_list) text = std::string("[").append(text).append("]");  // append: GCC 12's -Wrestrict
      options.settings.push_back({shortcut->on_port, {std::string(shortcut->key), std::move(text)}});
    }
  }
  argv[kept] = nullptr;
  argc = kept;
  return options;
}

std::optional<ToolConfig> load_tool_config(const ConfigOptions& options, bool one_port, const char* tool,
                                           const std::vector<std::string>& application_sections) {
  const std::string source = options.path.empty() ? "<embedded default>" : options.path;
  // The port is named in the keys, so the overrides apply to it wherever it sits in the list.
  const std::string port_key = options.port.empty() ? "ports[0]" : "ports[" + options.port + "]";
  config::LoadOptions load;
  for (const ConfigOptions::Setting& s : options.settings) {
    load.overrides.push_back({s.on_port ? port_key + "." + s.override.key : s.override.key, s.override.value});
  }
  if (one_port) load.only_port = options.port.empty() ? "0" : options.port;
  load.machine = config::Machine::this_machine();  // eal.lcores that do not exist here are config errors
  load.application_sections = application_sections;
  const config::LoadResult loaded = options.path.empty() ? config::load_config(config::embedded_default_yaml(), load)
                                                         : config::load_config_file(options.path, load);
  if (!loaded.config) {
    std::fprintf(stderr, "%s: the configuration is not valid:\n%s", tool, loaded.describe(source).c_str());
    const bool half_ring = std::any_of(loaded.errors.begin(), loaded.errors.end(), [](const config::ConfigError& e) {
      return e.message.find("ring link") != std::string::npos;
    });
    if (one_port && half_ring) {
      std::fprintf(stderr,
                   "%s: an in-process ring link needs both its ends in one process; to reach a peer, give the port "
                   "a real device (--device net_af_packet0,iface=IF, net_memif0,..., a PCI address) or --config\n",
                   tool);
    }
    return std::nullopt;
  }
  ToolConfig out{*loaded.config, 0};
  if (!one_port && !options.port.empty()) {
    for (std::size_t i = 0; i < out.config.ports.size(); ++i) {
      if (out.config.ports[i].name == options.port) out.port = i;
    }
  }
  if (out.config.ports[out.port].addresses.empty()) {
    std::fprintf(stderr, "%s: port '%s' has no address: give it one with --ip or in the configuration\n", tool,
                 out.config.ports[out.port].name.c_str());
    return std::nullopt;
  }
  return out;
}

std::optional<uint64_t> parse_number(const char* tool, std::string_view option, const char* text, uint64_t min,
                                     uint64_t max) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 0);
  if (end == text || *end != '\0' || errno != 0 || text[0] == '-' || v < min || v > max) {
    std::fprintf(stderr, "%s: %.*s: '%s' is not a number from %llu to %llu\n", tool, static_cast<int>(option.size()),
                 option.data(), text, static_cast<unsigned long long>(min), static_cast<unsigned long long>(max));
    return std::nullopt;
  }
  return v;
}

std::string ip_text(const config::IpAddress& ip) {
  char buffer[INET6_ADDRSTRLEN] = {};
  inet_ntop(ip.is_v6 ? AF_INET6 : AF_INET, ip.bytes.data(), buffer, sizeof buffer);
  return buffer;
}

sockaddr_storage to_sockaddr(const config::IpAddress& ip) {
  sockaddr_storage s{};
  if (ip.is_v6) {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&s);
    v6->sin6_family = AF_INET6;
    std::memcpy(&v6->sin6_addr, ip.bytes.data(), 16);
  } else {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&s);
    v4->sin_family = AF_INET;
    std::memcpy(&v4->sin_addr, ip.bytes.data(), 4);
  }
  return s;
}

std::array<uint8_t, 16> gid_of(const config::IpAddress& ip) {
  std::array<uint8_t, 16> gid{};
  if (ip.is_v6) {
    std::memcpy(gid.data(), ip.bytes.data(), 16);
  } else {
    gid[10] = gid[11] = 0xFF;
    std::memcpy(gid.data() + 12, ip.bytes.data(), 4);
  }
  return gid;
}

sockaddr_storage sockaddr_of_gid(const std::array<uint8_t, 16>& gid) {
  static constexpr uint8_t kV4Mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  config::IpAddress ip;
  ip.is_v6 = std::memcmp(gid.data(), kV4Mapped, sizeof kV4Mapped) != 0;
  if (ip.is_v6) {
    std::memcpy(ip.bytes.data(), gid.data(), 16);
  } else {
    std::memcpy(ip.bytes.data(), gid.data() + 12, 4);
  }
  return to_sockaddr(ip);
}

}  // namespace uroce::apps
