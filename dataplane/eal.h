// DPDK EAL bring-up from the configuration.
//
// The EAL can be initialised once per process and never again, not even after rte_eal_cleanup(). init_eal()
// makes that explicit: the first call starts it, later calls succeed only if the running EAL can host the
// config (enough engine lcores), and a failed start is remembered and returned again.
//
// Lcores: engine i runs on EAL lcore id i, pinned to CPU config.eal.lcores[i], which must be one the process may
// run on. The main lcore is one more id, floating over the CPUs the process was allowed at start-up that no
// engine is pinned to (all of them if the engines take every one); it runs no engine. It is the control thread
// (bring-up, QP registration, tests), and threads it starts (the pcapng writer) inherit its floating affinity
// instead of being pinned onto an engine's core (dpdk-env.md §3). On the command line:
//   --lcores=0@<cpu0>,1@<cpu1>,...,<n>@(<allowed cpus no engine takes>) --main-lcore=<n>
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "dataplane/qpn.h"
#include "dataplane/status.h"

namespace uroce::dataplane {

enum class DeviceKind : uint8_t { kVdev, kPci, kRingLink };

struct DeviceSpec {
  DeviceKind kind = DeviceKind::kVdev;
  std::string name;  // vdev name ("net_memif0"), PCI address, or the ring link's name
  std::string args;  // after the first comma: driver arguments
};

// Splits a PortConfig::device string; an error names what is wrong with it.
[[nodiscard]] Result<DeviceSpec> parse_device(std::string_view device);

struct HugepageInfo {
  uint64_t free_bytes = 0;  // HugePages_Free x Hugepagesize
};
[[nodiscard]] HugepageInfo read_hugepage_info(const std::string& meminfo_path = "/proc/meminfo");

// What the engines' mempools, rings and EAL itself will take, in bytes (a generous estimate).
[[nodiscard]] uint64_t estimate_memory_bytes(const config::Config& config);

// The EAL arguments for `config` (argv[0] included). `allowed_cpus` is the process's CPU affinity, for the
// main lcore. Pure, so the choices (hugepages or not, devices, lcores) are unit-tested without starting EAL.
[[nodiscard]] Result<std::vector<std::string>> build_eal_args(const config::Config& config,
                                                              const HugepageInfo& hugepages,
                                                              const std::vector<unsigned>& allowed_cpus, int pid);

// Starts the EAL for `config` once per process (see above), then registers the /uroce telemetry commands.
[[nodiscard]] Status init_eal(const config::Config& config);
[[nodiscard]] bool eal_running() noexcept;
// The arguments the running EAL was started with (empty before).
[[nodiscard]] std::vector<std::string> eal_args();

// Runs `work` on the EAL interrupt thread (as an EAL alarm) and returns once it has run. PMDs do their control
// work on that thread (net_memif handles its peer's disconnect there), and the EAL calls that thread's callbacks
// one at a time, so `work` cannot overlap any of them. If the alarm cannot be set, or has not started after
// `timeout` (the interrupt thread is stuck), `work` runs on the calling thread instead. Control path only: it
// allocates and sleeps.
void run_on_interrupt_thread(const std::function<void()>& work,
                             std::chrono::milliseconds timeout = std::chrono::seconds(5));

// The EAL lcore id engine `engine` runs on.
constexpr unsigned engine_lcore(EngineId engine) noexcept { return engine; }

// For test binaries (from a gtest Environment): EAL with two engine lcores on the first two allowed CPUs (the
// same CPU twice on a one-CPU machine), --no-huge -m 512 --no-shconf, and the given vdevs. Ports open vdevs
// not listed here by hot-plugging them, so the list may be empty.
[[nodiscard]] Status init_eal_for_tests(const std::vector<std::string>& vdevs = {});
// The engine CPUs init_eal_for_tests() uses: put them in Config::eal.lcores.
[[nodiscard]] std::vector<unsigned> test_engine_cpus();

}  // namespace uroce::dataplane
