// The CPUs this process may use, and `eal.lcores: auto` (config.h).
#include <algorithm>

#include <sched.h>

#include "config/config.h"

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

}  // namespace uroce::config
