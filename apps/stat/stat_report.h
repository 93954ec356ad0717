// What uroce-stat shows: a snapshot of a running uroce's ports, engines and QPs read through telemetry
// (/uroce/port,<i>, /uroce/engine,<i>, /uroce/qps and /uroce/qp,<qpn>), rendered as tables in the manner of
// `rdma resource show qp` and `ethtool -S`, or as JSON. Two snapshots make rates per second (watch mode).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "apps/stat/telemetry_client.h"

namespace uroce::stat {

struct Snapshot {
  double seconds = 0;  // steady-clock time it was taken
  std::vector<Json::object_t> ports;
  std::vector<Json::object_t> engines;
  std::vector<Json::object_t> qps;
};

// Reads every port and engine (until the first index the process does not know) and every QP.
[[nodiscard]] std::optional<Snapshot> take_snapshot(TelemetryClient& client, std::string& error);

enum class Section : uint8_t { kPorts, kEngines, kQps, kCounters };

// Tables of one snapshot, or, given `before`, of the rates between the two: counters become per-second rates and
// the busy share is that of the interval; gauges (mempool use, PSNs, state) are shown as they are now.
[[nodiscard]] std::string render_tables(const Snapshot& now, const Snapshot* before,
                                        const std::vector<Section>& sections);
// Every counter of every port and engine, one "name: value" line each (ethtool -S).
[[nodiscard]] std::string render_counters(const Snapshot& now, const Snapshot* before);
// {"ports": [...], "engines": [...], "qps": [...]} as telemetry gave them; given `before`, each object also carries
// "rates": {counter: per second} and engines "busy_share" over the interval.
[[nodiscard]] Json to_json(const Snapshot& now, const Snapshot* before);

// The engine's busy share in [0, 1]: busy_cycles / total_cycles, over the interval when `before` is given.
[[nodiscard]] std::optional<double> busy_share(const Json::object_t& now, const Json::object_t* before);

}  // namespace uroce::stat
