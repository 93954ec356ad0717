// DPDK telemetry commands for the dataplane's counters:
//   /uroce/engine,<id>   every counter of engine <id> (counters.h names), plus its lcore
//   /uroce/port,<index>  a port's packet and byte counters summed over engines, plus its name
// Query with `dpdk-telemetry.py -f <file-prefix>` (the socket lives in /var/run/dpdk/<prefix>/).
#pragma once

#include "dataplane/status.h"

struct rte_tel_data;

namespace uroce::dataplane {

class Dataplane;

// Registers the commands; called once by init_eal() right after rte_eal_init.
[[nodiscard]] Status register_telemetry_commands();

// The running Dataplane whose counters the commands report, or none. The telemetry thread reads the counters
// under a mutex, so withdraw before the engines are destroyed.
void publish_to_telemetry(const Dataplane* dataplane);

// The command callbacks (telemetry_cb), callable directly by tests. They return -EINVAL for a bad parameter
// and -ENODEV when no Dataplane is running.
int telemetry_engine_command(const char* command, const char* params, rte_tel_data* data);
int telemetry_port_command(const char* command, const char* params, rte_tel_data* data);

}  // namespace uroce::dataplane
