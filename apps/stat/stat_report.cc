#include "apps/stat/stat_report.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <utility>

namespace uroce::stat {

namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Objects indexed 0, 1, ... until the process answers null (an index it does not have).
std::optional<std::vector<Json::object_t>> read_indexed(TelemetryClient& client, const std::string& command,
                                                        std::string& error) {
  std::vector<Json::object_t> objects;
  for (unsigned i = 0;; ++i) {
    auto data = client.query(command + "," + std::to_string(i), error);
    if (!data) return std::nullopt;
    auto* object = data->get_ptr<Json::object_t*>();
    if (object == nullptr) return objects;
    objects.push_back(std::move(*object));
  }
}

std::optional<uint64_t> integer(const Json::object_t& o, const std::string& key) {
  const auto it = o.find(key);
  return it == o.end() ? std::nullopt : unsigned_integer(it->second);
}

std::string text(const Json::object_t& o, const std::string& key) {
  const auto it = o.find(key);
  if (it == o.end()) return "-";
  if (const auto* s = it->second.get_ptr<const Json::string_t*>()) return s->empty() ? "-" : *s;
  if (const auto v = unsigned_integer(it->second)) return std::to_string(*v);
  return dump_json(it->second);
}

// The same object (same identity key) in the earlier snapshot.
const Json::object_t* match(const std::vector<Json::object_t>& before, const Json::object_t& now,
                            const std::string& key) {
  const auto id = now.find(key);
  if (id == now.end()) return nullptr;
  for (const Json::object_t& o : before) {
    const auto other = o.find(key);
    if (other != o.end() && other->second == id->second) return &o;
  }
  return nullptr;
}

// Counter sums the tables show as one column.
uint64_t sum_matching(const Json::object_t& o, const std::function<bool(const std::string&)>& wanted) {
  uint64_t sum = 0;
  for (const auto& [name, value] : o) {
    if (const auto v = unsigned_integer(value); v && wanted(name)) sum += *v;
  }
  return sum;
}

// Every way a RoCE packet is dropped on an engine: parse failures, ICRC, unknown QP, full redirect rings, TX
// backlog overflow.
bool is_drop_counter(const std::string& name) {
  return name.starts_with("rx_drop_") || name == "rx_icrc_encapsulated" || name == "rx_unknown_qp" ||
         name == "redirect_ring_full" || name == "tx_backlog_drops";
}

std::string format_count(double value, bool rate) {
  char out[32];
  if (rate) {
    std::snprintf(out, sizeof(out), "%.0f/s", value);
  } else {
    std::snprintf(out, sizeof(out), "%.0f", value);
  }
  return out;
}

// A column: a header and how to compute its cell from the object now (and the same object before, in watch mode).
struct Column {
  std::string header;
  std::function<std::string(const Json::object_t& now, const Json::object_t* before, double seconds)> cell;
};

// A counter column: its value, or its rate over the interval.
Column counter(const std::string& header, std::function<uint64_t(const Json::object_t&)> value) {
  return {header, [value = std::move(value)](const Json::object_t& now, const Json::object_t* before, double seconds) {
            if (before == nullptr || seconds <= 0) return format_count(static_cast<double>(value(now)), false);
            const uint64_t a = value(*before), b = value(now);
            return format_count(b >= a ? static_cast<double>(b - a) / seconds : 0, true);
          }};
}
Column counter(const std::string& header, const std::string& key) {
  return counter(header, [key](const Json::object_t& o) { return integer(o, key).value_or(0); });
}
Column gauge(const std::string& header, const std::string& key) {
  return {header, [key](const Json::object_t& now, const Json::object_t*, double) { return text(now, key); }};
}

std::string render_table(const std::string& title, const std::vector<Json::object_t>& now,
                         const std::vector<Json::object_t>* before, const std::string& id_key, double seconds,
                         const std::vector<Column>& columns) {
  std::vector<std::vector<std::string>> rows;
  rows.emplace_back();
  for (const Column& c : columns) rows.back().push_back(c.header);
  for (const Json::object_t& o : now) {
    const Json::object_t* previous = before != nullptr ? match(*before, o, id_key) : nullptr;
    rows.emplace_back();
    for (const Column& c : columns) rows.back().push_back(c.cell(o, previous, seconds));
  }
  std::vector<std::size_t> widths(columns.size(), 0);
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out = title + (now.empty() ? ": none\n" : "\n");
  if (now.empty()) return out;
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      // Names left, numbers right, as ethtool and rdma do.
      const std::size_t pad = widths[i] - row[i].size();
      if (i == 0) {
        line += row[i] + std::string(pad, ' ');
      } else {
        line += "  " + std::string(pad, ' ') + row[i];
      }
    }
    out += line + "\n";
  }
  return out;
}

std::vector<Column> port_columns() {
  return {gauge("PORT", "name"),
          gauge("DRIVER", "driver"),
          gauge("STEERING", "steering"),
          gauge("MTU", "mtu"),
          counter("RX_PACKETS", "rx_packets"),
          counter("RX_BYTES", "rx_bytes"),
          counter("TX_PACKETS", "tx_packets"),
          counter("TX_BYTES", "tx_bytes"),
          counter("RX_MISSED", "rx_missed_errors"),
          counter("RX_NOMBUF", "rx_mbuf_allocation_errors")};
}

std::vector<Column> engine_columns() {
  return {gauge("ENGINE", "engine"),
          gauge("LCORE", "lcore"),
          {"BUSY",
           [](const Json::object_t& now, const Json::object_t* before, double) {
             const auto share = busy_share(now, before);
             if (!share) return std::string("-");
             char out[16];
             std::snprintf(out, sizeof(out), "%.1f%%", *share * 100);
             return std::string(out);
           }},
          counter("RX_PACKETS", "rx_packets"),
          counter("TX_PACKETS", "tx_packets"),
          counter("DROPS", [](const Json::object_t& o) { return sum_matching(o, is_drop_counter); }),
          counter("REDIRECT_OUT", "redirect_enqueued"),
          counter("REDIRECT_IN", "redirect_received"),
          {"MEMPOOL", [](const Json::object_t& now, const Json::object_t*,
                         double) { return text(now, "mempool_in_use") + "/" + text(now, "mempool_size"); }},
          counter("ALLOC_FAIL", "mbuf_alloc_failures")};
}

// The columns of `rdma resource show qp` (lqpn, rqpn, state, sq-psn, rq-psn) and of rxe's counters.
std::vector<Column> qp_columns() {
  return {gauge("LQPN", "lqpn"),
          gauge("RQPN", "rqpn"),
          gauge("TYPE", "type"),
          gauge("STATE", "state"),
          gauge("PEER", "peer"),
          gauge("PORT", "port"),
          gauge("ENGINE", "engine"),
          gauge("SQ_PSN", "sq_psn"),
          gauge("RQ_PSN", "rq_psn"),
          counter("RETRANS", "retransmitted_packets"),
          counter("TIMEOUTS", "local_ack_timeout_err"),
          counter("RNR_RCVD", "rcvd_rnr_err"),
          counter("RNR_SENT", "send_rnr_err"),
          counter("NAK_SEQ_RCVD", "packet_seq_err"),
          counter("NAKS_SENT", "naks_sent"),
          gauge("WINDOW", "window_packets"),
          counter("SLOW_RESTARTS", "roce_slow_restart")};
}

Json rates(const Json::object_t& now, const Json::object_t* before, double seconds) {
  Json::object_t out;
  if (before == nullptr || seconds <= 0) return out;
  for (const auto& [name, value] : now) {
    const auto b = unsigned_integer(value);
    const auto earlier = before->find(name);
    const auto a = earlier != before->end() ? unsigned_integer(earlier->second) : std::nullopt;
    if (a && b && *b >= *a && name != "tsc_hz" && name != "mempool_size" && name != "mempool_in_use")
      out.emplace(name, static_cast<double>(*b - *a) / seconds);
  }
  return out;
}

}  // namespace

std::optional<double> busy_share(const Json::object_t& now, const Json::object_t* before) {
  const auto busy = integer(now, "busy_cycles"), total = integer(now, "total_cycles");
  if (!busy || !total) return std::nullopt;
  uint64_t busy_delta = *busy, total_delta = *total;
  if (before != nullptr) {
    const auto busy0 = integer(*before, "busy_cycles"), total0 = integer(*before, "total_cycles");
    if (busy0 && total0 && *busy >= *busy0 && *total >= *total0) {
      busy_delta = *busy - *busy0;
      total_delta = *total - *total0;
    }
  }
  if (total_delta == 0) return std::nullopt;
  return std::min(1.0, static_cast<double>(busy_delta) / static_cast<double>(total_delta));
}

std::optional<Snapshot> take_snapshot(TelemetryClient& client, std::string& error) {
  Snapshot s;
  s.seconds = steady_seconds();
  auto ports = read_indexed(client, "/uroce/port", error);
  if (!ports) return std::nullopt;
  auto engines = read_indexed(client, "/uroce/engine", error);
  if (!engines) return std::nullopt;
  s.ports = std::move(*ports);
  s.engines = std::move(*engines);
  auto qpns = client.query("/uroce/qps", error);
  if (!qpns) return std::nullopt;
  if (const auto* list = qpns->get_ptr<const Json::array_t*>()) {
    for (const Json& qpn : *list) {
      const auto number = unsigned_integer(qpn);
      if (!number) continue;
      auto qp = client.query("/uroce/qp," + std::to_string(*number), error);
      if (!qp) return std::nullopt;
      // null: destroyed since the list was read
      if (auto* object = qp->get_ptr<Json::object_t*>()) s.qps.push_back(std::move(*object));
    }
  }
  return s;
}

std::string render_tables(const Snapshot& now, const Snapshot* before, const std::vector<Section>& sections) {
  const double seconds = before != nullptr ? now.seconds - before->seconds : 0;
  std::string out;
  for (const Section section : sections) {
    switch (section) {
      case Section::kPorts:
        out += render_table("ports", now.ports, before ? &before->ports : nullptr, "name", seconds, port_columns());
        break;
      case Section::kEngines:
        out += render_table("engines", now.engines, before ? &before->engines : nullptr, "engine", seconds,
                            engine_columns());
        break;
      case Section::kQps:
        out += render_table("qps", now.qps, before ? &before->qps : nullptr, "lqpn", seconds, qp_columns());
        break;
      case Section::kCounters:
        out += render_counters(now, before);
        break;
    }
  }
  return out;
}

std::string render_counters(const Snapshot& now, const Snapshot* before) {
  const double seconds = before != nullptr ? now.seconds - before->seconds : 0;
  std::string out;
  const auto dump = [&](const std::string& title, const std::vector<Json::object_t>& objects,
                        const std::vector<Json::object_t>* earlier, const std::string& id_key) {
    for (const Json::object_t& o : objects) {
      out += title + " " + text(o, id_key) + ":\n";
      const Json::object_t* previous = earlier != nullptr ? match(*earlier, o, id_key) : nullptr;
      for (const auto& [name, value] : o) {
        const auto v = unsigned_integer(value);
        std::string cell = v ? std::to_string(*v) : text(o, name);
        if (v && previous != nullptr && seconds > 0) {
          const auto a = integer(*previous, name);
          if (a && *v >= *a) cell = format_count(static_cast<double>(*v - *a) / seconds, true);
        }
        out.append("     ").append(name).append(": ").append(cell).append("\n");
      }
    }
  };
  dump("port", now.ports, before ? &before->ports : nullptr, "name");
  dump("engine", now.engines, before ? &before->engines : nullptr, "engine");
  return out;
}

Json to_json(const Snapshot& now, const Snapshot* before) {
  const double seconds = before != nullptr ? now.seconds - before->seconds : 0;
  const auto section = [&](const std::vector<Json::object_t>& objects, const std::vector<Json::object_t>* earlier,
                           const std::string& id_key, bool engines) {
    Json::array_t out;
    for (const Json::object_t& o : objects) {
      Json::object_t item = o;
      const Json::object_t* previous = earlier != nullptr ? match(*earlier, o, id_key) : nullptr;
      if (before != nullptr) item.insert_or_assign("rates", rates(o, previous, seconds));
      if (engines) {
        if (const auto share = busy_share(o, previous)) item.insert_or_assign("busy_share", *share);
      }
      out.emplace_back(std::move(item));
    }
    return out;
  };
  Json::object_t document;
  document.emplace("ports", section(now.ports, before ? &before->ports : nullptr, "name", false));
  document.emplace("engines", section(now.engines, before ? &before->engines : nullptr, "engine", true));
  document.emplace("qps", section(now.qps, before ? &before->qps : nullptr, "lqpn", false));
  if (before != nullptr) document.emplace("interval_seconds", seconds);
  return document;
}

}  // namespace uroce::stat
