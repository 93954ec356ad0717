#include "proto/packet_parser.h"

#include <array>

namespace uroce::proto {

std::string_view parse_error_name(ParseError e) noexcept {
  static constexpr std::array<std::string_view, static_cast<std::size_t>(ParseError::kCount)> kNames = {
      "ok",
      "truncated_ethernet",
      "not_ip",
      "truncated_ip",
      "bad_ip_version",
      "ip_options",
      "bad_ip_checksum",
      "bad_ip_length",
      "ip_fragment",
      "not_udp",
      "not_rocev2",
      "bad_udp_length",
      "truncated_bth",
      "bad_tver",
      "unknown_opcode",
      "truncated_headers",
      "bad_pad",
      "bad_payload_length",
      "bad_icrc"};
  const auto i = static_cast<std::size_t>(e);
  return i < kNames.size() ? kNames[i] : "invalid";
}

namespace {

constexpr bool is_path_mtu(std::size_t n) noexcept { return n >= 256 && n <= 4096 && (n & (n - 1)) == 0; }

// Payload rules that follow from the opcode alone (IBTA 9.7.x; rocev2.md §2.4):
// FIRST/MIDDLE carry exactly one path MTU, LAST at least one byte, nothing more than
// the largest PMTU, and opcodes without a payload carry none.
ParseError check_payload(const OpcodeInfo& info, std::size_t payload, std::size_t pad) noexcept {
  if (!info.is(kPayload)) {
    if (payload + pad != 0) return ParseError::kBadPayloadLength;
    return ParseError::kOk;
  }
  // IBTA 9.2: PadCnt pads the payload to a 4-byte multiple; only the packet that ends
  // a message can have an unaligned payload.
  if ((payload + pad) % 4 != 0) return ParseError::kBadPad;
  if (pad != 0 && !(info.is(kLast) || info.is(kOnly))) return ParseError::kBadPad;
  if (payload > kMaxPayload) return ParseError::kBadPayloadLength;
  if ((info.is(kFirst) || info.is(kMiddle)) && !is_path_mtu(payload)) return ParseError::kBadPayloadLength;
  if (info.is(kLast) && payload == 0) return ParseError::kBadPayloadLength;
  if (info.fixed_payload() >= 0 && payload != static_cast<std::size_t>(info.fixed_payload()))
    return ParseError::kBadPayloadLength;
  return ParseError::kOk;
}

}  // namespace

namespace {

// Fills `p` in place and returns the first rule the frame breaks. parse_packet() wraps it so
// that its result is built once, in the caller's object: returning a copy of a local result
// (as an early-return helper did) made the compiler copy it from the stack in 16-byte loads
// right after narrow stores had written it, a store-forwarding stall on every packet.
ParseError parse_into(std::span<const uint8_t> frame, ParseOptions options, ParsedPacket& p) noexcept {
  p.frame = frame;
  const uint8_t* const base = frame.data();
  const std::size_t size = frame.size();

  // L2: Ethernet, optionally one 802.1Q tag.
  if (size < Eth::kSize) return ParseError::kTruncatedEthernet;
  std::size_t offset = Eth::kSize;
  uint16_t ether_type = EthView{base}.get(Eth::ether_type);
  if (ether_type == kEtherTypeVlan) {
    if (size < Eth::kSize + Vlan::kSize) return ParseError::kTruncatedEthernet;
    p.has_vlan = true;
    ether_type = VlanView{base + Eth::kSize}.get(Vlan::ether_type);
    offset += Vlan::kSize;
  }
  p.l3_offset = static_cast<uint16_t>(offset);

  // L3. Lengths come from the IP header, never the frame: short frames are padded to 60 bytes.
  std::size_t l3_length = 0;  // IP header + everything it carries
  std::size_t ip_header = 0;
  if (ether_type == kEtherTypeIpv4) {
    ip_header = Ipv4::kSize;
    if (size < offset + ip_header) return ParseError::kTruncatedIp;
    const Ipv4View ip{base + offset};
    if (ip.get(Ipv4::version) != 4) return ParseError::kBadIpVersion;
    if (ip.get(Ipv4::ihl) != 5) return ParseError::kIpOptions;
    if (options.verify_ip_checksum && ip.get(Ipv4::checksum) != ipv4_header_checksum(base + offset))
      return ParseError::kBadIpChecksum;
    l3_length = ip.get(Ipv4::total_length);
    if (l3_length < ip_header + Udp::kSize || l3_length > size - offset) return ParseError::kBadIpLength;
    if (ip.get(Ipv4::more_fragments) || ip.get(Ipv4::fragment_offset) != 0) return ParseError::kIpFragment;
    if (ip.get(Ipv4::protocol) != kIpProtoUdp) return ParseError::kNotUdp;
    p.ip_version = IpVersion::kV4;
  } else if (ether_type == kEtherTypeIpv6) {
    ip_header = Ipv6::kSize;
    if (size < offset + ip_header) return ParseError::kTruncatedIp;
    const Ipv6View ip{base + offset};
    if (ip.get(Ipv6::version) != 6) return ParseError::kBadIpVersion;
    l3_length = ip_header + ip.get(Ipv6::payload_length);
    if (l3_length < ip_header + Udp::kSize || l3_length > size - offset) return ParseError::kBadIpLength;
    if (ip.get(Ipv6::next_header) != kIpProtoUdp) return ParseError::kNotUdp;
    p.ip_version = IpVersion::kV6;
  } else {
    return ParseError::kNotIp;
  }
  offset += ip_header;
  p.udp_offset = static_cast<uint16_t>(offset);

  // L4: UDP to port 4791. The source port is entropy chosen by the sender: never checked.
  const UdpView udp{base + offset};
  if (udp.get(Udp::dst_port) != kRoceV2UdpPort) return ParseError::kNotRoceV2;
  const std::size_t udp_length = udp.get(Udp::length);
  if (udp_length != l3_length - ip_header) return ParseError::kBadUdpLength;
  offset += Udp::kSize;
  p.bth_offset = static_cast<uint16_t>(offset);
  const std::size_t end = p.l3_offset + l3_length;  // one past the ICRC

  // BTH.
  if (udp_length < Udp::kSize + Bth::kSize + kIcrcSize) return ParseError::kTruncatedBth;
  const BthView bth{base + offset};
  if (bth.get(Bth::tver) != 0) return ParseError::kBadTransportVersion;
  const OpcodeInfo& info = opcode_info(bth.get(Bth::opcode));
  if (!info.valid()) return ParseError::kUnknownOpcode;
  p.info = &info;

  // Extension headers, payload, pad, ICRC.
  const std::size_t headers_end = offset + Bth::kSize + info.ext_length;
  if (headers_end + kIcrcSize > end) return ParseError::kTruncatedHeaders;
  p.pad_count = bth.get(Bth::pad_count);
  const std::size_t payload_and_pad = end - kIcrcSize - headers_end;
  if (p.pad_count > payload_and_pad) return ParseError::kBadPad;
  const std::size_t payload = payload_and_pad - p.pad_count;
  if (const ParseError e = check_payload(info, payload, p.pad_count); e != ParseError::kOk) return e;
  p.payload_offset = static_cast<uint16_t>(headers_end);
  p.payload_length = static_cast<uint16_t>(payload);
  p.icrc_offset = static_cast<uint16_t>(end - kIcrcSize);

  if (!options.verify_icrc) return ParseError::kOk;
  if (options.defer_payload_icrc && may_defer_icrc(info, payload)) {
    p.icrc_deferred = true;
    return ParseError::kOk;
  }
  if (!icrc_matches(p)) return ParseError::kBadIcrc;
  return ParseError::kOk;
}

}  // namespace

bool icrc_matches(const ParsedPacket& p) noexcept {
  return icrc_compute(p.frame.data() + p.l3_offset, p.icrc_offset - p.l3_offset, p.ip_version) == p.wire_icrc();
}

uint32_t icrc_state_before_payload(const ParsedPacket& p) noexcept {
  const uint8_t* const ext = p.frame.data() + p.bth_offset + Bth::kSize;
  return crc32_ieee(icrc_headers(p.frame.data() + p.l3_offset, p.ip_version), ext, p.info->ext_length);
}

bool icrc_matches_after_payload(const ParsedPacket& p, uint32_t state) noexcept {
  return crc32_ieee(state, p.frame.data() + p.payload_offset + p.payload_length, p.pad_count) == p.wire_icrc();
}

ParseResult parse_packet(std::span<const uint8_t> frame, ParseOptions options) noexcept {
  ParseResult r;
  r.error = parse_into(frame, options, r.packet);
  return r;
}

}  // namespace uroce::proto
