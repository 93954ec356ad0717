// The QPN encodes the engine that owns the QP (ARCHITECTURE.md "Steering").
//
//   QPN (24 bits) = engine (top 4 bits) << 20 | local index (low 20 bits)
//
// Top bits rather than low bits so that QPN 1, the GSI QP, naturally belongs to engine 0 (local index 1), and
// QPNs on engine 0 look like the small numbers rxe and mlx5 hand out. 16 engines x 2^20 QPNs each.
//
//   local index = generation << log2(table size) | slot
//
// An engine finds a QP's endpoint in a dense table of a power-of-two number of slots (at least
// engine.max_qps_per_engine) indexed by the local index's low bits, and checks the whole QPN against the one
// registered there: no hashing on the receive path. The bits above the slot count the slot's reuses, so a slot
// serves again at once under a new number while its last QPN waits out its time-wait (rc_transport.h): a peer's CM
// may still hold that number and would reject a new connection from it as stale. A table of 4096 slots gives each
// slot 256 numbers.
#pragma once

#include <bit>
#include <cstdint>

#include "proto/types.h"

namespace uroce::dataplane {

using EngineId = uint16_t;
using PortIndex = uint16_t;  // position in Config::ports (not the DPDK port id)

inline constexpr unsigned kQpnEngineShift = 20;
inline constexpr unsigned kMaxEngines = 1u << (24 - kQpnEngineShift);
inline constexpr uint32_t kQpnLocalMask = (1u << kQpnEngineShift) - 1;

constexpr EngineId engine_of(proto::Qpn qpn) noexcept { return static_cast<EngineId>(qpn.value() >> kQpnEngineShift); }
constexpr uint32_t local_index_of(proto::Qpn qpn) noexcept { return qpn.value() & kQpnLocalMask; }
// Precondition: engine < kMaxEngines, local_index <= kQpnLocalMask.
constexpr proto::Qpn make_qpn(EngineId engine, uint32_t local_index) noexcept {
  return proto::Qpn{static_cast<uint32_t>(engine) << kQpnEngineShift | (local_index & kQpnLocalMask)};
}

// The QP table's size for engine.max_qps_per_engine (2..2^20 - 1), and a QPN's slot in it.
constexpr uint32_t qp_table_size(uint32_t max_qps_per_engine) noexcept { return std::bit_ceil(max_qps_per_engine); }
constexpr uint32_t qp_slot_of(proto::Qpn qpn, uint32_t table_size) noexcept {
  return local_index_of(qpn) & (table_size - 1);
}

static_assert(engine_of(proto::kGsiQpn) == 0 && local_index_of(proto::kGsiQpn) == 1, "GSI QP belongs to engine 0");
static_assert(engine_of(make_qpn(3, 42)) == 3 && local_index_of(make_qpn(3, 42)) == 42);
// The multicast QPN 0xFFFFFF has local index 0xFFFFF, which the RC transport never hands out.
static_assert(local_index_of(proto::Qpn{0xFFFFFF}) == kQpnLocalMask);
static_assert(qp_table_size(4000) == 4096 && qp_slot_of(make_qpn(2, 3 << 12 | 42), 4096) == 42);

}  // namespace uroce::dataplane
