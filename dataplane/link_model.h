// Test-only bottleneck link on an engine's receive path (config.faults.bottleneck; off unless rate_mbps > 0).
//
// A model of the switch egress queue in front of one (engine, port) RX queue: a FIFO served at rate_mbps, holding at
// most buffer_bytes, marking ECN-capable packets RED-style by its depth. With it a loopback test can set up incast
// (N QPs into one port), a rate change (a new dataplane with another rate) or a buffer overflow without a switch.
//
// The engine applies it right after rte_eth_rx_burst and after the random faults (fault_injector.h): those stand for
// the wire into the switch, this for its egress queue, so the queue's drops and marks are the last thing a packet
// meets, and the fault injector's hold-and-release works unchanged. Per arriving packet, in order:
//   size    max(pkt_len, 60): a wire pads shorter frames to Ethernet's minimum, and charging at least 60 bytes
//           bounds the queue to buffer_bytes / 60 packets, the size of the ring allocated at start-up
//   drop    when occupancy + size > buffer_bytes (bottleneck_dropped). Occupancy is the bytes accepted and not yet
//           released; the packets already due (up to kMaxReleased) are released before arrivals are looked at
//   mark    from the occupancy q at arrival, without the packet itself: none while q <= ecn_kmin_bytes, with
//           probability ecn_pmax * (q - kmin) / (kmax - kmin) up to ecn_kmax_bytes, always above it (kmin == kmax:
//           a step). Only ECT(0)/ECT(1) IPv4 and IPv6 packets are marked, to CE (bottleneck_ecn_marked); the IPv4
//           header checksum is updated incrementally, so a header the fault injector corrupted stays detectably
//           corrupt. The ICRC masks the ECN bits, so it still holds. No marking when ecn_kmax_bytes is 0
//   depart  at max(arrival, previous departure) + size * 8 / rate, in TSC cycles. Service time is per byte in fixed
//           point rounded up, so the model is never faster than its rate, and never releases a packet early
// Frames that are not IP (ARP) queue like any other: they share the link. Packets leave in order, on the first call
// at or after their departure time, at most kMaxReleased per call; the engine calls on every poll, including empty
// RX bursts, and counts a non-empty queue as work so that the backoff idle policy does not sleep on it.
//
// Held mbufs go back to their pool only when they leave: on a ring link they are the sender's, so a buffer deeper
// than the sender's mempool backs the sender up (mbuf_alloc_failures) before anything is dropped here; on a NIC they
// are the RX pool's, which then runs dry (the port's imissed) first.
#pragma once

#include <cstdint>
#include <vector>

#include "config/config.h"
#include "dataplane/counters.h"
#include "dataplane/fault_injector.h"

struct rte_mbuf;

namespace uroce::dataplane {

class LinkModel {
 public:
  static constexpr uint16_t kMaxReleased = 64;  // per call: bounded work per poll
  static constexpr uint32_t kMinFrameBytes = 60;

  // `stream` separates the marking draws of the engine's queues, as the fault injector's.
  LinkModel(const config::BottleneckConfig& config, uint64_t tsc_hz, uint64_t seed, uint64_t stream,
            EngineCounters& counters);
  LinkModel(const LinkModel&) = delete;
  LinkModel& operator=(const LinkModel&) = delete;
  ~LinkModel();  // frees what is still queued

  // Moves the packets due at `now` (TSC) into out[0..kMaxReleased), oldest first, then queues or drops in[0..n).
  // Takes ownership of every input mbuf; returns how many it wrote to `out`.
  uint16_t process(rte_mbuf* const* in, uint16_t n, uint64_t now, rte_mbuf** out) noexcept;
  // Frees every queued packet (the engine's stop).
  void clear() noexcept;

  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
  [[nodiscard]] uint32_t queued_packets() const noexcept { return count_; }
  [[nodiscard]] uint64_t occupancy_bytes() const noexcept { return occupancy_; }
  // The TSC cycle at or after which the oldest queued packet leaves; only when !empty().
  [[nodiscard]] uint64_t next_departure() const noexcept { return slots_[head_].departure; }
  static constexpr unsigned kFractionBits = 16;  // of the fixed-point service time per byte

 private:
  struct Slot {
    rte_mbuf* mbuf;
    uint64_t departure;  // TSC cycle, rounded up
  };
  [[nodiscard]] static uint32_t size_of(const rte_mbuf* m) noexcept;
  [[nodiscard]] bool should_mark() noexcept;
  void enqueue(rte_mbuf* m, uint64_t now) noexcept;
  void report_occupancy() noexcept;

  std::vector<Slot> slots_;  // ring of buffer_bytes / kMinFrameBytes + 1: never full (see size_of)
  uint32_t head_ = 0;
  uint32_t count_ = 0;
  uint64_t occupancy_ = 0;
  uint64_t reported_occupancy_ = 0;  // what bottleneck_queue_bytes holds of it
  uint64_t tail_cycles_ = 0;         // departure of the last queued packet: whole cycles ...
  uint64_t tail_fraction_ = 0;       // ... and the fraction, in 1 / 2^kFractionBits of a cycle
  const uint64_t cycles_per_byte_;
  const uint64_t buffer_bytes_;
  const uint64_t kmin_;
  const uint64_t kmax_;
  const uint64_t pmax_;  // ecn_pmax << 32
  const bool marks_;
  SplitMix64 random_;
  EngineCounters& counters_;
};

}  // namespace uroce::dataplane
