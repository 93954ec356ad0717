// YAML -> Config in two passes. The first walks the document with one table of fields per map, so every scalar
// key is parsed, range-checked and assigned in one place and unknown keys fall out of the table lookup. The
// second checks the rules that span keys (PMTU vs port MTU, pool sizes, ring links, duplicate addresses).
// Errors are collected, never thrown: an operator fixing a config wants every problem in one run.
//
// The reading machinery is yaml_reader.h; the eal and ports sections and the command-line overrides have files of
// their own (sections.h). This file holds the smaller sections, the cross-key size rules and load_config().
#include "config/config.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <limits>
#include <new>
#include <system_error>
#include <utility>

#include "config/sections.h"
#include "config/yaml_reader.h"

namespace uroce::config {

extern const std::string_view kEmbeddedDefaultYaml;  // generated from default.yaml (default_yaml.cc.in)

using namespace detail;  // this file is the one client of the section files and the reader machinery

namespace {

// An mbuf holds headroom + Ethernet header + one VLAN tag + the IP packet (the port MTU).
constexpr unsigned kMbufHeadroom = 128;  // RTE_PKTMBUF_HEADROOM
constexpr unsigned kFrameOverhead = 14 + 4;

// ---- engine, rdma, faults, capture ---------------------------------------------------------------------------------

constexpr std::array<std::pair<std::string_view, IdlePolicy>, 2> kIdleNames = {
    {{"busy_poll", IdlePolicy::kBusyPoll}, {"backoff", IdlePolicy::kBackoff}}};

constexpr std::array<Field<EngineConfig>, 10> kEngineFields = {{
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
    // 0 = off. A packet carries at most 4096 payload bytes (the largest IB path MTU), so a larger threshold would
    // silently never apply; below 64 bytes the three mbufs of a zero-copy frame cost more than the copy saves.
    {"zero_copy_threshold",
     [](Reader& r, const YAML::Node& node, const std::string& key, EngineConfig& out) {
       const auto v = r.integer(node, key, 0, std::numeric_limits<uint32_t>::max());
       if (!v) return;
       if (*v != 0 && (*v < 64 || *v > 4096)) {
         r.error(key, "must be 0 (off) or between 64 and 4096 bytes of payload, got " + node.Scalar());
         return;
       }
       out.zero_copy_threshold = static_cast<uint32_t>(*v);
     }},
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

// The bottleneck's queue is bounded by its buffer, held in a ring allocated per (engine, port) at start-up with a slot
// per 60 bytes: 64 MiB keeps that ring under 20 MB and is deeper than a switch gives one port.
constexpr uint32_t kMaxBottleneckBufferBytes = 64u << 20;

constexpr std::array<Field<BottleneckConfig>, 5> kBottleneckFields = {{
    {"rate_mbps", integer<&BottleneckConfig::rate_mbps, 0, 1'000'000>()},  // up to 1 Tb/s
    {"buffer_bytes", integer<&BottleneckConfig::buffer_bytes, 1, kMaxBottleneckBufferBytes>()},
    {"ecn_kmin_bytes", integer<&BottleneckConfig::ecn_kmin_bytes, 0, kMaxBottleneckBufferBytes>()},
    {"ecn_kmax_bytes", integer<&BottleneckConfig::ecn_kmax_bytes, 0, kMaxBottleneckBufferBytes>()},
    {"ecn_pmax", probability<&BottleneckConfig::ecn_pmax>()},
}};

constexpr std::array<Field<FaultConfig>, 6> kFaultFields = {{
    {"loss", probability<&FaultConfig::loss>()},
    {"reorder", probability<&FaultConfig::reorder>()},
    {"duplicate", probability<&FaultConfig::duplicate>()},
    {"corrupt", probability<&FaultConfig::corrupt>()},
    {"seed", integer<&FaultConfig::seed, 0, std::numeric_limits<uint64_t>::max()>()},
    {"bottleneck",
     [](Reader& r, const YAML::Node& node, const std::string& key, FaultConfig& out) {
       read_map(r, node, key, kBottleneckFields, out.bottleneck);
       // Thresholds and a buffer without a rate would silently configure nothing: as with an unknown key, say so.
       if (!node.IsMap() || out.bottleneck.rate_mbps != 0 || !r.ok(key + ".rate_mbps")) return;
       const bool sets_more = std::any_of(node.begin(), node.end(), [](const auto& entry) {
         return !entry.first.IsScalar() || entry.first.Scalar() != "rate_mbps";
       });
       if (sets_more) {
         r.error(key + ".rate_mbps",
                 "must be greater than 0 when faults.bottleneck sets other keys (0, the default, is off), got 0");
       }
     }},
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

constexpr std::array<Field<Config>, 7> kTopFields = {{
    {"eal", read_eal_section},
    {"ports", read_ports},
    {"engine", section<&Config::engine, kEngineFields>()},
    {"rdma", section<&Config::rdma, kRdmaFields>()},
    {"congestion", read_congestion_section},
    {"faults", section<&Config::faults, kFaultFields>()},
    {"capture", section<&Config::capture, kCaptureFields>()},
}};

// ---- Rules that span keys -----------------------------------------------------------------------------------------
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

void check_bottleneck(Reader& r, const Config& config) {
  const BottleneckConfig& b = config.faults.bottleneck;
  if (!b.enabled()) return;
  const std::string key = "faults.bottleneck";
  const std::string buffer = key + ".buffer_bytes", kmin = key + ".ecn_kmin_bytes", kmax = key + ".ecn_kmax_bytes";
  unsigned largest_frame = 0;
  for (std::size_t i = 0; i < config.ports.size(); ++i) {
    if (!r.ok(index_key("ports", i) + ".mtu")) continue;
    largest_frame = std::max(largest_frame, config.ports[i].mtu + kFrameOverhead);
  }
  if (r.ok(buffer) && b.buffer_bytes < largest_frame) {
    r.error(buffer, "must hold one frame of the largest port mtu + " + std::to_string(kFrameOverhead) +
                        " (Ethernet + VLAN header) = " + std::to_string(largest_frame) + ", got " +
                        r.seen(buffer, b.buffer_bytes));
  }
  if (r.ok(kmin) && r.ok(kmax) && b.ecn_kmin_bytes > b.ecn_kmax_bytes) {
    r.error(kmin, "must be at most " + kmax + " (0: no marking) = " + r.seen(kmax, b.ecn_kmax_bytes) + ", got " +
                      r.seen(kmin, b.ecn_kmin_bytes));
  }
  if (r.ok(kmax) && r.ok(buffer) && b.ecn_kmax_bytes > b.buffer_bytes) {
    r.error(kmax, "must be at most " + buffer + " (the deepest the queue gets) = " + r.seen(buffer, b.buffer_bytes) +
                      ", got " + r.seen(kmax, b.ecn_kmax_bytes));
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
    check_bottleneck(r, config);
    check_congestion(r, config);
    if (options.machine) check_machine(r, config, *options.machine);
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
