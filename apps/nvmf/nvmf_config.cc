#include "apps/nvmf/nvmf_config.h"

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <optional>
#include <set>

#include <yaml-cpp/yaml.h>

#include "apps/nvmf/file_backend.h"

namespace uroce::nvmf {

namespace {

// Collects every error, each "key: message", and reads typed values from YAML nodes.
class Reader {
 public:
  void error(const std::string& key, const std::string& message) { errors_.push_back(key + ": " + message); }
  [[nodiscard]] std::vector<std::string> take_errors() { return std::move(errors_); }
  [[nodiscard]] bool ok() const { return errors_.empty(); }

  // A map whose keys must be among `known`; false (with an error) when the node is not a map.
  bool map(const YAML::Node& node, const std::string& key, std::initializer_list<std::string_view> known) {
    if (!node.IsMap()) {
      error(key, "must be a map");
      return false;
    }
    for (const auto& entry : node) {
      const std::string name = entry.first.as<std::string>();
      if (std::find(known.begin(), known.end(), name) == known.end()) error(key + '.' += name, "unknown key");
    }
    return true;
  }

  template <typename T>
  void integer(const YAML::Node& map, const std::string& key, std::string_view name, T& out, uint64_t min,
               uint64_t max) {
    const YAML::Node node = map[std::string(name)];
    if (!node.IsDefined() || node.IsNull()) return;
    const std::string full = key + "." + std::string(name);
    uint64_t v = 0;
    if (!node.IsScalar() || !YAML::convert<uint64_t>::decode(node, v)) {
      error(full,
            "must be a whole number, got '" + (node.IsScalar() ? node.Scalar() : std::string("a list or map")) + "'");
      return;
    }
    if (v < min || v > max) {
      error(full,
            "must be between " + std::to_string(min) + " and " + std::to_string(max) + ", got " + std::to_string(v));
      return;
    }
    out = static_cast<T>(v);
  }

  void text(const YAML::Node& map, const std::string& key, std::string_view name, std::string& out,
            std::size_t max_length) {
    const YAML::Node node = map[std::string(name)];
    if (!node.IsDefined() || node.IsNull()) return;
    const std::string full = key + "." + std::string(name);
    if (!node.IsScalar()) return error(full, "must be a string");
    const std::string& v = node.Scalar();
    if (v.empty() || v.size() > max_length)
      return error(full, "must be 1 to " + std::to_string(max_length) + " characters, got " + std::to_string(v.size()));
    if (!std::all_of(v.begin(), v.end(), [](char c) { return c >= 0x20 && c < 0x7F; }))
      return error(full, "must be printable ASCII");
    out = v;
  }

  // A list, each element read by `read` with its indexed key.
  void list(const YAML::Node& map, const std::string& key, std::string_view name,
            const std::function<void(const YAML::Node&, const std::string&)>& read) {
    const YAML::Node node = map[std::string(name)];
    if (!node.IsDefined() || node.IsNull()) return;
    const std::string full = key + "." + std::string(name);
    if (!node.IsSequence()) return error(full, "must be a list");
    for (std::size_t i = 0; i < node.size(); ++i) read(node[i], full + "[" + std::to_string(i) + "]");
  }

 private:
  std::vector<std::string> errors_;
};

// NVMe base 2.0 §4.5: "nqn.yyyy-mm.reverse-domain:..." (or the discovery and UUID forms), at most 223 bytes.
bool is_nqn(const std::string& nqn) {
  return nqn.size() <= 223 && nqn.size() > 12 && nqn.rfind("nqn.", 0) == 0 && nqn[8] == '-' &&
         std::all_of(nqn.begin() + 4, nqn.begin() + 8, [](char c) { return c >= '0' && c <= '9'; });
}

void read_namespace(Reader& r, const YAML::Node& node, const std::string& key, SubsystemConfig& subsystem,
                    std::set<uint32_t>& nsids) {
  if (!r.map(node, key, {"nsid", "ram_mb", "file", "size_mb", "io", "block_size"})) return;
  NamespaceConfig ns;
  uint64_t ram_mb = 0;
  uint64_t size_mb = 0;
  std::string file;
  std::string io = "auto";
  r.integer(node, key, "nsid", ns.nsid, 1, 1024);
  r.integer(node, key, "ram_mb", ram_mb, 1, 1u << 20);
  r.text(node, key, "file", file, 4096);
  r.integer(node, key, "size_mb", size_mb, 1, uint64_t{1} << 30);
  r.text(node, key, "io", io, 16);
  r.integer(node, key, "block_size", ns.block_size, 512, 4096);
  if (ns.block_size != 512 && ns.block_size != 4096)
    r.error(key + ".block_size", "must be 512 or 4096, got " + std::to_string(ns.block_size));
  const bool is_ram = node["ram_mb"].IsDefined(), is_file = node["file"].IsDefined();
  if (is_ram == is_file)
    r.error(key, "needs one backend: ram_mb (a RAM namespace of that many MiB) or file (a file or block device)");
  if (node["size_mb"].IsDefined() && !is_file) r.error(key + ".size_mb", "goes with file (it creates or extends it)");
  if (node["io"].IsDefined() && !is_file) r.error(key + ".io", "goes with file");
  FileIo mode = FileIo::kAuto;
  if (io == "io_uring") {
    mode = FileIo::kIoUring;
  } else if (io == "threads") {
    mode = FileIo::kWorkerThreads;
  } else if (io != "auto") {
    r.error(key + ".io", "must be auto, io_uring or threads, got '" + io + "'");
  }
  if (!nsids.insert(ns.nsid).second)
    r.error(key + ".nsid", std::to_string(ns.nsid) + " is used twice in this subsystem");
  if (r.ok() && is_ram) ns.backend = make_ram_backend(ram_mb << 20);
  if (r.ok() && is_file) {
    FileBackendOptions options;
    options.path = file;
    options.create_size = size_mb << 20;
    options.block_size = ns.block_size;
    options.io = mode;
    auto opened = open_file_backend(options);
    if (auto* backend = std::get_if<std::shared_ptr<Backend>>(&opened)) {
      ns.backend = std::move(*backend);
    } else {
      r.error(key + ".file", std::get<std::string>(opened));
    }
  }
  subsystem.namespaces.push_back(std::move(ns));
}

void read_subsystem(Reader& r, const YAML::Node& node, const std::string& key, TargetConfig& target,
                    std::set<std::string>& nqns) {
  if (!r.map(node, key, {"nqn", "serial", "model", "allowed_hosts", "namespaces"})) return;
  SubsystemConfig s;
  r.text(node, key, "nqn", s.nqn, 223);
  if (s.nqn.empty()) {
    r.error(key + ".nqn", "is required");
  } else if (!is_nqn(s.nqn) || s.nqn == kDiscoveryNqn) {
    r.error(key + ".nqn", "'" + s.nqn + "' is not a subsystem NQN (nqn.yyyy-mm.reverse.domain:name)");
  } else if (!nqns.insert(s.nqn).second) {
    r.error(key + ".nqn", "'" + s.nqn + "' names two subsystems");
  }
  r.text(node, key, "serial", s.serial, 20);
  r.text(node, key, "model", s.model, 40);
  r.list(node, key, "allowed_hosts", [&](const YAML::Node& host, const std::string& host_key) {
    if (!host.IsScalar() || !is_nqn(host.Scalar())) return r.error(host_key, "must be a host NQN");
    s.allowed_hosts.push_back(host.Scalar());
  });
  std::set<uint32_t> nsids;
  r.list(node, key, "namespaces",
         [&](const YAML::Node& ns, const std::string& ns_key) { read_namespace(r, ns, ns_key, s, nsids); });
  if (s.namespaces.empty()) r.error(key + ".namespaces", "needs at least one namespace");
  target.subsystems.push_back(std::move(s));
}

NvmfConfig default_config() {
  NvmfConfig c;
  SubsystemConfig s;
  s.nqn = kDefaultNqn;
  s.namespaces.push_back(NamespaceConfig{1, 512, make_ram_backend(256u << 20)});
  c.target.subsystems.push_back(std::move(s));
  c.listen.push_back({});
  return c;
}

}  // namespace

std::variant<NvmfConfig, std::vector<std::string>> load_nvmf_config(std::string_view yaml_text) {
  Reader r;
  try {
    const YAML::Node root = YAML::Load(std::string(yaml_text));
    const YAML::Node section = root.IsMap() ? root["nvmf"] : YAML::Node();
    if (!section.IsDefined() || section.IsNull()) return default_config();
    const std::string key = "nvmf";
    if (!r.map(section, key, {"listen", "limits", "subsystems"})) return r.take_errors();
    NvmfConfig c;
    r.list(section, key, "listen", [&](const YAML::Node& node, const std::string& k) {
      if (!r.map(node, k, {"address", "port"})) return;
      ListenAddress l;
      if (node["address"].IsDefined()) l.address = node["address"].as<std::string>();
      r.integer(node, k, "port", l.port, 1, 65535);
      c.listen.push_back(l);
    });
    if (c.listen.empty()) c.listen.push_back({});
    if (const YAML::Node limits = section["limits"]; limits.IsDefined() && !limits.IsNull()) {
      const std::string k = key + ".limits";
      TargetLimits& l = c.target.limits;
      if (r.map(limits, k,
                {"max_queue_size", "max_io_queues", "inline_data_size", "mdts", "keep_alive_granularity_ms",
                 "max_queues", "max_queues_per_host", "connect_timeout_ms"})) {
        r.integer(limits, k, "max_queue_size", l.max_queue_size, 2, 1024);
        r.integer(limits, k, "max_io_queues", l.max_io_queues, 1, 1024);
        r.integer(limits, k, "inline_data_size", l.inline_data_size, 0, 16384);
        r.integer(limits, k, "mdts", l.mdts, 1, 8);
        r.integer(limits, k, "keep_alive_granularity_ms", l.keep_alive_granularity_ms, 100, 25500);
        r.integer(limits, k, "max_queues", l.max_queues, 1, 65535);
        r.integer(limits, k, "max_queues_per_host", l.max_queues_per_host, 1, 65535);
        r.integer(limits, k, "connect_timeout_ms", l.connect_timeout_ms, 100, 600000);
        if (l.inline_data_size % 16 != 0)
          r.error(k + ".inline_data_size", "must be a multiple of 16 (the host counts capsules in 16-byte units)");
      }
    }
    std::set<std::string> nqns;
    r.list(section, key, "subsystems",
           [&](const YAML::Node& node, const std::string& k) { read_subsystem(r, node, k, c.target, nqns); });
    if (c.target.subsystems.empty() && r.ok()) r.error(key + ".subsystems", "needs at least one subsystem");
    if (!r.ok()) return r.take_errors();
    return c;
  } catch (const YAML::Exception& e) {
    r.error("<yaml>", e.what());
    return r.take_errors();
  }
}

}  // namespace uroce::nvmf
