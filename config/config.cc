// YAML -> Config in two passes. The first walks the document with one table of fields per map, so every scalar
// key is parsed, range-checked and assigned in one place and unknown keys fall out of the table lookup. The
// second checks the rules that span keys (PMTU vs port MTU, pool sizes, ring links, duplicate addresses).
// Errors are collected, never thrown: an operator fixing a config wants every problem in one run.
#include "config/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <limits>
#include <map>
#include <new>
#include <set>
#include <system_error>
#include <type_traits>
#include <utility>

#include <arpa/inet.h>
#include <yaml-cpp/yaml.h>

namespace uroce::config {

extern const std::string_view kEmbeddedDefaultYaml;  // generated from default.yaml (default_yaml.cc.in)

namespace {

// rxe's rule (rxe_set_mtu): the Ethernet MTU must hold the PMTU plus the largest header stack it reserves.
constexpr unsigned kRoceHeaderAllowance = 80;
// An mbuf holds headroom + Ethernet header + one VLAN tag + the IP packet (the port MTU).
constexpr unsigned kMbufHeadroom = 128;  // RTE_PKTMBUF_HEADROOM
constexpr unsigned kFrameOverhead = 14 + 4;
constexpr unsigned kMaxLcores = 128;  // RTE_MAX_LCORE in Debian's DPDK build: EAL rejects larger lcore ids
constexpr unsigned kMaxSuggestionDistance = 2;
constexpr std::string_view kDocumentKey = "<document>";  // errors about the document as a whole

std::string join_key(const std::string& parent, std::string_view name) {
  return parent.empty() ? std::string(name) : parent + "." + std::string(name);
}

std::string index_key(const std::string& parent, std::size_t i) { return parent + "[" + std::to_string(i) + "]"; }

// What the user wrote, for "got ..." in messages.
std::string describe_node(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  return "'" + node.Scalar() + "'";
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      const bool same =
          std::tolower(static_cast<unsigned char>(a[i - 1])) == std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

struct ParsedInteger {
  bool negative = false;
  bool overflow = false;  // magnitude does not fit 64 bits
  uint64_t magnitude = 0;
};

// A YAML integer: optional sign, then decimal digits or 0x hex digits.
std::optional<ParsedInteger> parse_integer(std::string_view text) {
  ParsedInteger out;
  if (!text.empty() && (text.front() == '-' || text.front() == '+')) {
    out.negative = text.front() == '-';
    text.remove_prefix(1);
  }
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    base = 16;
    text.remove_prefix(2);
  }
  if (text.empty()) return std::nullopt;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out.magnitude, base);
  if (end != text.data() + text.size()) {
    // from_chars stops at the end of the digits even on overflow, so trailing junk is always "not a number".
    return std::nullopt;
  }
  if (ec == std::errc::result_out_of_range) {
    out.overflow = true;
  } else if (ec != std::errc()) {
    return std::nullopt;
  }
  return out;
}

// Collects errors and remembers which keys failed, so the cross-key rules can skip values that are only defaults
// standing in for something the user got wrong (and would otherwise produce a second, misleading error).
class Reader {
 public:
  void error(const std::string& key, std::string message) {
    failed_.insert(key);
    errors_.push_back({key, std::move(message)});
  }
  [[nodiscard]] bool ok(const std::string& key) const { return !failed_.contains(key); }
  // No error at key or anywhere inside it (key.x, key[i]).
  [[nodiscard]] bool ok_under(const std::string& key) const {
    for (auto it = failed_.lower_bound(key); it != failed_.end() && it->starts_with(key); ++it) {
      if (it->size() == key.size() || (*it)[key.size()] == '.' || (*it)[key.size()] == '[') return false;
    }
    return true;
  }
  [[nodiscard]] std::vector<ConfigError> take_errors() { return std::move(errors_); }

  // Cross-key rules report a value the user may never have written; say so when it is the default.
  void mark_given(const std::string& key) { given_.insert(key); }
  [[nodiscard]] std::string seen(const std::string& key, uint64_t value) const {
    return std::to_string(value) + (given_.contains(key) ? "" : " (the default)");
  }
  [[nodiscard]] bool has_errors() const { return !errors_.empty(); }

  std::optional<uint64_t> integer(const YAML::Node& node, const std::string& key, uint64_t min, uint64_t max) {
    const auto parsed = node.IsScalar() ? parse_integer(node.Scalar()) : std::nullopt;
    if (!parsed) {
      error(key, "must be an integer, got " + describe_node(node));
      return std::nullopt;
    }
    const bool below = parsed->negative && parsed->magnitude != 0;
    if (below || parsed->overflow || parsed->magnitude < min || parsed->magnitude > max) {
      error(key, "must be between " + std::to_string(min) + " and " + std::to_string(max) + ", got " + node.Scalar());
      return std::nullopt;
    }
    return parsed->magnitude;
  }

  std::optional<double> probability(const YAML::Node& node, const std::string& key) {
    double value = 0;
    bool parsed = false;
    if (node.IsScalar()) {
      std::string_view text = node.Scalar();
      if (!text.empty() && text.front() == '+') text.remove_prefix(1);
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      parsed = !text.empty() && ec == std::errc() && end == text.data() + text.size();
    }
    if (!parsed) {
      error(key, "must be a number, got " + describe_node(node));
      return std::nullopt;
    }
    if (!(value >= 0 && value <= 1)) {  // written so that NaN fails too
      error(key, "must be between 0 and 1, got " + node.Scalar());
      return std::nullopt;
    }
    return value;
  }

  std::optional<std::string> text(const YAML::Node& node, const std::string& key) {
    if (!node.IsScalar()) {
      error(key, "must be a string, got " + describe_node(node));
      return std::nullopt;
    }
    return node.Scalar();
  }

  template <class E, std::size_t N>
  std::optional<E> choice(const YAML::Node& node, const std::string& key,
                          const std::array<std::pair<std::string_view, E>, N>& choices) {
    if (node.IsScalar()) {
      for (const auto& [name, value] : choices) {
        if (node.Scalar() == name) return value;
      }
    }
    std::string names;
    for (const auto& [name, value] : choices) names.append(names.empty() ? "" : ", ").append(name);
    error(key, "must be one of " + names + ", got " + describe_node(node));
    return std::nullopt;
  }

  // A list of anything; null (a key with nothing after it) is an empty list.
  bool list(const YAML::Node& node, const std::string& key, std::string_view what) {
    if (node.IsSequence() || node.IsNull()) return true;
    error(key, "must be a list of " + std::string(what) + ", got " + describe_node(node));
    return false;
  }

 private:
  std::vector<ConfigError> errors_;
  std::set<std::string> failed_;
  std::set<std::string> given_;
};

// ---- Field tables -----------------------------------------------------------------------------------------------

template <class S>
struct Field {
  std::string_view name;
  void (*read)(Reader&, const YAML::Node&, const std::string& key, S&);
};

template <class M>
struct MemberTraits;
template <class S, class T>
struct MemberTraits<T S::*> {
  using Struct = S;
  using Type = T;
};

// An unsigned integer member with an inclusive range. The range is checked against the member's type at compile
// time, so no value can be silently truncated into a narrower field.
template <auto kMember, uint64_t kMin, uint64_t kMax>
constexpr auto integer() {
  using S = typename MemberTraits<decltype(kMember)>::Struct;
  using T = typename MemberTraits<decltype(kMember)>::Type;
  static_assert(std::is_unsigned_v<T> && kMin <= kMax && kMax <= std::numeric_limits<T>::max());
  return +[](Reader& r, const YAML::Node& node, const std::string& key, S& out) {
    if (const auto v = r.integer(node, key, kMin, kMax)) out.*kMember = static_cast<T>(*v);
  };
}

template <auto kMember>
constexpr auto probability() {
  using S = typename MemberTraits<decltype(kMember)>::Struct;
  return +[](Reader& r, const YAML::Node& node, const std::string& key, S& out) {
    if (const auto v = r.probability(node, key)) out.*kMember = *v;
  };
}

template <auto kMember>
constexpr auto text() {
  using S = typename MemberTraits<decltype(kMember)>::Struct;
  return +[](Reader& r, const YAML::Node& node, const std::string& key, S& out) {
    if (auto v = r.text(node, key)) out.*kMember = std::move(*v);
  };
}

// Reads a map through its field table. Null (a section with every key commented out) keeps all defaults.
template <class S, std::size_t N>
void read_map(Reader& r, const YAML::Node& node, const std::string& key, const std::array<Field<S>, N>& fields,
              S& out) {
  if (node.IsNull()) return;
  if (!node.IsMap()) {
    r.error(key.empty() ? std::string(kDocumentKey) : key, "must be a map of keys, got " + describe_node(node));
    return;
  }
  std::set<std::string> seen;
  for (const auto& entry : node) {
    if (!entry.first.IsScalar()) {
      r.error(key.empty() ? std::string(kDocumentKey) : key,
              "keys must be plain names, got " + describe_node(entry.first));
      continue;
    }
    const std::string& name = entry.first.Scalar();
    const std::string child = join_key(key, name);
    if (!seen.insert(name).second) {
      r.error(child, "duplicate key '" + name + "'");
      continue;
    }
    const auto field = std::find_if(fields.begin(), fields.end(), [&](const Field<S>& f) { return f.name == name; });
    if (field != fields.end()) {
      r.mark_given(child);
      field->read(r, entry.second, child, out);
      continue;
    }
    std::string message = "unknown key '" + name + "'";
    std::string_view best;
    std::size_t best_distance = kMaxSuggestionDistance + 1;
    for (const auto& f : fields) {
      const std::size_t d = edit_distance(name, f.name);
      if (d < best_distance) best = f.name, best_distance = d;
    }
    if (!best.empty()) message += "; did you mean '" + std::string(best) + "'?";
    r.error(child, std::move(message));
  }
}

// ---- eal ----------------------------------------------------------------------------------------------------------

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// "0-3,8" (DPDK's -l syntax without the @ and () forms) as inclusive ranges. Nothing if the text isn't of that shape.
std::optional<std::vector<std::pair<uint64_t, uint64_t>>> parse_lcore_ranges(std::string_view text) {
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  while (true) {
    const std::size_t comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    const std::size_t dash = item.find('-');
    const auto first = parse_integer(trim(item.substr(0, dash)));
    const auto last = dash == std::string_view::npos ? first : parse_integer(trim(item.substr(dash + 1)));
    if (!first || !last || first->negative || last->negative) return std::nullopt;
    // An overflowing id is simply too large; the caller's range check reports it.
    const uint64_t from = first->overflow ? std::numeric_limits<uint64_t>::max() : first->magnitude;
    const uint64_t to = last->overflow ? std::numeric_limits<uint64_t>::max() : last->magnitude;
    if (from > to) return std::nullopt;
    ranges.emplace_back(from, to);
    if (comma == std::string_view::npos) return ranges;
    text.remove_prefix(comma + 1);
  }
}

void read_lcores(Reader& r, const YAML::Node& node, const std::string& key, EalConfig& out) {
  std::vector<unsigned> lcores;
  std::set<unsigned> seen;
  if (node.IsScalar() && node.Scalar() == "auto") {
    out.lcores = auto_engine_lcores(process_allowed_cpus());
    return;
  }
  if (node.IsSequence()) {
    bool ok = true;
    for (std::size_t i = 0; i < node.size(); ++i) {
      const std::string element_key = index_key(key, i);
      const auto id = r.integer(node[i], element_key, 0, kMaxLcores - 1);
      if (!id) {
        ok = false;
      } else if (!seen.insert(static_cast<unsigned>(*id)).second) {
        r.error(element_key, "lcore " + std::to_string(*id) + " is listed twice");
        ok = false;
      } else {
        lcores.push_back(static_cast<unsigned>(*id));
      }
    }
    if (!ok) return;
  } else if (node.IsScalar()) {
    const auto ranges = parse_lcore_ranges(node.Scalar());
    if (!ranges) {
      r.error(key, "must be 'auto', a list of lcore ids or a string like '0-3,8', got " + describe_node(node));
      return;
    }
    for (const auto& [first, last] : *ranges) {
      if (last >= kMaxLcores) {  // checked before expanding, so "0-4000000000" allocates nothing
        r.error(key,
                "lcore ids must be between 0 and " + std::to_string(kMaxLcores - 1) + ", got " + describe_node(node));
        return;
      }
      for (uint64_t id = first; id <= last; ++id) {
        if (!seen.insert(static_cast<unsigned>(id)).second) {
          r.error(key, "lcore " + std::to_string(id) + " is listed twice, got " + describe_node(node));
          return;
        }
        lcores.push_back(static_cast<unsigned>(id));
      }
    }
  } else if (!node.IsNull()) {
    r.error(key, "must be 'auto', a list of lcore ids or a string like '0-3,8', got " + describe_node(node));
    return;
  }
  if (lcores.empty()) {
    r.error(key, "must name at least one lcore (one engine runs on each), got " +
                     (node.IsNull() ? std::string("nothing") : std::string("an empty list")));
    return;
  }
  if (lcores.size() > 16) {  // the QPN carries the engine in 4 bits (dataplane/qpn.h)
    r.error(key, "names " + std::to_string(lcores.size()) + " lcores; at most 16 engines are supported");
    return;
  }
  out.lcores = std::move(lcores);
}

constexpr std::array<std::pair<std::string_view, HugePages>, 3> kHugePagesNames = {
    {{"auto", HugePages::kAuto}, {"on", HugePages::kOn}, {"off", HugePages::kOff}}};

constexpr std::array<Field<EalConfig>, 5> kEalFields = {{
    {"lcores", read_lcores},
    {"hugepages",
     [](Reader& r, const YAML::Node& node, const std::string& key, EalConfig& out) {
       if (const auto v = r.choice(node, key, kHugePagesNames)) out.hugepages = *v;
     }},
    {"memory_mb", integer<&EalConfig::memory_mb, 64, 1 << 20>()},
    {"file_prefix",
     [](Reader& r, const YAML::Node& node, const std::string& key, EalConfig& out) {
       // It names a directory under /var/run/dpdk and is passed on a command line.
       auto v = r.text(node, key);
       if (!v) return;
       if (v->find_first_of("/ \t") != std::string::npos) {
         r.error(key, "must be a plain name (no '/' or spaces), got '" + *v + "'");
         return;
       }
       out.file_prefix = std::move(*v);
     }},
    {"extra_args",
     [](Reader& r, const YAML::Node& node, const std::string& key, EalConfig& out) {
       if (!r.list(node, key, "strings")) return;
       std::vector<std::string> args;
       for (std::size_t i = 0; i < node.size(); ++i) {
         if (auto v = r.text(node[i], index_key(key, i))) args.push_back(std::move(*v));
       }
       out.extra_args = std::move(args);
     }},
}};

// ---- ports --------------------------------------------------------------------------------------------------------

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

constexpr std::string_view kRingPrefix = "ring:";

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

std::string format_ip(const IpAddress& ip) {
  char text[INET6_ADDRSTRLEN] = {};
  inet_ntop(ip.is_v6 ? AF_INET6 : AF_INET, ip.bytes.data(), text, sizeof(text));
  return text;
}

constexpr std::array<Field<PortConfig>, 7> kPortFields = {{
    {"name", text<&PortConfig::name>()},
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
}};

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

// ---- engine, rdma, faults, capture ---------------------------------------------------------------------------------

constexpr std::array<std::pair<std::string_view, IdlePolicy>, 2> kIdleNames = {
    {{"busy_poll", IdlePolicy::kBusyPoll}, {"backoff", IdlePolicy::kBackoff}}};

constexpr std::array<Field<EngineConfig>, 9> kEngineFields = {{
    {"idle",
     [](Reader& r, const YAML::Node& node, const std::string& key, EngineConfig& out) {
       if (const auto v = r.choice(node, key, kIdleNames)) out.idle = *v;
     }},
    {"rx_burst", integer<&EngineConfig::rx_burst, 1, 64>()},  // the engines' fixed burst arrays hold 64
    {"tx_burst", integer<&EngineConfig::tx_burst, 1, 64>()},
    {"mbufs_per_engine", integer<&EngineConfig::mbufs_per_engine, 1, (1u << 31) - 1>()},
    {"mbuf_cache", integer<&EngineConfig::mbuf_cache, 0, 512>()},  // RTE_MEMPOOL_CACHE_MAX_SIZE
    {"mbuf_data_room", integer<&EngineConfig::mbuf_data_room, 0, 65535>()},
    {"redirect_ring_size",
     [](Reader& r, const YAML::Node& node, const std::string& key, EngineConfig& out) {
       const auto v = r.integer(node, key, 0, std::numeric_limits<uint32_t>::max());
       if (!v) return;
       if (*v < 64 || *v > (1u << 30) || (*v & (*v - 1)) != 0) {  // rte_ring's count is a power of two <= 2^30
         r.error(key, "must be a power of two between 64 and 1073741824, got " + node.Scalar());
         return;
       }
       out.redirect_ring_size = static_cast<uint32_t>(*v);
     }},
    // The QPN's low 20 bits are the QP's index in its engine (dataplane/qpn.h); index 0xFFFFF would make the
    // multicast QPN 0xFFFFFF, and indices 0 and 1 mirror QP0/QP1, so an engine needs room for at least 2.
    {"max_qps_per_engine", integer<&EngineConfig::max_qps_per_engine, 2, (1u << 20) - 1>()},
    {"tx_backlog", integer<&EngineConfig::tx_backlog, 1, 1u << 20>()},
}};

constexpr std::array<Field<RdmaConfig>, 9> kRdmaFields = {{
    {"path_mtu",
     [](Reader& r, const YAML::Node& node, const std::string& key, RdmaConfig& out) {
       const auto v = r.integer(node, key, 0, std::numeric_limits<uint64_t>::max());
       if (!v) return;
       if (*v != 256 && *v != 512 && *v != 1024 && *v != 2048 && *v != 4096) {
         r.error(key, "must be one of 256, 512, 1024, 2048, 4096 (an IB MTU), got " + node.Scalar());
         return;
       }
       out.path_mtu = static_cast<uint16_t>(*v);
     }},
    {"ack_timeout", integer<&RdmaConfig::ack_timeout, 0, 31>()},
    {"retry_count", integer<&RdmaConfig::retry_count, 0, 7>()},
    {"rnr_retry", integer<&RdmaConfig::rnr_retry, 0, 7>()},
    {"min_rnr_timer", integer<&RdmaConfig::min_rnr_timer, 0, 31>()},
    {"ack_request_interval", integer<&RdmaConfig::ack_request_interval, 1, 65535>()},
    {"max_rd_atomic", integer<&RdmaConfig::max_rd_atomic, 1, 255>()},
    {"max_dest_rd_atomic", integer<&RdmaConfig::max_dest_rd_atomic, 1, 255>()},
    {"udp_source_port_base", integer<&RdmaConfig::udp_source_port_base, 0xC000, 0xFFFF>()},
}};

constexpr std::array<Field<FaultConfig>, 5> kFaultFields = {{
    {"loss", probability<&FaultConfig::loss>()},
    {"reorder", probability<&FaultConfig::reorder>()},
    {"duplicate", probability<&FaultConfig::duplicate>()},
    {"corrupt", probability<&FaultConfig::corrupt>()},
    {"seed", integer<&FaultConfig::seed, 0, std::numeric_limits<uint64_t>::max()>()},
}};

constexpr std::array<Field<CaptureConfig>, 2> kCaptureFields = {{
    {"pcapng_path", text<&CaptureConfig::pcapng_path>()},
    {"snap_length", integer<&CaptureConfig::snap_length, 64, 262144>()},  // 64 keeps Eth+IP+UDP+BTH
}};

template <auto kMember, const auto& kFields>
constexpr auto section() {
  return +[](Reader& r, const YAML::Node& node, const std::string& key, Config& out) {
    read_map(r, node, key, kFields, out.*kMember);
  };
}

constexpr std::array<Field<Config>, 6> kTopFields = {{
    {"eal", section<&Config::eal, kEalFields>()},
    {"ports", read_ports},
    {"engine", section<&Config::engine, kEngineFields>()},
    {"rdma", section<&Config::rdma, kRdmaFields>()},
    {"faults", section<&Config::faults, kFaultFields>()},
    {"capture", section<&Config::capture, kCaptureFields>()},
}};

// ---- Rules that span keys -----------------------------------------------------------------------------------------

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
    if (port.device.starts_with(kRingPrefix)) ring_links[port.device.substr(kRingPrefix.size())].push_back(i);
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

void check_sizes(Reader& r, const Config& config) {
  const RdmaConfig& rdma = config.rdma;
  const EngineConfig& engine = config.engine;
  unsigned largest_mtu = 0;
  uint64_t descriptors = 0;
  bool descriptors_ok = true;
  for (std::size_t i = 0; i < config.ports.size(); ++i) {
    const PortConfig& port = config.ports[i];
    const std::string key = index_key("ports", i);
    descriptors += uint64_t{port.rx_descriptors} + port.tx_descriptors;
    descriptors_ok = descriptors_ok && r.ok(key + ".rx_descriptors") && r.ok(key + ".tx_descriptors");
    if (!r.ok(key + ".mtu")) continue;
    largest_mtu = std::max<unsigned>(largest_mtu, port.mtu);
    if (r.ok("rdma.path_mtu") && port.mtu < rdma.path_mtu + kRoceHeaderAllowance) {
      r.error(key + ".mtu", "must be at least rdma.path_mtu + " + std::to_string(kRoceHeaderAllowance) + " = " +
                                std::to_string(rdma.path_mtu + kRoceHeaderAllowance) +
                                " (rxe's rule: room for the RoCE headers around a full PMTU payload), got " +
                                r.seen(key + ".mtu", port.mtu));
    }
  }
  const unsigned needed_room = largest_mtu + kFrameOverhead + kMbufHeadroom;
  if (largest_mtu > 0 && r.ok("engine.mbuf_data_room") && engine.mbuf_data_room < needed_room) {
    r.error("engine.mbuf_data_room", "must be at least the largest port mtu + " +
                                         std::to_string(kFrameOverhead + kMbufHeadroom) +
                                         " (Ethernet + VLAN header + 128 headroom) = " + std::to_string(needed_room) +
                                         ", got " + r.seen("engine.mbuf_data_room", engine.mbuf_data_room));
  }
  // Each engine has an RX and a TX queue on every port; the rings alone can hold this many mbufs, and the
  // datapath needs as many again in flight.
  if (descriptors_ok && r.ok("engine.mbufs_per_engine") && engine.mbufs_per_engine < 2 * descriptors) {
    r.error("engine.mbufs_per_engine", "must be at least 2 x the descriptors of all ports (2 x " +
                                           std::to_string(descriptors) + " = " + std::to_string(2 * descriptors) +
                                           "), got " + r.seen("engine.mbufs_per_engine", engine.mbufs_per_engine));
  }
  // rte_mempool_create refuses a per-lcore cache larger than the pool / 1.5.
  if (r.ok("engine.mbufs_per_engine") && r.ok("engine.mbuf_cache") &&
      uint64_t{engine.mbuf_cache} * 3 > uint64_t{engine.mbufs_per_engine} * 2) {
    r.error("engine.mbuf_cache", "must be at most engine.mbufs_per_engine / 1.5 = " +
                                     std::to_string(uint64_t{engine.mbufs_per_engine} * 2 / 3) + ", got " +
                                     r.seen("engine.mbuf_cache", engine.mbuf_cache));
  }
}

void check_faults(Reader& r, const FaultConfig& faults) {
  for (const char* name : {"faults.loss", "faults.reorder", "faults.duplicate", "faults.corrupt"}) {
    if (!r.ok(name)) return;
  }
  const double sum = faults.loss + faults.reorder + faults.duplicate + faults.corrupt;
  if (sum > 1) {
    char text[32];
    std::snprintf(text, sizeof(text), "%g", sum);
    r.error("faults",
            std::string("loss + reorder + duplicate + corrupt must be at most 1 (one fault per packet), got ") + text);
  }
}

LoadResult finish(Reader& r, Config config) {
  LoadResult result;
  if (r.has_errors()) {
    result.errors = r.take_errors();
  } else {
    result.config = std::move(config);
  }
  return result;
}

LoadResult one_error(std::string key, std::string message) {
  LoadResult result;
  result.errors.push_back({std::move(key), std::move(message)});
  return result;
}

// The element of a list that a selector names: an index ("0"), or the value of its `name` key ("veth").
std::optional<std::size_t> find_element(const YAML::Node& list, const std::string& selector) {
  if (!list.IsSequence()) return std::nullopt;
  const std::optional<ParsedInteger> index = parse_integer(selector);
  for (std::size_t i = 0; i < list.size(); ++i) {
    const YAML::Node element = list[i];
    const bool match = index ? (!index->negative && index->magnitude == i)
                             : (element.IsMap() && element["name"] && element["name"].IsScalar() &&
                                element["name"].Scalar() == selector);
    if (match) return i;
  }
  return std::nullopt;
}

// Walks `key` from the root, adding missing map keys, and sets the node it names to `value` (YAML text).
// Returns an error message, or nothing when the override applied. A YAML::Node is a handle, so `root` is
// const and still edited: `node` starts as another handle on its document.
std::optional<std::string> apply_override(const YAML::Node& root, const Override& o) {
  std::string_view rest = o.key;
  YAML::Node node;
  node.reset(root);
  if (rest.empty()) return "is empty: give a key like rdma.path_mtu or ports[0].device";
  while (!rest.empty()) {
    const std::size_t end = rest.find_first_of(".[");
    const std::string_view name = rest.substr(0, end);
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end);
    if (name.empty()) return "has an empty name before '" + std::string(rest.substr(0, 1)) + "'";
    if (node.IsDefined() && !node.IsNull() && !node.IsMap()) {
      return "cannot take '" + std::string(name) + "': what holds it is " + describe_node(node) + ", not a map";
    }
    node.reset(node[std::string(name)]);
    while (!rest.empty() && rest.front() == '[') {
      const std::size_t close = rest.find(']');
      if (close == std::string_view::npos) return "has a '[' without its ']'";
      const std::string selector(rest.substr(1, close - 1));
      rest.remove_prefix(close + 1);
      if (!node.IsSequence()) return "'" + std::string(name) + "' is " + describe_node(node) + ", not a list";
      const std::optional<std::size_t> found = find_element(node, selector);
      if (!found) {
        return "'" + std::string(name) + "' has no element " + (parse_integer(selector) ? "" : "named ") + "'" +
               selector + "' (it has " + std::to_string(node.size()) + ")";
      }
      node.reset(node[*found]);
    }
    if (!rest.empty()) {
      if (rest.front() != '.') return "expected '.' or '[' at '" + std::string(rest) + "'";
      rest.remove_prefix(1);
      if (rest.empty()) return "ends with '.'";
    }
  }
  node = YAML::Load(o.value);
  return std::nullopt;
}

// Keeps the one port `selector` names (an index or a name).
std::optional<std::string> keep_only_port(YAML::Node root, const std::string& selector) {
  const std::optional<std::size_t> found = find_element(root["ports"], selector);
  if (!found) return "has no port " + std::string(parse_integer(selector) ? "" : "named ") + "'" + selector + "'";
  YAML::Node kept(YAML::NodeType::Sequence);
  kept.push_back(root["ports"][*found]);
  root["ports"] = kept;
  return std::nullopt;
}

}  // namespace

std::string LoadResult::describe(std::string_view source) const {
  std::string out;
  for (const ConfigError& e : errors) {
    out.append(source).append(": ").append(e.key).append(": ").append(e.message).append("\n");
  }
  return out;
}

LoadResult load_config(std::string_view yaml_text, const LoadOptions& options) {
  try {
    std::vector<YAML::Node> documents = YAML::LoadAll(std::string(yaml_text));
    if (documents.size() > 1) {
      return one_error("<yaml>", "must hold one YAML document, got " + std::to_string(documents.size()));
    }
    YAML::Node root = documents.empty() ? YAML::Node() : documents.front();
    if (!options.overrides.empty() || !options.only_port.empty()) {
      if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
      if (!root.IsMap()) return one_error(std::string(kDocumentKey), "must be a map, got " + describe_node(root));
      for (const Override& o : options.overrides) {
        try {
          if (const auto error = apply_override(root, o)) return one_error(o.key, "(override) " + *error);
        } catch (const YAML::Exception& e) {
          return one_error(o.key, "(override) the value '" + o.value + "' is not YAML: " + e.msg);
        }
      }
      if (!options.only_port.empty()) {
        if (const auto error = keep_only_port(root, options.only_port)) return one_error("ports", *error);
      }
    }
    if (root.IsMap()) {
      for (const std::string& section : options.application_sections) root.remove(section);
    }
    Reader r;
    Config config;
    read_map(r, root, "", kTopFields, config);
    check_ports(r, config);
    check_sizes(r, config);
    check_faults(r, config.faults);
    return finish(r, std::move(config));
  } catch (const YAML::Exception& e) {
    if (e.mark.is_null()) return one_error("<yaml>", e.msg);
    return one_error("<yaml>", "line " + std::to_string(e.mark.line + 1) + ", column " +
                                   std::to_string(e.mark.column + 1) + ": " + e.msg);
  } catch (const std::bad_alloc&) {
    throw;
  } catch (const std::exception& e) {  // yaml-cpp may throw others (e.g. std::runtime_error); never let them out
    return one_error("<yaml>", e.what());
  }
}

LoadResult load_config_file(const std::string& path, const LoadOptions& options) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return one_error("<file>", "cannot read '" + path + "': " + std::generic_category().message(errno));
  }
  std::string text;
  char buffer[4096];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) text.append(buffer, n);
  const int error = std::ferror(file) ? (errno != 0 ? errno : EIO) : 0;
  std::fclose(file);
  if (error != 0) return one_error("<file>", "cannot read '" + path + "': " + std::generic_category().message(error));
  return load_config(text, options);
}

std::string_view embedded_default_yaml() { return kEmbeddedDefaultYaml; }

}  // namespace uroce::config
