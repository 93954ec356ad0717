// uroce-stat: what a running uroce process is doing, read through its DPDK telemetry socket (no DPDK needed here).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "apps/stat/stat_report.h"
#include "apps/stat/telemetry_client.h"

namespace {

using uroce::stat::Section;

constexpr const char* kUsage =
    "Usage: uroce-stat [OPTIONS] [ports|engines|qps|counters]...\n"
    "Shows a running uroce process's ports, engines and QPs, read through its DPDK telemetry socket\n"
    "(/var/run/dpdk/<file-prefix>/dpdk_telemetry.v2 for root's processes, $XDG_RUNTIME_DIR/dpdk/... or\n"
    "/tmp/dpdk/... for another user's, as DPDK puts them). With no section: ports, engines and qps.\n"
    "  ports      name, driver, steering (rte_flow or rss), MTU, packets, bytes, device drops\n"
    "  engines    busy share, packets, drops, redirects between engines, mempool use\n"
    "  qps        like `rdma resource show qp`: QPNs, state, peer, PSNs, retransmissions, RNR and NAK counts\n"
    "  counters   every counter of every port and engine, one per line (like `ethtool -S`)\n"
    "Options:\n"
    "  -p, --file-prefix PREFIX  the process's eal.file_prefix (default: the one uroce process running; its\n"
    "                            prefix is uroce-<pid> unless the config names one)\n"
    "      --socket PATH         the telemetry socket itself\n"
    "  -j, --json                JSON instead of tables\n"
    "  -w, --watch SECONDS       print every SECONDS, counters as rates per second over the interval\n"
    "  -c, --count N             with -w: stop after N intervals\n"
    "  -h, --help                this text\n";

struct Options {
  std::string file_prefix;
  std::string socket;
  bool json = false;
  double watch_seconds = 0;
  unsigned count = 0;  // 0: forever
  std::vector<Section> sections;
};

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "uroce-stat: %s\n", message.c_str());
  std::exit(1);  // NOLINT(concurrency-mt-unsafe): single-threaded
}

Options parse_options(int argc, char** argv) {
  Options o;
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view a = args[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) fail(std::string(a) + " needs a value (see --help)");
      return std::string(args[++i]);
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);  // NOLINT(concurrency-mt-unsafe): single-threaded
    } else if (a == "-p" || a == "--file-prefix") {
      o.file_prefix = value();
    } else if (a == "--socket") {
      o.socket = value();
    } else if (a == "-j" || a == "--json") {
      o.json = true;
    } else if (a == "-w" || a == "--watch") {
      const std::string v = value();
      char* end = nullptr;
      o.watch_seconds = std::strtod(v.c_str(), &end);
      // Each interval queries every engine through its mailbox: not faster than 100 per second, and not so long
      // that the sleep's conversion overflows.
      if (end == v.c_str() || *end != '\0' || !(o.watch_seconds >= 0.01 && o.watch_seconds <= 86400))
        fail("--watch takes a number of seconds from 0.01 to 86400, got '" + v + "'");
    } else if (a == "-c" || a == "--count") {
      const std::string v = value();
      char* end = nullptr;
      const unsigned long n = std::strtoul(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || n == 0 || n > 1000000000UL)
        fail("--count takes a whole number above 0, got '" + v + "'");
      o.count = static_cast<unsigned>(n);
    } else if (a == "ports") {
      o.sections.push_back(Section::kPorts);
    } else if (a == "engines") {
      o.sections.push_back(Section::kEngines);
    } else if (a == "qps" || a == "qp") {
      o.sections.push_back(Section::kQps);
    } else if (a == "counters") {
      o.sections.push_back(Section::kCounters);
    } else {
      fail("unknown argument '" + std::string(a) + "' (see --help)");
    }
  }
  if (o.count != 0 && o.watch_seconds == 0) fail("--count goes with --watch");
  if (o.sections.empty()) o.sections = {Section::kPorts, Section::kEngines, Section::kQps};
  return o;
}

std::string socket_path(const Options& o) {
  if (!o.socket.empty()) return o.socket;
  if (!o.file_prefix.empty()) return uroce::stat::telemetry_socket_path(o.file_prefix);
  const std::vector<std::string> prefixes = uroce::stat::find_file_prefixes("uroce");
  if (prefixes.empty()) {
    fail("no running uroce process found (no " + uroce::stat::telemetry_socket_path("uroce*") +
         " that accepts a connection); "
         "give --file-prefix if its eal.file_prefix does not start with 'uroce'");
  }
  if (prefixes.size() > 1) {
    std::string list;
    for (const auto& p : prefixes) list += " " + p;
    fail("several uroce processes are running; pick one with --file-prefix:" + list);
  }
  return uroce::stat::telemetry_socket_path(prefixes.front());
}

void print(const Options& o, const uroce::stat::Snapshot& now, const uroce::stat::Snapshot* before) {
  if (o.json) {
    std::printf("%s\n", uroce::stat::dump_json(uroce::stat::to_json(now, before)).c_str());
  } else {
    std::fputs(uroce::stat::render_tables(now, before, o.sections).c_str(), stdout);
    if (before != nullptr) std::fputs("\n", stdout);
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  std::string error;
  auto client = uroce::stat::TelemetryClient::connect(socket_path(options), error);
  if (!client) fail(error);
  auto snapshot = uroce::stat::take_snapshot(*client, error);
  if (!snapshot) fail(error);
  if (options.watch_seconds == 0) {
    print(options, *snapshot, nullptr);
    return 0;
  }
  // Watch: each interval's rates, like `vmstat 1` (the first line is of the interval, not since start).
  for (unsigned printed = 0; options.count == 0 || printed < options.count; ++printed) {
    std::this_thread::sleep_for(std::chrono::duration<double>(options.watch_seconds));
    auto next = uroce::stat::take_snapshot(*client, error);
    if (!next) fail(error);
    print(options, *next, &*snapshot);
    snapshot = std::move(next);
  }
  return 0;
}
