#include "proto/packet_template.h"

#include <cstring>

namespace uroce::proto {

void PacketTemplate::init(const PacketSpec& base) noexcept {
  PacketSpec s = base;
  s.opcode = Opcode::kRcSendMiddle;  // no extension headers: the template ends at the BTH
  s.payload = {};
  s.solicited = false;
  s.ack_req = false;
  s.psn = Psn{0};
  ip_version_ = s.ip_version();
  l3_offset_ = Eth::kSize + (s.vlan_tci ? Vlan::kSize : 0);
  std::array<uint8_t, sizeof(bytes_) + kIcrcSize> scratch{};
  const std::size_t n = build_packet(s, scratch);
  headers_length_ = n - kIcrcSize;
  std::memcpy(bytes_.data(), scratch.data(), headers_length_);
}

PacketTemplate::Stamped PacketTemplate::stamp(uint8_t* out, Opcode op, std::size_t payload_length, Psn psn,
                                              uint8_t bth_flags) const noexcept {
  const std::size_t frame = frame_length(op, payload_length);
  std::memcpy(out, bytes_.data(), headers_length_);
  uint8_t* const l3 = out + l3_offset_;
  const std::size_t l3_length = frame - l3_offset_;
  std::size_t udp_offset;
  if (ip_version_ == IpVersion::kV4) {
    const MutView<Ipv4> ip{l3};
    ip.set(Ipv4::total_length, static_cast<uint16_t>(l3_length));
    ip.set(Ipv4::checksum, ipv4_header_checksum(l3));
    udp_offset = l3_offset_ + Ipv4::kSize;
  } else {
    MutView<Ipv6>{l3}.set(Ipv6::payload_length, static_cast<uint16_t>(l3_length - Ipv6::kSize));
    udp_offset = l3_offset_ + Ipv6::kSize;
  }
  MutView<Udp>{out + udp_offset}.set(Udp::length, static_cast<uint16_t>(frame - udp_offset));
  uint8_t* const bth = out + udp_offset + Udp::kSize;
  bth[0] = static_cast<uint8_t>(op);
  // Byte 1: SE(7) M(6) PadCnt(5:4) TVer(3:0); M and TVer stay as the template has them.
  bth[1] =
      static_cast<uint8_t>((bth[1] & 0x4F) | ((bth_flags & kBthSolicited) ? 0x80 : 0) | (pad_for(payload_length) << 4));
  bth[8] = (bth_flags & kBthAckReq) ? 0x80 : 0;
  MutView<Bth>{bth}.set(Bth::psn, psn);
  uint8_t* const ext = bth + Bth::kSize;
  return {ext, ext + opcode_info(op).ext_length, frame};
}

void PacketTemplate::seal(uint8_t* out, const Stamped& stamped, std::size_t payload_length) const noexcept {
  uint8_t* const pad = stamped.payload + payload_length;
  std::memset(pad, 0, pad_for(payload_length));
  uint8_t* const icrc = out + stamped.frame_length - kIcrcSize;
  icrc_store(icrc, icrc_compute(out + l3_offset_, static_cast<std::size_t>(icrc - (out + l3_offset_)), ip_version_));
}

}  // namespace uroce::proto
