// The `ports` section: each port's name, device, MAC, addresses, MTU and ring sizes, and the rules that span
// ports (unique names, ring links with exactly two ends, no address twice).
#include <cctype>
#include <charconv>
#include <map>
#include <system_error>

#include <arpa/inet.h>

#include "config/sections.h"
#include "config/yaml_reader.h"

namespace uroce::config::detail {

namespace {

bool is_hex(std::string_view s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
}

// [dddd:]bb:dd.f, the forms DPDK's PCI bus accepts.
bool is_pci_address(std::string_view s) {
  if (s.size() == 12) {
    if (!is_hex(s.substr(0, 4)) || s[4] != ':') return false;
    s.remove_prefix(5);
  }
  return s.size() == 7 && is_hex(s.substr(0, 2)) && s[2] == ':' && is_hex(s.substr(3, 2)) && s[5] == '.' &&
         s[6] >= '0' && s[6] <= '7';
}

bool is_name(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

bool is_device(std::string_view device) {
  if (device.starts_with(kRingPrefix)) return is_name(device.substr(kRingPrefix.size()));
  const std::string_view name = device.substr(0, device.find(','));  // devargs follow the first comma
  if (name.starts_with("net_")) return name.size() > 4 && is_name(name);
  return is_pci_address(name);
}

std::optional<MacAddress> parse_mac(std::string_view text) {
  MacAddress mac{};
  if (text.size() != 17) return std::nullopt;
  for (std::size_t i = 0; i < mac.size(); ++i) {
    const std::string_view octet = text.substr(i * 3, 2);
    if (!is_hex(octet) || (i < 5 && text[i * 3 + 2] != ':')) return std::nullopt;
    std::from_chars(octet.data(), octet.data() + 2, mac[i], 16);
  }
  return mac;
}

std::optional<IpAddress> parse_ip(std::string_view text) {
  IpAddress ip;
  const std::size_t slash = text.find('/');
  const std::string address(text.substr(0, slash));
  if (inet_pton(AF_INET, address.c_str(), ip.bytes.data()) == 1) {
    ip.is_v6 = false;
    ip.prefix_length = 32;
  } else if (inet_pton(AF_INET6, address.c_str(), ip.bytes.data()) == 1) {
    ip.is_v6 = true;
    ip.prefix_length = 128;
  } else {
    return std::nullopt;
  }
  if (slash != std::string_view::npos) {
    const std::string_view prefix = text.substr(slash + 1);
    unsigned length = 0;
    const auto [end, ec] = std::from_chars(prefix.data(), prefix.data() + prefix.size(), length);
    if (prefix.empty() || ec != std::errc() || end != prefix.data() + prefix.size() || length > ip.prefix_length) {
      return std::nullopt;
    }
    ip.prefix_length = static_cast<uint8_t>(length);
  }
  return ip;
}

constexpr std::array<std::pair<std::string_view, Steering>, 3> kSteeringNames = {
    {{"auto", Steering::kAuto}, {"rte_flow", Steering::kRteFlow}, {"rss", Steering::kRss}}};

constexpr std::array<Field<PortConfig>, 8> kPortFields = {{
    {"name",
     [](Reader& r, const YAML::Node& node, const std::string& key, PortConfig& out) {
       auto v = r.text(node, key);
       if (!v) return;
       // --port NAME and --set ports[NAME].key select a port by this name, and an integer selects by index.
       if (parse_integer(*v) || v->find_first_of(".[] \t") != std::string::npos) {
         r.error(key,
                 "must be a name that is not a number, without '.', '[', ']' or spaces (it selects the port in "
                 "--port and --set), got '" +
                     *v + "'");
         return;
       }
       out.name = std::move(*v);
     }},
    {"device",
     [](Reader& r, const YAML::Node& node, const std::string& key, PortConfig& out) {
       auto v = r.text(node, key);
       if (!v) return;
       if (!is_device(*v)) {
         r.error(key,
                 "must be a DPDK vdev 'net_<driver><n>[,args]', a PCI address like 0000:3b:00.0 or 3b:00.0, "
                 "or 'ring:<link>', got '" +
                     *v + "'");
         return;
       }
       out.device = std::move(*v);
     }},
    {"mac",
     [](Reader& r, const YAML::Node& node, const std::string& key, PortConfig& out) {
       if (node.IsNull()) return;  // the device's own MAC
       const auto mac = node.IsScalar() ? parse_mac(node.Scalar()) : std::nullopt;
       if (!mac) {
         r.error(key, "must be a MAC address like 02:00:00:00:00:01, got " + describe_node(node));
       } else if (((*mac)[0] & 1) != 0 || *mac == MacAddress{}) {
         r.error(key, "must be a unicast MAC address (first octet even, not all zero), got " + describe_node(node));
       } else {
         out.mac = mac;
       }
     }},
    {"addresses",
     [](Reader& r, const YAML::Node& node, const std::string& key, PortConfig& out) {
       if (!r.list(node, key, "IP addresses like 198.18.0.1/24 or fd00::1/64")) return;
       for (std::size_t i = 0; i < node.size(); ++i) {
         const auto ip = node[i].IsScalar() ? parse_ip(node[i].Scalar()) : std::nullopt;
         if (!ip) {
           r.error(index_key(key, i),
                   "must be an IPv4 or IPv6 address with an optional prefix length (at most 32 or 128), like "
                   "198.18.0.1/24 or fd00::1/64, got " +
                       describe_node(node[i]));
           continue;
         }
         out.addresses.push_back(*ip);
       }
     }},
    {"mtu", integer<&PortConfig::mtu, 576, 9216>()},
    {"rx_descriptors", integer<&PortConfig::rx_descriptors, 64, 32768>()},
    {"tx_descriptors", integer<&PortConfig::tx_descriptors, 64, 32768>()},
    {"steering",
     [](Reader& r, const YAML::Node& node, const std::string& key, PortConfig& out) {
       if (const auto v = r.choice(node, key, kSteeringNames)) out.steering = *v;
     }},
}};

}  // namespace

std::string format_ip(const IpAddress& ip) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(ip.is_v6 ? AF_INET6 : AF_INET, ip.bytes.data(), text, sizeof(text));
  return text;
}

void read_ports(Reader& r, const YAML::Node& node, const std::string& key, Config& out) {
  if (!r.list(node, key, "ports")) return;
  for (std::size_t i = 0; i < node.size(); ++i) {
    const std::string port_key = index_key(key, i);
    PortConfig port;
    read_map(r, node[i], port_key, kPortFields, port);
    if (node[i].IsMap()) {
      for (const std::string_view required : {"name", "device"}) {
        if (!node[i][std::string(required)]) r.error(join_key(port_key, required), "is required");
      }
    }
    out.ports.push_back(std::move(port));
  }
}

void check_ports(Reader& r, const Config& config) {
  if (config.ports.empty()) {
    if (r.ok("ports") && r.ok(std::string(kDocumentKey))) r.error("ports", "at least one port is required, got none");
    return;
  }
  std::map<std::string, std::size_t> names;
  std::map<std::string, std::vector<std::size_t>> ring_links;
  std::vector<std::pair<IpAddress, std::string>> addresses;  // with the key that first claimed each
  for (std::size_t i = 0; i < config.ports.size(); ++i) {
    const PortConfig& port = config.ports[i];
    const std::string key = index_key("ports", i);
    if (r.ok(key + ".name") && r.ok(key)) {
      if (port.name.empty()) {
        r.error(key + ".name", "must not be empty, got ''");
      } else if (const auto [it, fresh] = names.emplace(port.name, i); !fresh) {
        r.error(key + ".name", "'" + port.name + "' is already used by " + index_key("ports", it->second));
      }
    }
    if (port.device.starts_with(kRingPrefix)) {
      ring_links[port.device.substr(kRingPrefix.size())].push_back(i);
      // net_ring has no rte_flow (-ENOSYS); the engines' queues are the link's rings, so there is nothing to steer.
      if (port.steering == Steering::kRteFlow && r.ok(key + ".steering")) {
        r.error(key + ".steering",
                "must be auto or rss on a ring link ('" + port.device + "'): net_ring has no rte_flow, got 'rte_flow'");
      }
    }
    if (port.addresses.empty() && r.ok_under(key + ".addresses") && r.ok(key)) {
      r.error(key + ".addresses", "must list at least one IP address (RoCEv2 runs over UDP/IP), got none");
    }
    for (std::size_t j = 0; j < port.addresses.size(); ++j) {
      const IpAddress& ip = port.addresses[j];
      const std::string address_key = index_key(key + ".addresses", j);
      const auto same = std::find_if(addresses.begin(), addresses.end(), [&](const auto& seen) {
        return seen.first.is_v6 == ip.is_v6 && seen.first.bytes == ip.bytes;
      });
      if (same != addresses.end()) {
        r.error(address_key, format_ip(ip) + " is already used by " + same->second);
      } else {
        addresses.emplace_back(ip, address_key);
      }
    }
  }
  for (const auto& [link, users] : ring_links) {
    if (users.size() == 2) continue;
    std::string message = "ring link '" + link + "' must be named by exactly two ports (its two ends), got ";
    message.append(std::to_string(users.size())).append(" (");
    for (const std::size_t i : users) message.append(i == users.front() ? "" : ", ").append(index_key("ports", i));
    r.error(index_key("ports", users.front()) + ".device", message + ")");
  }
}

}  // namespace uroce::config::detail
