// Test-only fault injection on an engine's receive path (config.faults; off unless a probability is non-zero).
//
// Applied to each RX burst of one (engine, port) queue, right after rte_eth_rx_burst, so every lossy hop is
// counted once: a two-engine loopback sees the configured rates once per direction. Per packet, in order:
//   loss       drop it
//   corrupt    flip one random bit at or after the IP header (the IP checksum or the ICRC catches most; bits
//              in fields the ICRC masks and nothing else checks, like the UDP checksum, go unnoticed, as on a wire)
//   duplicate  deliver a copy as well (rte_pktmbuf_copy from the engine's pool; an empty pool skips it)
//   reorder    hold the packet back and release it after the next 1-3 packets, or at the first empty poll
// The PRNG is SplitMix64 seeded from config.faults.seed and the queue, so a run is repeatable.
#pragma once

#include <cstdint>

#include "config/config.h"
#include "dataplane/counters.h"

struct rte_mbuf;
struct rte_mempool;

namespace uroce::dataplane {

// SplitMix64 (Steele, Lea, Flood 2014): one add and three xor-shift-multiplies per draw, full period 2^64.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) noexcept : state_(seed) {}
  uint64_t next() noexcept {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // A probability as a threshold on next(): P(next() < threshold) = p.
  static uint64_t threshold(double p) noexcept;

 private:
  uint64_t state_;
};

class FaultInjector {
 public:
  // Each input packet yields at most three outputs (itself, a duplicate, a released held packet).
  static constexpr unsigned kOutputsPerInput = 3;

  FaultInjector(const config::FaultConfig& faults, uint64_t stream, rte_mempool* pool,
                EngineCounters& counters) noexcept;
  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;
  ~FaultInjector();

  // Applies faults to in[0..n) and writes what survives to `out` (room for kOutputsPerInput * n); returns
  // how many. Takes ownership of every input mbuf.
  uint16_t apply(rte_mbuf* const* in, uint16_t n, rte_mbuf** out) noexcept;
  // Releases the held packet into out[0] (the queue was empty this time); returns 0 or 1.
  uint16_t release_held(rte_mbuf** out) noexcept;

 private:
  [[nodiscard]] bool draw(uint64_t threshold) noexcept { return threshold != 0 && random_.next() < threshold; }
  void corrupt(rte_mbuf* m) noexcept;

  SplitMix64 random_;
  uint64_t loss_;
  uint64_t corrupt_;
  uint64_t duplicate_;
  uint64_t reorder_;
  rte_mempool* pool_;
  EngineCounters& counters_;
  rte_mbuf* held_ = nullptr;
  unsigned held_countdown_ = 0;  // packets still to overtake the held one
};

}  // namespace uroce::dataplane
