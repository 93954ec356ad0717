// Bytes -> a validated RoCEv2 packet: where every header is, the payload span, the
// pad count, and whether the ICRC matches.
//
// The parser reads only inside the span it is given, whatever the bytes say; every
// length field is checked against the span before it is used. A packet it rejects
// gets one ParseError naming the first rule it broke, so the dataplane can count
// drops by reason. Rules that depend on a QP (PMTU, PSN, opcode sequence) belong to
// the responder and completer, not here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include "proto/headers.h"
#include "proto/icrc.h"
#include "proto/opcode.h"

namespace uroce::proto {

enum class ParseError : uint8_t {
  kOk = 0,
  kTruncatedEthernet,    // shorter than an Ethernet (+VLAN) header
  kNotIp,                // EtherType is neither IPv4 nor IPv6
  kTruncatedIp,          // the frame ends inside the IP header
  kBadIpVersion,         // version nibble disagrees with the EtherType
  kIpOptions,            // IPv4 IHL != 5 (RoCEv2 carries no options)
  kBadIpChecksum,        // IPv4 header checksum wrong
  kBadIpLength,          // IP length shorter than its headers or longer than the frame
  kIpFragment,           // MF set or a fragment offset: RoCEv2 is never fragmented
  kNotUdp,               // IP protocol / IPv6 next header is not UDP
  kNotRoceV2,            // UDP destination port is not 4791
  kBadUdpLength,         // UDP length disagrees with the IP length
  kTruncatedBth,         // no room for BTH + ICRC
  kBadTransportVersion,  // BTH TVer != 0
  kUnknownOpcode,        // reserved or unsupported opcode
  kTruncatedHeaders,     // no room for the opcode's extension headers + ICRC
  kBadPad,               // pad on a packet that cannot have it, or payload+pad not a multiple of 4
  kBadPayloadLength,     // payload length the opcode forbids
  kBadIcrc,              // ICRC mismatch (rocev2.md §3.3: drop silently and count)
  kCount,
};

[[nodiscard]] std::string_view parse_error_name(ParseError e) noexcept;

// The longest payload any RoCE packet can carry: the largest IB path MTU.
inline constexpr std::size_t kMaxPayload = 4096;

// RC RDMA WRITE packets (without immediate) carrying at least this much payload may have their ICRC check
// deferred to the responder, which checks it while it copies the payload into registered memory
// (crc32_ieee_copy): the payload is then read once, not twice. The smallest IB path MTU: every FIRST and
// MIDDLE packet qualifies, and below it the second read is from L1 and costs little.
inline constexpr std::size_t kDeferredIcrcMinPayload = 256;

struct ParseOptions {
  bool verify_icrc = true;
  bool verify_ip_checksum = true;  // skip when the NIC already checked it
  // With verify_icrc: leave the ICRC of a packet that may_defer_icrc() accepts unchecked and mark it
  // icrc_deferred. Whoever receives such a packet must check it (icrc_matches, or the fused form) before
  // acting on it in any way.
  bool defer_payload_icrc = false;
};

// Offsets are from the start of the frame. A ParsedPacket refers to the frame; it
// is valid while the frame's bytes are.
struct ParsedPacket {
  std::span<const uint8_t> frame;  // the bytes given to the parser (may include Ethernet padding)
  const OpcodeInfo* info = nullptr;
  IpVersion ip_version = IpVersion::kV4;
  bool has_vlan = false;
  uint8_t pad_count = 0;
  uint16_t l3_offset = 0;
  uint16_t udp_offset = 0;
  uint16_t bth_offset = 0;
  uint16_t payload_offset = 0;
  uint16_t payload_length = 0;  // without pad
  uint16_t icrc_offset = 0;     // frame length without Ethernet padding is icrc_offset + 4
  bool icrc_deferred = false;   // the ICRC has not been checked yet (ParseOptions::defer_payload_icrc)

  [[nodiscard]] Opcode opcode() const noexcept { return BthView{frame.data() + bth_offset}.get(Bth::opcode); }
  [[nodiscard]] std::size_t length() const noexcept { return icrc_offset + kIcrcSize; }
  [[nodiscard]] EthView eth() const noexcept { return EthView{frame.data()}; }
  [[nodiscard]] VlanView vlan() const noexcept { return VlanView{frame.data() + Eth::kSize}; }
  [[nodiscard]] Ipv4View ipv4() const noexcept { return Ipv4View{frame.data() + l3_offset}; }
  [[nodiscard]] Ipv6View ipv6() const noexcept { return Ipv6View{frame.data() + l3_offset}; }
  [[nodiscard]] UdpView udp() const noexcept { return UdpView{frame.data() + udp_offset}; }
  [[nodiscard]] BthView bth() const noexcept { return BthView{frame.data() + bth_offset}; }
  [[nodiscard]] bool has(ExtHeader h) const noexcept { return info->carries(h); }
  // Precondition: has(h), and L is the layout of h.
  template <class L>
  [[nodiscard]] View<L> ext(ExtHeader h) const noexcept {
    return View<L>{frame.data() + bth_offset + Bth::kSize + info->offset_of(h)};
  }
  [[nodiscard]] std::span<const uint8_t> payload() const noexcept {
    return frame.subspan(payload_offset, payload_length);
  }
  [[nodiscard]] uint32_t wire_icrc() const noexcept { return icrc_load(frame.data() + icrc_offset); }
  // The IP header's ECN field (RFC 3168): 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE (a switch saw congestion).
  [[nodiscard]] uint8_t ecn() const noexcept {
    return ip_version == IpVersion::kV4 ? ipv4().get(Ipv4::ecn) : ipv6().get(Ipv6::traffic_class) & 0x3;
  }
};

// True for the packets whose ICRC check ParseOptions::defer_payload_icrc defers: RC RDMA WRITE FIRST, MIDDLE,
// LAST and ONLY (their payload goes straight into registered memory) with kDeferredIcrcMinPayload or more.
[[nodiscard]] constexpr bool may_defer_icrc(const OpcodeInfo& info, std::size_t payload_length) noexcept {
  return info.transport == Transport::kRc && info.operation == Operation::kRdmaWrite && !info.is(kImmediate) &&
         payload_length >= kDeferredIcrcMinPayload;
}

// The ICRC of `p`, computed now, against the one it carries.
[[nodiscard]] bool icrc_matches(const ParsedPacket& p) noexcept;
// The CRC state after every covered byte before the payload (masked IP/UDP/BTH, extension headers): continue it
// over the payload (crc32_ieee or crc32_ieee_copy) and hand the result to icrc_matches_after_payload().
[[nodiscard]] uint32_t icrc_state_before_payload(const ParsedPacket& p) noexcept;
// Continues `state` (the CRC after the payload) over the pad and compares with the ICRC `p` carries.
[[nodiscard]] bool icrc_matches_after_payload(const ParsedPacket& p, uint32_t state) noexcept;

struct ParseResult {
  ParseError error = ParseError::kOk;
  ParsedPacket packet;
  [[nodiscard]] bool ok() const noexcept { return error == ParseError::kOk; }
};

[[nodiscard]] ParseResult parse_packet(std::span<const uint8_t> frame, ParseOptions options = {}) noexcept;
// A ParsedPacket points into its frame, so parsing a temporary buffer would leave it dangling.
template <class Container>
requires(!std::is_lvalue_reference_v<Container> && !std::is_same_v<std::decay_t<Container>, std::span<const uint8_t>> &&
         !std::is_same_v<std::decay_t<Container>, std::span<uint8_t>>) ParseResult
    parse_packet(Container&& temporary, ParseOptions options = {})
= delete;

}  // namespace uroce::proto
