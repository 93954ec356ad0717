// The CPUs this process may use, `eal.lcores: auto`, and the machine the loader checks against (config.h).
#include <algorithm>
#include <fstream>
#include <string>

#include <sched.h>

#include "config/config.h"
#include "config/sections.h"

namespace uroce::config {

std::vector<unsigned> process_allowed_cpus() {
  std::vector<unsigned> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (unsigned cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  return cpus;
}

std::vector<unsigned> auto_engine_lcores(const std::vector<unsigned>& allowed_cpus) {
  if (allowed_cpus.empty()) return {0};
  if (allowed_cpus.size() == 1) return allowed_cpus;
  const std::size_t engines = std::min(allowed_cpus.size() - 1, kAutoMaxEngines);
  return {allowed_cpus.end() - static_cast<std::ptrdiff_t>(engines), allowed_cpus.end()};
}

Machine Machine::this_machine() {
  Machine machine;
  machine.allowed_cpus = process_allowed_cpus();
  std::ifstream present("/sys/devices/system/cpu/present");
  std::string line;
  if (std::getline(present, line)) {
    if (const auto ranges = detail::parse_cpu_ranges(line)) {
      for (const auto& [first, last] : *ranges) {
        if (last >= CPU_SETSIZE) break;  // a kernel list is sane; this only bounds the loop
        for (uint64_t cpu = first; cpu <= last; ++cpu) machine.present_cpus.push_back(static_cast<unsigned>(cpu));
      }
    }
  }
  return machine;
}

}  // namespace uroce::config
