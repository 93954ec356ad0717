#include "dataplane/eal.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <rte_alarm.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <unistd.h>

#include "dataplane/telemetry.h"

namespace uroce::dataplane {

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
// EAL's own memzones, ethdev queues, the telemetry and interrupt threads' buffers: measured well under this.
constexpr uint64_t kEalBaselineBytes = 48 * kMiB;
// rte_mbuf (two cache lines) plus the mempool object header and trailer.
constexpr uint64_t kMbufOverheadBytes = 128 + 64;

bool looks_like_pci_address(std::string_view s) {
  // [domain:]bus:device.function, hex digits: "0000:3b:00.0" or "3b:00.0".
  const auto colon = s.rfind(':');
  const auto dot = s.rfind('.');
  if (colon == std::string_view::npos || dot == std::string_view::npos || dot < colon) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) || c == ':' || c == '.'; });
}

std::string cpu_set_string(const std::vector<unsigned>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::string join(const std::vector<std::string>& args) {
  std::string out;
  for (const auto& a : args) out += (out.empty() ? "" : " ") + a;
  return out;
}

// The process-wide EAL state: the EAL exists at most once per process.
struct EalState {
  std::mutex mutex;
  bool running = false;
  std::optional<std::string> failure;  // set when rte_eal_init failed: it cannot be retried
  std::vector<std::string> args;
  std::vector<char*> argv;  // points into `args`; EAL may keep pointers into argv for the process lifetime
  unsigned engine_lcores = 0;
};

EalState& eal_state() {
  static EalState state;
  return state;
}

}  // namespace

Result<DeviceSpec> parse_device(std::string_view device) {
  DeviceSpec spec;
  const auto comma = device.find(',');
  spec.name = std::string(device.substr(0, comma));
  if (comma != std::string_view::npos) spec.args = std::string(device.substr(comma + 1));
  if (spec.name.rfind("ring:", 0) == 0) {
    spec.kind = DeviceKind::kRingLink;
    spec.name = spec.name.substr(5);
    if (spec.name.empty() || !spec.args.empty())
      return Status::error("device '" + std::string(device) + "': a ring link is 'ring:<link name>' with no arguments");
  } else if (spec.name.rfind("net_", 0) == 0) {
    spec.kind = DeviceKind::kVdev;
  } else if (looks_like_pci_address(spec.name)) {
    spec.kind = DeviceKind::kPci;
  } else {
    return Status::error("device '" + std::string(device) +
                         "': expected a DPDK vdev 'net_<driver><n>[,args]', a PCI address '0000:3b:00.0[,args]' "
                         "or 'ring:<link>'");
  }
  return spec;
}

HugepageInfo read_hugepage_info(const std::string& meminfo_path) {
  std::ifstream in(meminfo_path);
  uint64_t free_pages = 0;
  uint64_t page_kib = 0;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    uint64_t value = 0;
    fields >> key >> value;
    if (key == "HugePages_Free:") free_pages = value;
    if (key == "Hugepagesize:") page_kib = value;
  }
  return HugepageInfo{free_pages * page_kib * 1024};
}

uint64_t estimate_memory_bytes(const config::Config& config) {
  const uint64_t engines = config.eal.lcores.size();
  const config::EngineConfig& e = config.engine;
  const uint64_t pool_bytes =
      engines * (uint64_t{e.mbufs_per_engine} + e.mbuf_cache) * (kMbufOverheadBytes + e.mbuf_data_room);
  const uint64_t redirect_bytes = engines * engines * uint64_t{e.redirect_ring_size} * sizeof(void*);
  uint64_t port_bytes = 0;
  for (const auto& p : config.ports)
    port_bytes += engines * (uint64_t{p.rx_descriptors} + p.tx_descriptors) * 64;  // descriptors or ring slots
  return pool_bytes + redirect_bytes + port_bytes + kEalBaselineBytes;
}

Result<std::vector<std::string>> build_eal_args(const config::Config& config, const HugepageInfo& hugepages,
                                                const std::vector<unsigned>& allowed_cpus, int pid) {
  const auto& lcores = config.eal.lcores;
  if (lcores.empty()) return Status::error("eal.lcores: at least one engine lcore is needed");
  if (lcores.size() > kMaxEngines) {
    return Status::error("eal.lcores: at most " + std::to_string(kMaxEngines) +
                         " engines (the QPN carries 4 bits of engine)");
  }
  if (allowed_cpus.empty()) return Status::error("cannot read this process's CPU affinity");

  std::vector<std::string> args = {"uroce"};
  // Engines on lcore ids 0..n-1 pinned to their CPUs; the control (main) lcore floats (see eal.h).
  std::string lcore_map;
  for (std::size_t i = 0; i < lcores.size(); ++i) {
    // sched_setaffinity would pin an engine outside a taskset or cpuset restriction: refuse instead.
    if (std::find(allowed_cpus.begin(), allowed_cpus.end(), lcores[i]) == allowed_cpus.end()) {
      return Status::error("eal.lcores[" + std::to_string(i) + "]: CPU " + std::to_string(lcores[i]) +
                           " is not one this process may run on (" + cpu_set_string(allowed_cpus) +
                           "); name one of those, or use 'auto'");
    }
    lcore_map += std::to_string(i) + "@" + std::to_string(lcores[i]) + ",";
  }
  // The application threads float over the allowed CPUs that no engine polls, or over all of them if the engines
  // take every one.
  std::vector<unsigned> application_cpus;
  for (unsigned cpu : allowed_cpus)
    if (std::find(lcores.begin(), lcores.end(), cpu) == lcores.end()) application_cpus.push_back(cpu);
  if (application_cpus.empty()) application_cpus = allowed_cpus;
  const unsigned main_lcore = static_cast<unsigned>(lcores.size());
  lcore_map += std::to_string(main_lcore) + "@(" + cpu_set_string(application_cpus) + ")";
  args.push_back("--lcores=" + lcore_map);
  args.push_back("--main-lcore=" + std::to_string(main_lcore));

  args.push_back("--file-prefix=" +
                 (config.eal.file_prefix.empty() ? "uroce-" + std::to_string(pid) : config.eal.file_prefix));
  args.push_back("--iova-mode=va");
  args.push_back("--log-level=warning");

  const uint64_t needed = estimate_memory_bytes(config);
  const auto needed_mb = std::to_string((needed + kMiB - 1) / kMiB);
  const bool enough_hugepages = hugepages.free_bytes >= needed;
  bool use_hugepages = false;
  switch (config.eal.hugepages) {
    case config::HugePages::kOn:
      if (!enough_hugepages) {
        return Status::error("eal.hugepages is 'on' but only " + std::to_string(hugepages.free_bytes / kMiB) +
                             " MB of hugepages are free and the pools need about " + needed_mb +
                             " MB (as root: echo 1024 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages)");
      }
      use_hugepages = true;
      break;
    case config::HugePages::kAuto:
      use_hugepages = enough_hugepages;
      break;
    case config::HugePages::kOff:
      break;
  }
  if (use_hugepages) {
    // memfd-backed hugepages: no hugetlbfs mount needed and no files left behind (dpdk-env.md §3).
    args.push_back("--in-memory");
  } else {
    if (uint64_t{config.eal.memory_mb} * kMiB < needed) {
      return Status::error("eal.memory_mb is " + std::to_string(config.eal.memory_mb) + " but the pools need about " +
                           needed_mb + " MB without hugepages (allow 2-3x for fragmentation)");
    }
    // --in-memory is rejected with --no-huge; --no-shconf likewise leaves no runtime files.
    args.insert(args.end(), {"--no-huge", "-m", std::to_string(config.eal.memory_mb), "--no-shconf"});
  }

  bool any_pci = false;
  for (std::size_t i = 0; i < config.ports.size(); ++i) {
    auto spec = parse_device(config.ports[i].device);
    if (!spec.ok()) return Status::error("ports[" + std::to_string(i) + "]." + spec.error());
    const std::string& device = config.ports[i].device;
    if (spec->kind == DeviceKind::kPci) {
      any_pci = true;
      args.push_back("-a");
      args.push_back(device);
    } else if (spec->kind == DeviceKind::kVdev) {
      args.push_back("--vdev=" + device);
    }
  }
  if (!any_pci) args.push_back("--no-pci");
  args.insert(args.end(), config.eal.extra_args.begin(), config.eal.extra_args.end());
  return args;
}

Status init_eal(const config::Config& config) {
  EalState& state = eal_state();
  const std::lock_guard lock(state.mutex);
  if (state.failure) return Status::error(*state.failure);
  if (state.running) {
    if (config.eal.lcores.size() > state.engine_lcores) {
      return Status::error("the EAL is already running with " + std::to_string(state.engine_lcores) +
                           " engine lcores and this config needs " + std::to_string(config.eal.lcores.size()) +
                           "; the EAL can be initialised only once per process");
    }
    return {};
  }
  auto args = build_eal_args(config, read_hugepage_info(), config::process_allowed_cpus(), getpid());
  if (!args.ok()) return args.status();
  state.args = std::move(args.value());
  state.argv.clear();
  for (auto& a : state.args) state.argv.push_back(a.data());
  state.argv.push_back(nullptr);
  if (rte_eal_init(static_cast<int>(state.args.size()), state.argv.data()) < 0) {
    state.failure = "rte_eal_init failed: " + std::string(rte_strerror(rte_errno)) + " (see the EAL messages above; " +
                    "arguments: " + join(state.args) + "). The EAL cannot be retried in this process.";
    return Status::error(*state.failure);
  }
  state.running = true;
  state.engine_lcores = static_cast<unsigned>(config.eal.lcores.size());
  if (Status s = register_telemetry_commands(); !s.ok()) return s;
  return {};
}

bool eal_running() noexcept {
  EalState& state = eal_state();
  const std::lock_guard lock(state.mutex);
  return state.running;
}

std::vector<std::string> eal_args() {
  EalState& state = eal_state();
  const std::lock_guard lock(state.mutex);
  return state.running ? state.args : std::vector<std::string>{};
}

std::vector<unsigned> test_engine_cpus() {
  const auto cpus = config::process_allowed_cpus();
  if (cpus.empty()) return {0, 0};
  return {cpus[0], cpus.size() > 1 ? cpus[1] : cpus[0]};
}

Status init_eal_for_tests(const std::vector<std::string>& vdevs) {
  config::Config config;
  config.eal.lcores = test_engine_cpus();
  config.eal.hugepages = config::HugePages::kOff;
  config.eal.memory_mb = 512;
  config.eal.file_prefix = "uroce-test-" + std::to_string(getpid());
  for (const auto& vdev : vdevs) {
    config::PortConfig port;
    port.name = port.device = vdev;
    config.ports.push_back(port);
  }
  config.engine.mbufs_per_engine = 4095;  // only for the memory estimate; each test sizes its own pools
  return init_eal(config);
}

namespace {

struct InterruptThreadCall {
  const std::function<void()>* work;
  std::atomic<bool> done{false};
};

void run_interrupt_thread_call(void* arg) {
  auto* call = static_cast<InterruptThreadCall*>(arg);
  (*call->work)();
  // Release: the waiter reads what `work` wrote once it sees `done`. No notify: the waiter may return, and take
  // `call` off its stack, the moment this store lands.
  call->done.store(true, std::memory_order_release);
}

}  // namespace

void run_on_interrupt_thread(const std::function<void()>& work, std::chrono::milliseconds timeout) {
  InterruptThreadCall call{&work};
  if (rte_eal_alarm_set(1, run_interrupt_thread_call, &call) != 0) {
    work();
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!call.done.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (call.done.load(std::memory_order_acquire)) return;
  // rte_eal_alarm_cancel() removes an alarm that has not started and waits for one that is running, so after it
  // either `work` has run there or it never will.
  (void)rte_eal_alarm_cancel(run_interrupt_thread_call, &call);
  if (!call.done.load(std::memory_order_acquire)) work();
}

}  // namespace uroce::dataplane
