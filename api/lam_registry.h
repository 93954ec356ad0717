// The buffers NdkBuildLam has mapped and NdkReleaseLam has not yet released (ndkpi.md §9.1): the memory an SGE that
// carries a PD's privileged token may name (§9.3).
//
// The privileged token's memory-table slot covers every address of the process, so the engines would place into
// or read from whatever a LogicalAddress says, and an address that is not mapped (or is read-only under a receive)
// would crash an engine. A post checks each such SGE here first: it must lie inside one mapped buffer, and one whose
// pages may be written where the engines will write. NdkBuildLam checked those pages (cpu_access.h).
//
// Control path and posting threads; a shared lock, held for a short scan. Only posts that use the privileged token
// look here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <utility>

namespace uroce::ndk::detail {

class LamRegistry {
 public:
  // A buffer [start, end) was mapped; `writable`: its pages may be written too.
  void add(uint64_t start, uint64_t end, bool writable) {
    const std::unique_lock lock(mutex_);
    Mapping& m = mappings_[{start, end}];
    ++m.count;
    m.writable = writable;
    longest_ = std::max(longest_, end - start);
  }
  // One mapping of [start, end) was released; false if there was none.
  bool remove(uint64_t start, uint64_t end) {
    const std::unique_lock lock(mutex_);
    const auto it = mappings_.find({start, end});
    if (it == mappings_.end()) return false;
    if (--it->second.count == 0) mappings_.erase(it);
    return true;
  }
  // Whether [address, address + length) lies inside one mapped buffer (a writable one if `write`). length > 0.
  [[nodiscard]] bool covers(uint64_t address, uint64_t length, bool write) const {
    if (address + length < address) return false;
    const uint64_t end = address + length;
    const std::shared_lock lock(mutex_);
    // Candidates start at or before `address`, and no earlier than `end - longest_` (none is longer): scan those,
    // latest start first.
    auto it = mappings_.upper_bound({address, UINT64_MAX});
    while (it != mappings_.begin()) {
      --it;
      const auto [start, stop] = it->first;
      if (end - start > longest_) return false;
      if (stop >= end && (!write || it->second.writable)) return true;
    }
    return false;
  }

 private:
  struct Mapping {
    uint32_t count = 0;  // NdkBuildLam calls for this range not yet released
    bool writable = false;
  };
  mutable std::shared_mutex mutex_;
  std::map<std::pair<uint64_t, uint64_t>, Mapping> mappings_;  // [start, end)
  uint64_t longest_ = 0;                                       // the longest range ever mapped
};

}  // namespace uroce::ndk::detail
