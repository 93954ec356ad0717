// uroce-nvmf-target: an NVMe-over-Fabrics RDMA target on the NDK API (api/ndk.h) only. Linux's nvme-rdma host
// discovers it (`nvme discover -t rdma -a ADDR`), connects (`nvme connect -t rdma -a ADDR -n NQN`) and uses its
// namespaces as block devices.
//
//   uroce-nvmf-target [--config FILE] [configuration options] [--duration SECONDS]
//
// FILE is a uroce configuration (config/README.md) with an `nvmf:` section (nvmf_config.h): subsystems,
// namespaces, listen addresses, limits. Without one, the embedded default configuration and one 256 MiB RAM
// namespace under nqn.2026-11.io.uroce:ram0 on port 4420. The NVMe side is nvme/nvmf_target.h, the RDMA binding
// rdma_transport.h. SIGINT or SIGTERM (or --duration) ends it: every host is disconnected first.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <variant>

#include "api/ndk.h"
#include "apps/common/cm_connection.h"
#include "apps/common/progress.h"
#include "apps/common/tool_setup.h"
#include "apps/nvmf/nvmf_config.h"
#include "apps/nvmf/rdma_transport.h"

using namespace uroce;
using namespace uroce::ndk;
using namespace uroce::nvmf;

namespace {

constexpr const char* kTool = "uroce-nvmf-target";
std::atomic<bool> g_stop{false};

void usage(FILE* out) {
  std::fprintf(out,
               "usage: uroce-nvmf-target [--config FILE] [options]\n"
               "  An NVMe-over-Fabrics RDMA target: subsystems, namespaces and listen addresses come from FILE's\n"
               "  `nvmf:` section (apps/nvmf/nvmf_config.h); without it, one 256 MiB RAM namespace under %s on\n"
               "  port %u of the port's first address.\n"
               "  --duration SECONDS  stop after this long (default: until SIGINT or SIGTERM)\n"
               "%s"
               "  -h, --help\n"
               "%s",
               kDefaultNqn, kDefaultPort, apps::kProgressOptionHelp, apps::kConfigOptionsHelp);
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

int main(int argc, char** argv) {
  const std::optional<apps::ConfigOptions> config_options = apps::take_config_options(argc, argv, kTool);
  if (!config_options) return 2;
  uint64_t duration_s = 0;
  std::chrono::seconds progress_interval = apps::default_progress_interval();
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      usage(stdout);
      return 0;
    }
    if (arg == "--duration" && i + 1 < argc) {
      const std::optional<uint64_t> v = apps::parse_number(kTool, arg, argv[++i], 1, uint64_t{86400} * 365);
      if (!v) return 2;
      duration_s = *v;
      continue;
    }
    if (arg == "--progress" && i + 1 < argc) {
      const std::optional<std::chrono::seconds> v = apps::parse_progress_interval(kTool, argv[++i]);
      if (!v) return 2;
      progress_interval = *v;
      continue;
    }
    if (arg == "--duration" || arg == "--progress") {
      std::fprintf(stderr, "%s: %s needs a value in seconds\n", kTool, arg.c_str());
      return 2;
    }
    std::fprintf(stderr, "%s: unknown option '%s' (see --help)\n", kTool, arg.c_str());
    return 2;
  }

  // The embedded default joins its two ports with an in-process ring link, which needs both ends: it keeps them
  // (the target serves on the first). A configuration or device of one's own drives one port.
  const bool one_port = !config_options->path.empty() || !config_options->settings.empty();
  const std::optional<apps::ToolConfig> tool = apps::load_tool_config(*config_options, one_port, kTool, {"nvmf"});
  if (!tool) return 2;
  std::string yaml;
  if (!config_options->path.empty()) {
    const std::optional<std::string> text = read_file(config_options->path);
    if (!text) return std::fprintf(stderr, "%s: cannot read '%s'\n", kTool, config_options->path.c_str()), 2;
    yaml = *text;
  }
  auto loaded = load_nvmf_config(yaml);
  if (auto* errors = std::get_if<std::vector<std::string>>(&loaded)) {
    std::fprintf(stderr, "%s: the nvmf section is not valid:\n", kTool);
    for (const std::string& e : *errors) std::fprintf(stderr, "  %s\n", e.c_str());
    return 2;
  }
  NvmfConfig nvmf = std::get<NvmfConfig>(std::move(loaded));
  const config::PortConfig& port = tool->config.ports[tool->port];
  std::vector<sockaddr_storage> listen;
  for (const ListenAddress& l : nvmf.listen) {
    const std::string address = l.address.empty() ? apps::ip_text(port.addresses.front()) : l.address;
    const std::optional<sockaddr_storage> s = apps::parse_socket_address(address, l.port);
    if (!s) return std::fprintf(stderr, "%s: nvmf.listen: '%s' is not an IP address\n", kTool, address.c_str()), 2;
    listen.push_back(*s);
    nvmf.target.ports.push_back(PortAddress{s->ss_family == AF_INET6, address, l.port});
  }
  if (const std::optional<std::string> problem = NvmfTarget::validate(nvmf.target)) {
    std::fprintf(stderr, "%s: %s\n", kTool, problem->c_str());
    return 2;
  }

  Adapter* adapter = nullptr;
  if (const NTSTATUS s = NdkOpenAdapter(tool->config, kNdkVersion, &adapter); s != STATUS_SUCCESS) {
    std::fprintf(stderr, "%s: NdkOpenAdapter: %s\n", kTool, NdkStatusName(s));
    return 1;
  }
  int status = 0;
  {
    NvmfTarget target(nvmf.target);
    std::string error;
    std::unique_ptr<RdmaTransport> transport = RdmaTransport::start(*adapter, target, listen, error);
    if (!transport) {
      std::fprintf(stderr, "%s: %s\n", kTool, error.c_str());
      status = 1;
    } else {
      std::signal(SIGINT, [](int) { g_stop.store(true); });
      std::signal(SIGTERM, [](int) { g_stop.store(true); });
      for (const PortAddress& p : nvmf.target.ports) {
        for (const SubsystemConfig& s : nvmf.target.subsystems) {
          std::printf("%s: listening on %s port %u: %s (%zu namespace%s)\n", kTool, p.address.c_str(), p.port,
                      s.nqn.c_str(), s.namespaces.size(), s.namespaces.size() == 1 ? "" : "s");
        }
      }
      for (const SubsystemConfig& s : nvmf.target.subsystems) {
        for (const NamespaceConfig& ns : s.namespaces)
          std::printf("%s: %s namespace %u: %s\n", kTool, s.nqn.c_str(), ns.nsid, ns.backend->describe().c_str());
      }
      std::fflush(stdout);
      const auto end = duration_s ? std::chrono::steady_clock::now() + std::chrono::seconds(duration_s)
                                  : std::chrono::steady_clock::time_point::max();
      // The periodic status line: commands and their rate, queues open, errors.
      apps::ProgressReporter progress(kTool, progress_interval, "commands", 0);
      uint64_t keep_alive_expired = 0;
      // Poll while there is work; when idle, short sleeps, so a target with no host leaves the CPU to others.
      for (unsigned idle = 0; !g_stop.load() && std::chrono::steady_clock::now() < end;) {
        if (const auto now = std::chrono::steady_clock::now(); progress.due(now)) {
          const TransportCounters& c = transport->counters();
          const TargetCounters& t = target.counters();
          const std::string detail = ", " + std::to_string(c.queues_accepted - c.queues_closed) + " queues open, " +
                                     std::to_string(target.controller_count()) + " controllers held, " +
                                     std::to_string(t.keep_alive_expired) + " keep-alive expired, " +
                                     std::to_string(t.errors) + " errors";
          progress.update(target.counters().commands, 0, now, detail);
        }
        if (target.counters().keep_alive_expired != keep_alive_expired) {
          keep_alive_expired = target.counters().keep_alive_expired;
          std::printf("%s: keep-alive timeout: a controller whose host went silent is torn down (%lu so far)\n", kTool,
                      keep_alive_expired);
          std::fflush(stdout);
        }
        if (transport->poll()) {
          idle = 0;
        } else if (++idle > 256) {
          std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
      }
      const TransportCounters& c = transport->counters();
      const TargetCounters& t = target.counters();
      std::printf(
          "%s: stopping: queues accepted %lu, rejected %lu (%lu at limits.max_queues, %lu at "
          "limits.max_queues_per_host, %lu not set up), closed %lu "
          "(%lu without a Connect in time); capsules %lu (%lu bad, %lu waited for a slot); RDMA READs "
          "%lu, WRITEs %lu, SEND with Invalidate %lu; commands %lu, errors %lu; controllers %lu, keep-alive "
          "expired %lu\n",
          kTool, c.queues_accepted, c.queues_rejected, c.queue_limit, c.host_queue_limit, c.accept_failed,
          c.queues_closed, c.connect_timeouts, c.capsules, c.bad_capsules, c.capsules_held, c.rdma_reads, c.rdma_writes,
          c.send_with_invalidate, t.commands, t.errors, t.controllers_created, t.keep_alive_expired);
      std::fflush(stdout);
      transport.reset();  // every host disconnected before the target and the adapter go
    }
  }
  NdkCloseAdapter(adapter);
  return status;
}
