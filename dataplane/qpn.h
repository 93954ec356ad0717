// The QPN encodes the engine that owns the QP (ARCHITECTURE.md "Steering").
//
//   QPN (24 bits) = engine (top 4 bits) << 20 | local index (low 20 bits)
//
// Top bits rather than low bits so that QPN 1, the GSI QP, naturally belongs to engine 0 (local index 1), and
// QPNs on engine 0 look like the small numbers rxe and mlx5 hand out. An engine finds a QP's endpoint by
// indexing a dense array with the local index: no hashing on the receive path. 16 engines x 2^20 QPs each.
#pragma once

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

static_assert(engine_of(proto::kGsiQpn) == 0 && local_index_of(proto::kGsiQpn) == 1, "GSI QP belongs to engine 0");
static_assert(engine_of(make_qpn(3, 42)) == 3 && local_index_of(make_qpn(3, 42)) == 42);
// The multicast QPN 0xFFFFFF has local index 0xFFFFF, which no engine registers (max_qps_per_engine < 2^20).
static_assert(local_index_of(proto::Qpn{0xFFFFFF}) == kQpnLocalMask);

}  // namespace uroce::dataplane
