// Typed views of every header in a RoCEv2 frame.
//
// Each header is a Layout: its size and its fields as WireField constants with
// the IBTA/IETF byte offsets. Read with `BthView{p}.get(Bth::psn)`, write with
// `BthMut{p}.set(Bth::psn, Psn{42})`. Sizes are checked against the spec below.
#pragma once

#include <cstddef>
#include <cstdint>

#include "proto/types.h"
#include "proto/wire_field.h"

namespace uroce::proto {

inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr uint16_t kEtherTypeIpv6 = 0x86DD;
inline constexpr uint16_t kEtherTypeVlan = 0x8100;
inline constexpr uint16_t kEtherTypeArp = 0x0806;
inline constexpr uint8_t kIpProtoUdp = 17;
inline constexpr uint16_t kRoceV2UdpPort = 4791;  // IANA "roce"
inline constexpr std::size_t kIcrcSize = 4;

struct Eth {
  static constexpr std::size_t kSize = 14;
  static constexpr WireField<MacAddr, 0, 6> dst{};
  static constexpr WireField<MacAddr, 6, 6> src{};
  static constexpr WireField<uint16_t, 12, 2> ether_type{};
};

// The 802.1Q tag as it follows the source MAC: TCI, then the inner EtherType.
// The tag is outside the ICRC (rocev2.md §1.1).
struct Vlan {
  static constexpr std::size_t kSize = 4;
  static constexpr WireField<uint16_t, 0, 2> tci{};
  static constexpr WireField<uint8_t, 0, 2, 13, 3> pcp{};
  static constexpr WireField<bool, 0, 2, 12, 1> dei{};
  static constexpr WireField<uint16_t, 0, 2, 0, 12> vid{};
  static constexpr WireField<uint16_t, 2, 2> ether_type{};
};

struct Ipv4 {
  static constexpr std::size_t kSize = 20;  // RoCEv2 uses no IP options
  static constexpr WireField<uint8_t, 0, 1, 4, 4> version{};
  static constexpr WireField<uint8_t, 0, 1, 0, 4> ihl{};
  static constexpr WireField<uint8_t, 1, 1> tos{};
  static constexpr WireField<uint8_t, 1, 1, 2, 6> dscp{};
  static constexpr WireField<uint8_t, 1, 1, 0, 2> ecn{};
  static constexpr WireField<uint16_t, 2, 2> total_length{};
  static constexpr WireField<uint16_t, 4, 2> id{};
  static constexpr WireField<uint16_t, 6, 2> flags_fragment{};
  static constexpr WireField<bool, 6, 2, 14, 1> dont_fragment{};
  static constexpr WireField<bool, 6, 2, 13, 1> more_fragments{};
  static constexpr WireField<uint16_t, 6, 2, 0, 13> fragment_offset{};
  static constexpr WireField<uint8_t, 8, 1> ttl{};
  static constexpr WireField<uint8_t, 9, 1> protocol{};
  static constexpr WireField<uint16_t, 10, 2> checksum{};
  static constexpr WireField<Ipv4Addr, 12, 4> src{};
  static constexpr WireField<Ipv4Addr, 16, 4> dst{};
};

// The IP ECN field (RFC 3168), the low two bits of the IPv4 TOS and of the IPv6 traffic class.
inline constexpr uint8_t kEcnNotEct = 0;
inline constexpr uint8_t kEcnEct0 = 2;
inline constexpr uint8_t kEcnCe = 3;  // a congested queue marked the packet (ECT(1) is 1)

struct Ipv6 {
  static constexpr std::size_t kSize = 40;  // no extension headers on RoCEv2
  static constexpr std::size_t kSrcOffset = 8;
  static constexpr std::size_t kDstOffset = 24;
  static constexpr std::size_t kAddrSize = 16;
  static constexpr WireField<uint8_t, 0, 4, 28, 4> version{};
  static constexpr WireField<uint8_t, 0, 4, 20, 8> traffic_class{};
  static constexpr WireField<uint32_t, 0, 4, 0, 20> flow_label{};
  static constexpr WireField<uint16_t, 4, 2> payload_length{};
  static constexpr WireField<uint8_t, 6, 1> next_header{};
  static constexpr WireField<uint8_t, 7, 1> hop_limit{};
};

struct Udp {
  static constexpr std::size_t kSize = 8;
  static constexpr WireField<uint16_t, 0, 2> src_port{};
  static constexpr WireField<uint16_t, 2, 2> dst_port{};
  static constexpr WireField<uint16_t, 4, 2> length{};
  static constexpr WireField<uint16_t, 6, 2> checksum{};
};

// Base Transport Header, IBTA 9.2.
struct Bth {
  static constexpr std::size_t kSize = 12;
  static constexpr WireField<Opcode, 0, 1> opcode{};
  static constexpr WireField<bool, 1, 1, 7, 1> solicited{};
  static constexpr WireField<bool, 1, 1, 6, 1> mig_req{};
  static constexpr WireField<uint8_t, 1, 1, 4, 2> pad_count{};
  static constexpr WireField<uint8_t, 1, 1, 0, 4> tver{};
  static constexpr WireField<PKey, 2, 2> pkey{};
  static constexpr WireField<uint8_t, 4, 1> resv8a{};  // FECN, BECN, reserved: masked in the ICRC
  static constexpr WireField<bool, 4, 1, 7, 1> fecn{};
  static constexpr WireField<bool, 4, 1, 6, 1> becn{};
  static constexpr WireField<Qpn, 5, 3> dest_qp{};
  static constexpr WireField<bool, 8, 1, 7, 1> ack_req{};
  static constexpr WireField<uint8_t, 8, 1, 0, 7> resv7{};
  static constexpr WireField<Psn, 9, 3> psn{};
};

// RDMA Extended Transport Header, IBTA 9.3.3.
struct Reth {
  static constexpr std::size_t kSize = 16;
  static constexpr WireField<uint64_t, 0, 8> va{};
  static constexpr WireField<RemoteToken, 8, 4> rkey{};
  static constexpr WireField<uint32_t, 12, 4> dma_length{};
};

// ACK Extended Transport Header, IBTA 9.3.5. The syndrome is decoded by aeth.h.
struct Aeth {
  static constexpr std::size_t kSize = 4;
  static constexpr WireField<uint8_t, 0, 1> syndrome{};
  static constexpr WireField<Msn, 1, 3> msn{};
};

// Atomic Extended Transport Header, IBTA 9.3.4.
struct AtomicEth {
  static constexpr std::size_t kSize = 28;
  static constexpr WireField<uint64_t, 0, 8> va{};
  static constexpr WireField<RemoteToken, 8, 4> rkey{};
  static constexpr WireField<uint64_t, 12, 8> swap_or_add{};
  static constexpr WireField<uint64_t, 20, 8> compare{};
};

// Atomic ACK Extended Transport Header, IBTA 9.5.3.
struct AtomicAckEth {
  static constexpr std::size_t kSize = 8;
  static constexpr WireField<uint64_t, 0, 8> original_data{};
};

// Immediate data: opaque, handed to the receiver as the wire bytes.
struct ImmDt {
  static constexpr std::size_t kSize = 4;
  static constexpr WireField<uint32_t, 0, 4> immediate{};
};

// Invalidate Extended Transport Header: the R_Key the responder invalidates.
struct Ieth {
  static constexpr std::size_t kSize = 4;
  static constexpr WireField<RemoteToken, 0, 4> rkey{};
};

// Datagram Extended Transport Header, IBTA 9.3.2 (UD).
struct Deth {
  static constexpr std::size_t kSize = 8;
  static constexpr WireField<QKey, 0, 4> qkey{};
  static constexpr WireField<uint8_t, 4, 1> reserved{};
  static constexpr WireField<Qpn, 5, 3> src_qp{};
};

// RoCEv2 CNP body: 16 reserved bytes after the BTH (rocev2.md §7.2).
struct CnpBody {
  static constexpr std::size_t kSize = 16;
};

template <class Layout>
using View = HeaderView<Layout, const uint8_t>;
template <class Layout>
using MutView = HeaderView<Layout, uint8_t>;

using EthView = View<Eth>;
using VlanView = View<Vlan>;
using Ipv4View = View<Ipv4>;
using Ipv6View = View<Ipv6>;
using UdpView = View<Udp>;
using BthView = View<Bth>;
using RethView = View<Reth>;
using AethView = View<Aeth>;
using AtomicEthView = View<AtomicEth>;
using AtomicAckEthView = View<AtomicAckEth>;
using ImmDtView = View<ImmDt>;
using IethView = View<Ieth>;
using DethView = View<Deth>;

// RFC 791 header checksum over a 20-byte IPv4 header whose checksum field is
// treated as zero. The result is ready to store in Ipv4::checksum.
// Five 32-bit words instead of ten 16-bit ones (RFC 1071 §2: the one's complement sum
// is the same at any word size once folded to 16 bits, as 2^16 and 2^32 are both 1
// modulo 0xFFFF); the checksum field is masked out of the third word.
inline uint16_t ipv4_header_checksum(const uint8_t* header) noexcept {
  static_assert(Ipv4::checksum.kOffset == 10 && Ipv4::kSize == 20);
  uint64_t sum = uint64_t{detail::load_be<4>(header)} + detail::load_be<4>(header + 4) +
                 (detail::load_be<4>(header + 8) & 0xFFFF0000u) + detail::load_be<4>(header + 12) +
                 detail::load_be<4>(header + 16);
  sum = (sum & 0xFFFFFFFFu) + (sum >> 32);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

}  // namespace uroce::proto
