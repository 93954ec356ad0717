// Writes a complete RoCEv2 frame (Ethernet [+VLAN], IPv4/IPv6, UDP, BTH, the
// opcode's extension headers, payload, pad, ICRC) into caller-provided memory.
//
// The builder is the one place that knows how to lay a packet out. The dataplane
// uses it once per QP to stamp a header template at connect time, then patches the
// few per-packet fields (STYLE.md §8); tests use it to rebuild captured packets.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "proto/headers.h"
#include "proto/icrc.h"
#include "proto/opcode.h"
#include "proto/packet_parser.h"

namespace uroce::proto {

// A RoCEv2 GID: an IPv6 address, or IPv4 as ::ffff:a.b.c.d (rocev2.md §1.5).
using Gid = std::array<uint8_t, 16>;
constexpr Gid gid_from_ipv4(Ipv4Addr a) noexcept {
  const uint32_t v = a.value();
  return {0,
          0,
          0,
          0,
          0,
          0,
          0,
          0,
          0,
          0,
          0xFF,
          0xFF,
          static_cast<uint8_t>(v >> 24),
          static_cast<uint8_t>(v >> 16),
          static_cast<uint8_t>(v >> 8),
          static_cast<uint8_t>(v)};
}
constexpr bool gid_is_ipv4_mapped(const Gid& g) noexcept {
  for (int i = 0; i < 10; ++i)
    if (g[i] != 0) return false;
  return g[10] == 0xFF && g[11] == 0xFF;
}
constexpr Ipv4Addr gid_to_ipv4(const Gid& g) noexcept {
  return Ipv4Addr{static_cast<uint32_t>(g[12]) << 24 | static_cast<uint32_t>(g[13]) << 16 |
                  static_cast<uint32_t>(g[14]) << 8 | g[15]};
}

// The RoCEv2 UDP source port Linux derives for an RC QP pair (rdma_get_udp_sport,
// used by mlx5, hns, irdma and rxe; rocev2.md §1.4): a 20-bit flow label hashed from
// the QPNs unless one is given, folded into 0xC000-0xFFFF. Constant for the QP's life,
// so one QP's packets follow one ECMP path.
constexpr uint16_t roce_udp_source_port(Qpn local, Qpn remote, uint32_t flow_label = 0) noexcept {
  if (flow_label == 0) {
    uint64_t v = uint64_t{local.value()} * remote.value();
    v ^= v >> 20;
    v ^= v >> 40;
    flow_label = static_cast<uint32_t>(v & 0xFFFFF);
  }
  const uint32_t low = flow_label & 0x3FFF;
  const uint32_t high = flow_label & 0xFC000;
  return static_cast<uint16_t>((low ^ (high >> 14)) | 0xC000);
}
static_assert(roce_udp_source_port(Qpn{0x11}, Qpn{0x12}) == 0xC132);
static_assert(roce_udp_source_port(Qpn{0x108}, Qpn{0x1A2}) == 0xEF16);
static_assert(roce_udp_source_port(Qpn{0x2DA6}, Qpn{0x3606}) == 0xD576);
static_assert(roce_udp_source_port(Qpn{0x123456}, Qpn{0x654321}) == 0xF787);

struct PacketSpec {
  // L2
  MacAddr dst_mac{};
  MacAddr src_mac{};
  std::optional<uint16_t> vlan_tci;
  // L3: IPv4 when both GIDs are IPv4-mapped, IPv6 otherwise.
  Gid src_gid{};
  Gid dst_gid{};
  uint8_t traffic_class = 0;  // IPv4 TOS / IPv6 traffic class (DSCP << 2 | ECN)
  uint8_t hop_limit = 64;     // IPv4 TTL / IPv6 hop limit
  uint16_t ip_id = 0;
  bool dont_fragment = true;  // rxe and ConnectX set DF
  uint32_t flow_label = 0;    // IPv6 only
  // L4
  uint16_t udp_src_port = 0xC000;
  uint16_t udp_checksum = 0;  // 0 = none (rocev2.md §1.4)
  // BTH
  Opcode opcode{};
  bool solicited = false;
  bool mig_req = false;
  PKey pkey = kDefaultPKey;
  uint8_t resv8a = 0;  // FECN/BECN byte; 0x40 (BECN) in a CNP
  Qpn dest_qp{};
  bool ack_req = false;
  Psn psn{};
  // Extension headers; each is written only if the opcode carries it.
  struct {
    uint64_t va = 0;
    RemoteToken rkey{};
    uint32_t dma_length = 0;
  } reth;
  struct {
    uint8_t syndrome = 0x1F;
    Msn msn{};
  } aeth;
  struct {
    uint64_t va = 0;
    RemoteToken rkey{};
    uint64_t swap_or_add = 0;
    uint64_t compare = 0;
  } atomic_eth;
  uint64_t atomic_ack_original = 0;
  uint32_t immediate = 0;
  RemoteToken invalidate_rkey{};
  struct {
    QKey qkey{};
    Qpn src_qp{};
  } deth;
  struct {
    uint8_t selectivity = 0;
    uint8_t placement_type = 0;
  } feth;
  std::span<const uint8_t> payload;

  [[nodiscard]] IpVersion ip_version() const noexcept {
    return gid_is_ipv4_mapped(src_gid) && gid_is_ipv4_mapped(dst_gid) ? IpVersion::kV4 : IpVersion::kV6;
  }
};

// Bytes build_packet() writes for `spec` (no Ethernet minimum-frame padding).
[[nodiscard]] std::size_t packet_size(const PacketSpec& spec) noexcept;

// Writes the frame and returns its length, or 0 (writing nothing) when the opcode
// is unknown, the payload is longer than kMaxPayload, or `out` is too small.
std::size_t build_packet(const PacketSpec& spec, std::span<uint8_t> out) noexcept;

// Every field of a parsed packet, so that build_packet() reproduces it.
[[nodiscard]] PacketSpec spec_from_packet(const ParsedPacket& packet) noexcept;

}  // namespace uroce::proto
