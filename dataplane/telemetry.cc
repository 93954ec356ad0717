#include "dataplane/telemetry.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <mutex>
#include <string_view>

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_mempool.h>
#include <rte_telemetry.h>

#include "dataplane/dataplane.h"

namespace uroce::dataplane {

namespace {

// The telemetry thread and the control thread (start/stop) meet here: the mutex keeps a Dataplane from being
// torn down while a callback reads its counters. Control path only; engines never touch it.
std::mutex g_mutex;
const Dataplane* g_dataplane = nullptr;
const void* g_cm_owner = nullptr;
CounterSource g_cm_counters;
const void* g_qp_owner = nullptr;
QpSource g_qps;

// Telemetry's JSON output holds at most this many array entries; /uroce/qps stops there.
constexpr unsigned kMaxListedQps = RTE_TEL_MAX_ARRAY_ENTRIES;

std::optional<unsigned> parse_index(const char* params) {
  if (params == nullptr) return std::nullopt;
  const std::string_view text(params);
  unsigned value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

void add_counters(rte_tel_data* data, const std::vector<std::pair<std::string, uint64_t>>& values) {
  for (const auto& [name, value] : values) rte_tel_data_add_dict_u64(data, name.c_str(), value);
}

}  // namespace

Status register_telemetry_commands() {
  if (rte_telemetry_register_cmd("/uroce/engine", telemetry_engine_command,
                                 "Counters of one uroce engine. Parameter: engine id") != 0 ||
      rte_telemetry_register_cmd("/uroce/port", telemetry_port_command,
                                 "Counters of one uroce port, summed over engines. Parameter: port index") != 0 ||
      rte_telemetry_register_cmd("/uroce/cm", telemetry_cm_command,
                                 "Counters of the uroce connection manager and its GSI QP. No parameter") != 0 ||
      rte_telemetry_register_cmd("/uroce/qps", telemetry_qps_command, "QPNs of the uroce RC QPs. No parameter") != 0 ||
      rte_telemetry_register_cmd("/uroce/qp", telemetry_qp_command,
                                 "State, peer, PSNs and counters of one uroce RC QP. Parameter: QPN") != 0)
    return Status::error("rte_telemetry_register_cmd failed for a /uroce command");
  return {};
}

void publish_to_telemetry(const Dataplane* dataplane) {
  const std::lock_guard lock(g_mutex);
  g_dataplane = dataplane;
}

void publish_cm_counters(const void* owner, CounterSource source) {
  const std::lock_guard lock(g_mutex);
  g_cm_owner = owner;
  g_cm_counters = std::move(source);
}

void withdraw_cm_counters(const void* owner) {
  const std::lock_guard lock(g_mutex);
  if (g_cm_owner != owner) return;
  g_cm_owner = nullptr;
  g_cm_counters = nullptr;
}

void publish_qp_source(const void* owner, QpSource source) {
  const std::lock_guard lock(g_mutex);
  g_qp_owner = owner;
  g_qps = std::move(source);
}

void withdraw_qp_source(const void* owner) {
  const std::lock_guard lock(g_mutex);
  if (g_qp_owner != owner) return;
  g_qp_owner = nullptr;
  g_qps = {};
}

int telemetry_qps_command(const char*, const char*, rte_tel_data* data) {
  const std::lock_guard lock(g_mutex);  // the source's owner withdraws under it before it goes
  if (!g_qps.list) return -ENODEV;
  rte_tel_data_start_array(data, RTE_TEL_INT_VAL);
  unsigned listed = 0;
  for (const uint32_t qpn : g_qps.list()) {
    if (listed++ == kMaxListedQps) break;
    rte_tel_data_add_array_int(data, static_cast<int>(qpn));
  }
  return 0;
}

int telemetry_qp_command(const char*, const char* params, rte_tel_data* data) {
  const auto qpn = parse_index(params);
  const std::lock_guard lock(g_mutex);
  if (!g_qps.report) return -ENODEV;
  if (!qpn) return -EINVAL;
  const std::optional<QpReport> report = g_qps.report(*qpn);
  if (!report) return -EINVAL;
  rte_tel_data_start_dict(data);
  for (const auto& [name, text] : report->text) rte_tel_data_add_dict_string(data, name.c_str(), text.c_str());
  add_counters(data, report->numbers);
  return 0;
}

int telemetry_cm_command(const char*, const char*, rte_tel_data* data) {
  const std::lock_guard lock(g_mutex);  // the source's owner withdraws under it before it goes
  if (!g_cm_counters) return -ENODEV;
  rte_tel_data_start_dict(data);
  add_counters(data, g_cm_counters());
  return 0;
}

int telemetry_engine_command(const char*, const char* params, rte_tel_data* data) {
  const auto index = parse_index(params);
  const std::lock_guard lock(g_mutex);
  if (g_dataplane == nullptr) return -ENODEV;
  if (!index || *index >= g_dataplane->engine_count()) return -EINVAL;
  const Engine& engine = g_dataplane->engine(static_cast<EngineId>(*index));
  rte_tel_data_start_dict(data);
  rte_tel_data_add_dict_int(data, "engine", static_cast<int>(engine.id()));
  rte_tel_data_add_dict_int(data, "lcore", static_cast<int>(engine.lcore()));
  rte_tel_data_add_dict_u64(data, "tsc_hz", rte_get_tsc_hz());  // turns busy_cycles / total_cycles into seconds
  if (const rte_mempool* pool = g_dataplane->pool(engine.id()); pool != nullptr) {
    rte_tel_data_add_dict_u64(data, "mempool_size", pool->size);
    rte_tel_data_add_dict_u64(data, "mempool_in_use", rte_mempool_in_use_count(pool));
  }
  add_counters(data, counter_values(engine.counters()));
  return 0;
}

int telemetry_port_command(const char*, const char* params, rte_tel_data* data) {
  const auto index = parse_index(params);
  const std::lock_guard lock(g_mutex);
  if (g_dataplane == nullptr) return -ENODEV;
  if (!index || *index >= g_dataplane->port_count()) return -EINVAL;
  const Port& port = g_dataplane->port(static_cast<PortIndex>(*index));
  rte_tel_data_start_dict(data);
  rte_tel_data_add_dict_string(data, "name", port.name.c_str());
  rte_tel_data_add_dict_int(data, "port_id", port.port_id);
  rte_tel_data_add_dict_string(data, "steering", steering_mode_name(port.steering));
  rte_tel_data_add_dict_string(data, "mac", mac_to_string(port.mac).c_str());
  rte_tel_data_add_dict_u64(data, "mtu", port.mtu);
  rte_eth_dev_info info{};
  if (rte_eth_dev_info_get(port.port_id, &info) == 0 && info.driver_name != nullptr)
    rte_tel_data_add_dict_string(data, "driver", info.driver_name);
  add_counters(data, g_dataplane->port_counter_values(port.index));
  // Queue q is engine q's: what each engine received and sent on this port, under mlx5's ethtool -S names.
  for (EngineId e = 0; e < g_dataplane->engine_count(); ++e) {
    const PortCounters& queue = g_dataplane->engine(e).port_counters(port.index);
    const std::string prefix = std::to_string(e);
    rte_tel_data_add_dict_u64(data, ("rx" + prefix + "_packets").c_str(), queue.rx_packets.read());
    rte_tel_data_add_dict_u64(data, ("tx" + prefix + "_packets").c_str(), queue.tx_packets.read());
  }
  // What the device dropped before any engine saw it, under DPDK's xstats names.
  rte_eth_stats stats{};
  if (rte_eth_stats_get(port.port_id, &stats) == 0) {
    rte_tel_data_add_dict_u64(data, "rx_missed_errors", stats.imissed);
    rte_tel_data_add_dict_u64(data, "rx_errors", stats.ierrors);
    rte_tel_data_add_dict_u64(data, "rx_mbuf_allocation_errors", stats.rx_nombuf);
  }
  return 0;
}

}  // namespace uroce::dataplane
