// Typed pointer transfer through rte_ring, safe under strict aliasing.
//
// rte_ring's inline element copy reads and writes the caller's object table as uint64_t
// (rte_ring_elem_pvt.h), not as the pointer type the caller declared it with. Under type-based alias analysis
// the compiler may then assume a `Command* table[]` was never written by the dequeue: clang 14 -O3 miscompiled
// the engine's mailbox dequeue exactly so (it called through a stale register). These wrappers hand the ring
// a uint64_t table and convert each element explicitly. Use them for every rte_ring call in uroce.
#pragma once

#include <cstdint>

#include <rte_ring.h>

namespace uroce::dataplane {

inline constexpr unsigned kMaxRingBurst = 64;

// Up to min(n, kMaxRingBurst) pointers; the ring must be single-consumer (or the caller its only consumer).
template <class T>
unsigned ring_sc_dequeue_burst(rte_ring* ring, T** out, unsigned n) noexcept {
  uint64_t raw[kMaxRingBurst];
  const unsigned got =
      rte_ring_sc_dequeue_burst_elem(ring, raw, sizeof(uint64_t), n < kMaxRingBurst ? n : kMaxRingBurst, nullptr);
  for (unsigned i = 0; i < got; ++i) out[i] = reinterpret_cast<T*>(static_cast<uintptr_t>(raw[i]));
  return got;
}

// Enqueues up to min(n, kMaxRingBurst) pointers; returns how many went in (the rest are still the caller's).
template <class T>
unsigned ring_sp_enqueue_burst(rte_ring* ring, T* const* in, unsigned n) noexcept {
  uint64_t raw[kMaxRingBurst];
  if (n > kMaxRingBurst) n = kMaxRingBurst;
  for (unsigned i = 0; i < n; ++i) raw[i] = reinterpret_cast<uintptr_t>(in[i]);
  return rte_ring_sp_enqueue_burst_elem(ring, raw, sizeof(uint64_t), n, nullptr);
}

template <class T>
bool ring_sp_enqueue(rte_ring* ring, T* object) noexcept {
  return ring_sp_enqueue_burst(ring, &object, 1) == 1;
}

// For multi-producer rings (several application threads ringing one engine's doorbell queue).
template <class T>
bool ring_mp_enqueue(rte_ring* ring, T* object) noexcept {
  const uint64_t raw = reinterpret_cast<uintptr_t>(object);
  return rte_ring_mp_enqueue_bulk_elem(ring, &raw, sizeof(uint64_t), 1, nullptr) == 1;
}

}  // namespace uroce::dataplane
