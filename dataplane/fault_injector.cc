#include "dataplane/fault_injector.h"

#include <cmath>

#include <rte_mbuf.h>

#include "proto/headers.h"

namespace uroce::dataplane {

uint64_t SplitMix64::threshold(double p) noexcept {
  if (!(p > 0)) return 0;  // also NaN
  if (p >= 1) return UINT64_MAX;
  return static_cast<uint64_t>(std::ldexp(p, 64));
}

FaultInjector::FaultInjector(const config::FaultConfig& faults, uint64_t stream, rte_mempool* pool,
                             EngineCounters& counters) noexcept
    : random_(faults.seed ^ (stream * 0xD1B54A32D192ED03ull)),
      loss_(SplitMix64::threshold(faults.loss)),
      corrupt_(SplitMix64::threshold(faults.corrupt)),
      duplicate_(SplitMix64::threshold(faults.duplicate)),
      reorder_(SplitMix64::threshold(faults.reorder)),
      pool_(pool),
      counters_(counters) {}

FaultInjector::~FaultInjector() { rte_pktmbuf_free(held_); }

void FaultInjector::corrupt(rte_mbuf* m) noexcept {
  auto* const data = rte_pktmbuf_mtod(m, uint8_t*);
  const uint32_t length = m->data_len;  // first segment only: where the headers are
  uint32_t l3 = proto::Eth::kSize;
  if (length >= proto::Eth::kSize && (uint32_t{data[12]} << 8 | data[13]) == proto::kEtherTypeVlan)
    l3 += proto::Vlan::kSize;
  if (length <= l3) return;
  const uint64_t r = random_.next();
  const uint32_t byte = l3 + static_cast<uint32_t>((r >> 3) % (length - l3));
  data[byte] ^= static_cast<uint8_t>(1u << (r & 7));
  // Damage after the NIC looked: its checksum verdict (engine.cc, dispatch) no longer describes these bytes.
  m->ol_flags &= ~RTE_MBUF_F_RX_IP_CKSUM_MASK;
  counters_.fault_corrupted.add();
}

uint16_t FaultInjector::apply(rte_mbuf* const* in, uint16_t n, rte_mbuf** out) noexcept {
  uint16_t count = 0;
  for (uint16_t i = 0; i < n; ++i) {
    rte_mbuf* const m = in[i];
    if (draw(loss_)) {
      rte_pktmbuf_free(m);
      counters_.fault_dropped.add();
      continue;
    }
    if (draw(corrupt_)) corrupt(m);
    if (draw(duplicate_)) {
      if (rte_mbuf* copy = rte_pktmbuf_copy(m, pool_, 0, UINT32_MAX); copy != nullptr) {
        out[count++] = copy;
        counters_.fault_duplicated.add();
      } else {
        counters_.mbuf_alloc_failures.add();
      }
    }
    if (held_ == nullptr && draw(reorder_)) {
      held_ = m;
      held_countdown_ = 1 + static_cast<unsigned>(random_.next() % 3);
      counters_.fault_reordered.add();
      continue;
    }
    out[count++] = m;
    if (held_ != nullptr && --held_countdown_ == 0) {
      out[count++] = held_;
      held_ = nullptr;
    }
  }
  return count;
}

uint16_t FaultInjector::release_held(rte_mbuf** out) noexcept {
  if (held_ == nullptr) return 0;
  out[0] = held_;
  held_ = nullptr;
  return 1;
}

}  // namespace uroce::dataplane
