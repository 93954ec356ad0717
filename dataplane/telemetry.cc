#include "dataplane/telemetry.h"

#include <cerrno>
#include <charconv>
#include <cstring>
#include <mutex>
#include <string_view>

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
                                 "Counters of the uroce connection manager and its GSI QP. No parameter") != 0)
    return Status::error("rte_telemetry_register_cmd failed for /uroce/engine, /uroce/port or /uroce/cm");
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
  add_counters(data, g_dataplane->port_counter_values(port.index));
  return 0;
}

}  // namespace uroce::dataplane
