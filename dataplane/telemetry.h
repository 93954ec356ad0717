// DPDK telemetry commands for the dataplane's counters:
//   /uroce/engine,<id>   every counter of engine <id> (counters.h names), plus its lcore
//   /uroce/port,<index>  a port's packet and byte counters summed over engines, plus its name
//   /uroce/cm            the connection manager's counters (the CM agent's and the GSI QP's), when one runs
//   /uroce/qps           the QPNs of the RC QPs that exist (an array), when an RC transport runs
//   /uroce/qp,<qpn>      one QP: state, peer, PSNs and its transport counters (rxe/mlx5 names)
// Query with `dpdk-telemetry.py -f <file-prefix>` (the socket lives in /var/run/dpdk/<prefix>/).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dataplane/status.h"

struct rte_tel_data;

namespace uroce::dataplane {

class Dataplane;

// Registers the commands; called once by init_eal() right after rte_eal_init.
[[nodiscard]] Status register_telemetry_commands();

// The running Dataplane whose counters the commands report, or none. The telemetry thread reads the counters
// under a mutex, so withdraw before the engines are destroyed.
void publish_to_telemetry(const Dataplane* dataplane);

// Counters kept outside the Dataplane, as (name, value); called on the telemetry thread.
using CounterSource = std::function<std::vector<std::pair<std::string, uint64_t>>()>;
// The connection manager's counters for /uroce/cm (the newest publisher wins); withdrawing names the owner, so
// a second adapter's going does not withdraw the first one's.
void publish_cm_counters(const void* owner, CounterSource source);
void withdraw_cm_counters(const void* owner);

// One QP as /uroce/qp reports it: text fields (state, peer) and numbers (QPNs, PSNs, counters).
struct QpReport {
  std::vector<std::pair<std::string, std::string>> text;
  std::vector<std::pair<std::string, uint64_t>> numbers;
};
// The RC transport's QPs, read on the telemetry thread: the QPNs that exist, and one QP's report (none if it went).
struct QpSource {
  std::function<std::vector<uint32_t>()> list;
  std::function<std::optional<QpReport>(uint32_t qpn)> report;
};
void publish_qp_source(const void* owner, QpSource source);
void withdraw_qp_source(const void* owner);

// The command callbacks (telemetry_cb), callable directly by tests. They return -EINVAL for a bad parameter
// and -ENODEV when no Dataplane is running.
int telemetry_engine_command(const char* command, const char* params, rte_tel_data* data);
int telemetry_port_command(const char* command, const char* params, rte_tel_data* data);
int telemetry_cm_command(const char* command, const char* params, rte_tel_data* data);
int telemetry_qps_command(const char* command, const char* params, rte_tel_data* data);
int telemetry_qp_command(const char* command, const char* params, rte_tel_data* data);

}  // namespace uroce::dataplane
