#include "dataplane/link_model.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include <rte_mbuf.h>

#include "proto/headers.h"

namespace uroce::dataplane {

namespace {

constexpr uint8_t kEct1 = 0b01;  // RFC 3168 §5
constexpr uint8_t kEct0 = 0b10;
constexpr uint8_t kCe = 0b11;
constexpr uint64_t kFractionMask = (uint64_t{1} << LinkModel::kFractionBits) - 1;

// TSC cycles per byte at `rate_mbps`, in fixed point, rounded up: the model may be slower than its rate by a part
// in 2^16 of a cycle per byte, never faster.
uint64_t cycles_per_byte_fixed(uint64_t tsc_hz, uint32_t rate_mbps) {
  const uint64_t bits_per_second = uint64_t{std::max<uint32_t>(rate_mbps, 1)} * 1'000'000;
  const uint64_t numerator = (tsc_hz * 8) << LinkModel::kFractionBits;  // < 2^64 for any TSC below 35 THz
  return std::max<uint64_t>((numerator + bits_per_second - 1) / bits_per_second, 1);
}

// Sets CE in the IP header of an ECT(0) or ECT(1) packet. False, and nothing changed, for a Not-ECT or CE packet,
// a frame that is not IP, or one too short to hold its IP header.
bool mark_congestion_experienced(rte_mbuf* m) noexcept {
  auto* const frame = rte_pktmbuf_mtod(m, uint8_t*);
  const uint32_t length = m->data_len;  // first segment: where the headers are
  if (length < proto::Eth::kSize) return false;
  std::size_t l3 = proto::Eth::kSize;
  uint16_t ether_type = proto::EthView{frame}.get(proto::Eth::ether_type);
  if (ether_type == proto::kEtherTypeVlan) {
    if (length < l3 + proto::Vlan::kSize) return false;
    ether_type = proto::VlanView{frame + l3}.get(proto::Vlan::ether_type);
    l3 += proto::Vlan::kSize;
  }
  if (ether_type == proto::kEtherTypeIpv4) {
    if (length < l3 + proto::Ipv4::kSize) return false;
    const proto::MutView<proto::Ipv4> ip{frame + l3};
    const uint8_t ecn = ip.get(proto::Ipv4::ecn);
    if (ecn != kEct0 && ecn != kEct1) return false;
    // RFC 1624 eqn. 3, HC' = ~(~HC + ~m + m') over the 16-bit word m holding the TOS: a checksum that was wrong
    // (a corrupted header) stays wrong, where recomputing it would hide the corruption.
    static constexpr proto::WireField<uint16_t, 0, 2> kFirstWord{};
    const uint16_t before = kFirstWord.get(ip.data());
    ip.set(proto::Ipv4::ecn, kCe);
    const uint16_t after = kFirstWord.get(ip.data());
    uint32_t sum =
        uint32_t{static_cast<uint16_t>(~ip.get(proto::Ipv4::checksum))} + static_cast<uint16_t>(~before) + after;
    sum = (sum & 0xFFFF) + (sum >> 16);
    sum = (sum & 0xFFFF) + (sum >> 16);
    ip.set(proto::Ipv4::checksum, static_cast<uint16_t>(~sum));
    return true;
  }
  if (ether_type == proto::kEtherTypeIpv6) {
    if (length < l3 + proto::Ipv6::kSize) return false;
    const proto::MutView<proto::Ipv6> ip{frame + l3};
    const uint8_t traffic_class = ip.get(proto::Ipv6::traffic_class);
    const uint8_t ecn = traffic_class & 0b11;  // the traffic class's low bits, as IPv4's TOS (RFC 3168 §5)
    if (ecn != kEct0 && ecn != kEct1) return false;
    ip.set(proto::Ipv6::traffic_class, static_cast<uint8_t>(traffic_class | kCe));  // IPv6 has no header checksum
    return true;
  }
  return false;
}

}  // namespace

LinkModel::LinkModel(const config::BottleneckConfig& config, uint64_t tsc_hz, uint64_t seed, uint64_t stream,
                     EngineCounters& counters)
    : slots_(config.buffer_bytes / kMinFrameBytes + 1),
      cycles_per_byte_(cycles_per_byte_fixed(tsc_hz, config.rate_mbps)),
      buffer_bytes_(config.buffer_bytes),
      kmin_(config.ecn_kmin_bytes),
      kmax_(config.ecn_kmax_bytes),
      pmax_(static_cast<uint64_t>(std::ldexp(std::clamp(config.ecn_pmax, 0.0, 1.0), 32))),
      marks_(config.ecn_kmax_bytes > 0),
      random_(seed ^ ((stream + 1) * 0x9E3779B97F4A7C15ull)),
      counters_(counters) {
  // should_mark() multiplies a 32-bit draw by kmax - kmin and pmax (<= 2^32) by a depth below kmax: the config
  // caps both at 64 MiB, far below the 2^32 that would overflow.
  assert(kmin_ <= kmax_ && kmax_ < (uint64_t{1} << 32));
}

LinkModel::~LinkModel() { clear(); }

void LinkModel::clear() noexcept {
  for (; count_ != 0; --count_) {
    rte_pktmbuf_free(slots_[head_].mbuf);
    if (++head_ == slots_.size()) head_ = 0;
  }
  occupancy_ = 0;
  report_occupancy();
}

uint32_t LinkModel::size_of(const rte_mbuf* m) noexcept { return std::max(m->pkt_len, kMinFrameBytes); }

// RED on the depth the packet finds (it is not counted in it).
bool LinkModel::should_mark() noexcept {
  if (occupancy_ <= kmin_) return false;
  if (occupancy_ > kmax_) return true;
  // P = pmax * (q - kmin) / (kmax - kmin), as draw / 2^32 < pmax / 2^32 * (q - kmin) / (kmax - kmin) in integers.
  return (random_.next() >> 32) * (kmax_ - kmin_) < pmax_ * (occupancy_ - kmin_);
}

void LinkModel::enqueue(rte_mbuf* m, uint64_t now) noexcept {
  const uint32_t size = size_of(m);
  if (occupancy_ + size > buffer_bytes_) {
    rte_pktmbuf_free(m);
    counters_.bottleneck_dropped.add();
    return;
  }
  if (marks_ && should_mark() && mark_congestion_experienced(m)) counters_.bottleneck_ecn_marked.add();
  // The link was idle since the last departure: this packet starts service on arrival.
  if (now > tail_cycles_) {
    tail_cycles_ = now;
    tail_fraction_ = 0;
  }
  // size * cycles_per_byte_ stays below 2^64 for any frame (< 2^32 bytes) at >= 1 Mb/s on a TSC below 8 GHz.
  const uint64_t service = tail_fraction_ + uint64_t{size} * cycles_per_byte_;
  tail_cycles_ += service >> kFractionBits;
  tail_fraction_ = service & kFractionMask;
  uint32_t tail = head_ + count_;
  if (tail >= slots_.size()) tail -= static_cast<uint32_t>(slots_.size());
  // Never full: every queued packet holds >= kMinFrameBytes of the buffer, and the ring has a slot more than that.
  slots_[tail] = Slot{m, tail_cycles_ + (tail_fraction_ != 0 ? 1 : 0)};
  ++count_;
  occupancy_ += size;
  const uint64_t peak = counters_.bottleneck_queue_peak_bytes.read();  // this engine is its only writer
  if (occupancy_ > peak) counters_.bottleneck_queue_peak_bytes.add(occupancy_ - peak);
}

uint16_t LinkModel::process(rte_mbuf* const* in, uint16_t n, uint64_t now, rte_mbuf** out) noexcept {
  // Departures first: the arrivals below then see the queue as it is at `now`.
  uint16_t released = 0;
  while (count_ != 0 && released < kMaxReleased) {
    const Slot& s = slots_[head_];
    if (s.departure > now) break;
    occupancy_ -= size_of(s.mbuf);
    out[released++] = s.mbuf;
    if (++head_ == slots_.size()) head_ = 0;
    --count_;
  }
  if (released != 0) counters_.bottleneck_forwarded.add(released);
  for (uint16_t i = 0; i < n; ++i) enqueue(in[i], now);
  report_occupancy();
  return released;
}

// bottleneck_queue_bytes is a gauge kept in a counter: each model adds the change in its own occupancy since it
// last reported (modulo 2^64, so a fall adds its two's complement), and the counter reads as the bytes the engine's
// queues hold now.
void LinkModel::report_occupancy() noexcept {
  if (occupancy_ != reported_occupancy_) counters_.bottleneck_queue_bytes.add(occupancy_ - reported_occupancy_);
  reported_occupancy_ = occupancy_;
}

}  // namespace uroce::dataplane
