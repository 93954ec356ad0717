// Registered memory as one engine sees it (ARCHITECTURE.md: the MR table is
// replicated per engine). Each engine owns its copy and changes it only on its own
// lcore, through control commands, so lookups on the datapath take no locks and no
// atomics.
//
// A token is index << 8 | key byte, as rxe forms them (rocev2.md §5): the index picks
// the slot in O(1), and the key byte changes on re-registration so a stale token
// from an earlier registration of the same slot never matches.
#pragma once

#include <cstdint>
#include <vector>

#include "proto/rc_types.h"

namespace uroce::dataplane {

struct MemoryRegion {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t access = 0;     // proto::Access bits
  uint32_t pd = 0;         // protection domain id; requests must come from a QP of the same PD
  uint32_t token = 0;      // both the local and the remote token
  bool remotely_invalidatable = false;  // fast-register MRs and type-2 windows (rocev2.md §5)
};

class MemoryTable {
 public:
  explicit MemoryTable(uint32_t capacity) : slots_(capacity) {}

  static constexpr uint32_t index_of(uint32_t token) noexcept { return token >> 8; }

  // Control path (on the owning engine).
  void insert(const MemoryRegion& r) noexcept {
    const uint32_t i = index_of(r.token);
    if (i < slots_.size()) slots_[i] = {r, true};
  }
  void erase(uint32_t token) noexcept {
    Slot* s = find(token);
    if (s != nullptr) s->valid = false;
  }

  // Datapath. The memory [addr, addr + length) if `token` names a valid region of
  // PD `pd` that grants all of `access` over it; otherwise nullptr. Zero-length
  // accesses are never checked (IBTA C9-88), so callers skip them.
  [[nodiscard]] uint8_t* resolve(uint32_t token, uint64_t addr, uint32_t length, uint32_t access,
                                 uint32_t pd) const noexcept {
    const Slot* s = find(token);
    if (s == nullptr || s->region.pd != pd || (s->region.access & access) != access) return nullptr;
    const MemoryRegion& r = s->region;
    // Written to avoid overflow: addr - r.addr cannot wrap once addr >= r.addr.
    if (addr < r.addr || addr - r.addr > r.length || length > r.length - (addr - r.addr)) return nullptr;
    return reinterpret_cast<uint8_t*>(addr);
  }

  // Send with Invalidate: invalidates `token` if it names a remotely invalidatable region of `pd`.
  bool invalidate_remote(uint32_t token, uint32_t pd) noexcept {
    Slot* s = find(token);
    if (s == nullptr || s->region.pd != pd || !s->region.remotely_invalidatable) return false;
    s->valid = false;
    return true;
  }

 private:
  struct Slot {
    MemoryRegion region;
    bool valid = false;
  };
  [[nodiscard]] const Slot* find(uint32_t token) const noexcept {
    const uint32_t i = index_of(token);
    if (i >= slots_.size() || !slots_[i].valid || slots_[i].region.token != token) return nullptr;
    return &slots_[i];
  }
  [[nodiscard]] Slot* find(uint32_t token) noexcept {
    return const_cast<Slot*>(static_cast<const MemoryTable*>(this)->find(token));
  }

  std::vector<Slot> slots_;
};

}  // namespace uroce::dataplane
