// The `eal` section: lcores (a list, a "0-3,8" string or `auto`), hugepages, memory, file prefix, extra EAL
// arguments.
#include <algorithm>
#include <limits>
#include <set>

#include "config/sections.h"
#include "config/yaml_reader.h"

namespace uroce::config::detail {

namespace {

constexpr unsigned kMaxLcores = 128;  // RTE_MAX_LCORE in Debian's DPDK build: EAL rejects larger lcore ids

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
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
    const auto ranges = parse_cpu_ranges(node.Scalar());
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
       if (v->find_first_of("/ \t") != std::string::npos || *v == "." || *v == "..") {
         r.error(key, "must be a plain name (no '/', spaces, '.' or '..'), got '" + *v + "'");
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

}  // namespace

std::optional<std::vector<std::pair<uint64_t, uint64_t>>> parse_cpu_ranges(std::string_view text) {
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

void read_eal_section(Reader& r, const YAML::Node& node, const std::string& key, Config& out) {
  read_map(r, node, key, kEalFields, out.eal);
}

namespace {

// "0-1,4" for messages, the way the kernel and taskset print CPU lists.
std::string cpu_list_text(const std::vector<unsigned>& cpus) {
  std::string text;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    text.append(text.empty() ? "" : ",").append(std::to_string(cpus[i]));
    if (j > i) text.append("-").append(std::to_string(cpus[j]));
    i = j + 1;
  }
  return text.empty() ? "none" : text;
}

bool contains(const std::vector<unsigned>& cpus, unsigned cpu) {
  return std::find(cpus.begin(), cpus.end(), cpu) != cpus.end();
}

}  // namespace

void check_machine(Reader& r, const Config& config, const Machine& machine) {
  if (!r.ok_under("eal.lcores")) return;
  for (std::size_t i = 0; i < config.eal.lcores.size(); ++i) {
    const unsigned cpu = config.eal.lcores[i];
    const std::string engine = "engine " + std::to_string(i) + "'s CPU " + std::to_string(cpu);
    if (!machine.present_cpus.empty() && !contains(machine.present_cpus, cpu)) {
      r.error("eal.lcores", engine + " does not exist: this machine has CPUs " + cpu_list_text(machine.present_cpus) +
                                " (lscpu); name those, or use 'auto'");
    } else if (!machine.allowed_cpus.empty() && !contains(machine.allowed_cpus, cpu)) {
      r.error("eal.lcores", engine + " is not one this process may run on (" + cpu_list_text(machine.allowed_cpus) +
                                ": taskset or a cpuset restricts it); name one of those, or use 'auto'");
    }
  }
}

}  // namespace uroce::config::detail
