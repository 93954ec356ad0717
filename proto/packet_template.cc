#include "proto/packet_template.h"

#include <bit>
#include <cstring>

namespace uroce::proto {

namespace {

static_assert(std::endian::native == std::endian::little, "stamp_ipv4 builds wire bytes in little-endian words");

// Offsets inside the IPv4 head words (ipv4_words_): bytes from l3 - 8.
constexpr std::size_t kHeadIp = 8;
constexpr std::size_t kHeadUdp = kHeadIp + Ipv4::kSize;
constexpr std::size_t kHeadBth = kHeadUdp + Udp::kSize;
static_assert(kHeadBth + Bth::kSize == 6 * sizeof(uint64_t),
              "the IPv4 head is exactly six words, three 16-byte blocks");

// A 16-byte block of two words (GCC/clang vector extension), stored with one 16-byte store.
using WordPair = uint64_t __attribute__((vector_size(16)));

uint64_t byte_at(std::size_t head_offset, uint64_t value) noexcept { return value << (8 * (head_offset % 8)); }

}  // namespace

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
  const uint8_t* const l3 = bytes_.data() + l3_offset_;
  if (ip_version_ != IpVersion::kV4) {
    std::memcpy(reply_addresses_.data(), l3 + Ipv6::kDstOffset, Ipv6::kAddrSize);
    std::memcpy(reply_addresses_.data() + Ipv6::kAddrSize, l3 + Ipv6::kSrcOffset, Ipv6::kAddrSize);
    return;
  }
  std::memcpy(reply_addresses_.data(), l3 + Ipv4::dst.kOffset, 4);
  std::memcpy(reply_addresses_.data() + 4, l3 + Ipv4::src.kOffset, 4);

  // The per-packet fields are zero in the head words; everything else is the template's.
  std::array<uint8_t, 48> head{};
  std::memcpy(head.data(), bytes_.data() + l3_offset_ - kHeadIp, head.size());
  MutView<Ipv4> ip{head.data() + kHeadIp};
  ip.set(Ipv4::total_length, 0);
  ip.set(Ipv4::checksum, 0);
  MutView<Udp>{head.data() + kHeadUdp}.set(Udp::length, 0);
  uint8_t* const bth = head.data() + kHeadBth;
  bth[0] = 0;      // opcode
  bth[1] &= 0x4F;  // SE and PadCnt; M and TVer stay
  bth[8] = 0;      // AckReq and reserved
  MutView<Bth>{bth}.set(Bth::psn, Psn{0});
  std::memcpy(ipv4_words_.data(), head.data(), head.size());
  // ipv4_header_checksum() is ~(sum of the header with length and checksum zero): undo the complement.
  ipv4_partial_sum_ = static_cast<uint16_t>(~ipv4_header_checksum(head.data() + kHeadIp));
}

PacketTemplate::Stamped PacketTemplate::stamp(uint8_t* out, Opcode op, std::size_t payload_length, Psn psn,
                                              uint8_t bth_flags) const noexcept {
  if (ip_version_ == IpVersion::kV4) return stamp_ipv4(out, op, payload_length, psn, bth_flags);
  const std::size_t frame = frame_length(op, payload_length);
  std::memcpy(out, bytes_.data(), headers_length_);
  uint8_t* const l3 = out + l3_offset_;
  const std::size_t l3_length = frame - l3_offset_;
  MutView<Ipv6>{l3}.set(Ipv6::payload_length, static_cast<uint16_t>(l3_length - Ipv6::kSize));
  const std::size_t udp_offset = l3_offset_ + Ipv6::kSize;
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

PacketTemplate::Stamped PacketTemplate::stamp_ipv4(uint8_t* out, Opcode op, std::size_t payload_length, Psn psn,
                                                   uint8_t bth_flags) const noexcept {
  const std::size_t frame = frame_length(op, payload_length);
  const auto total_length = static_cast<uint16_t>(frame - l3_offset_);
  const auto udp_length = static_cast<uint16_t>(total_length - Ipv4::kSize);
  // RFC 1624: the checksum follows from the template's sum plus the one field that changes.
  uint32_t sum = ipv4_partial_sum_ + total_length;
  sum = (sum & 0xFFFF) + (sum >> 16);
  const auto checksum = static_cast<uint16_t>(~(sum + (sum >> 16)));
  const uint8_t bth_byte1 =
      static_cast<uint8_t>(((bth_flags & kBthSolicited) ? 0x80 : 0) | (pad_for(payload_length) << 4));
  const uint32_t ack_req_and_psn = ((bth_flags & kBthAckReq) ? 0x80u : 0u) | __builtin_bswap32(psn.value());

  const std::array<uint64_t, 6>& w = ipv4_words_;
  const WordPair block0 = {w[0], w[1] | byte_at(kHeadIp + Ipv4::total_length.kOffset, __builtin_bswap16(total_length))};
  const WordPair block1 = {w[2] | byte_at(kHeadIp + Ipv4::checksum.kOffset, __builtin_bswap16(checksum)), w[3]};
  const WordPair block2 = {w[4] | byte_at(kHeadUdp + Udp::length.kOffset, __builtin_bswap16(udp_length)) |
                               byte_at(kHeadBth, static_cast<uint8_t>(op)) | byte_at(kHeadBth + 1, bth_byte1),
                           w[5] | byte_at(kHeadBth + 8, ack_req_and_psn)};
  static_assert(Ipv4::total_length.kOffset == 2 && Ipv4::checksum.kOffset == 10 && Udp::length.kOffset == 4);
  static_assert(Bth::psn.kOffset == 9 && (kHeadBth + 8) % 8 == 4, "AckReq and the PSN share one 32-bit word");

  // The Ethernet header up to the head (the 16-byte copy overlaps the head, which is stored after it).
  std::memcpy(out, bytes_.data(), 16);
  uint8_t* const head = out + l3_offset_ - kHeadIp;
  std::memcpy(head, &block0, 16);
  std::memcpy(head + 16, &block1, 16);
  std::memcpy(head + 32, &block2, 16);
  uint8_t* const ext = head + kHeadBth + Bth::kSize;
  return {ext, ext + opcode_info(op).ext_length, frame};
}

void PacketTemplate::seal(uint8_t* out, const Stamped& stamped, std::size_t payload_length) const noexcept {
  uint8_t* const pad = stamped.payload + payload_length;
  std::memset(pad, 0, pad_for(payload_length));
  uint8_t* const icrc = out + stamped.frame_length - kIcrcSize;
  icrc_store(icrc, icrc_compute(out + l3_offset_, static_cast<std::size_t>(icrc - (out + l3_offset_)), ip_version_));
}

// CNPs are rare (at most one per QP per NP interval): built with the general stamp, then patched, with the IPv4
// checksum recomputed whole. The ICRC masks the TOS / traffic class and BECN, so it could be sealed either side of
// the patch.
std::size_t PacketTemplate::stamp_cnp(uint8_t* out, uint8_t traffic_class) const noexcept {
  const Stamped st = stamp(out, Opcode::kCnp, 0, Psn{0}, 0);
  std::memset(st.ext, 0, CnpBody::kSize);
  uint8_t* const l3 = out + l3_offset_;
  if (ip_version_ == IpVersion::kV4) {
    const MutView<Ipv4> ip{l3};
    ip.set(Ipv4::tos, traffic_class);
    ip.set(Ipv4::checksum, ipv4_header_checksum(l3));
  } else {
    MutView<Ipv6>{l3}.set(Ipv6::traffic_class, traffic_class);
  }
  MutView<Bth>{st.ext - Bth::kSize}.set(Bth::becn, true);
  seal(out, st, 0);
  return st.frame_length;
}

}  // namespace uroce::proto

namespace uroce::proto {

void PacketTemplate::seal_split(const uint8_t* out, const Stamped& stamped, const uint8_t* payload,
                                std::size_t payload_length, uint8_t* tail) const noexcept {
  const std::size_t pad = pad_for(payload_length);
  std::memset(tail, 0, pad);
  // The ICRC covers the headers (masked), the extension headers, the payload where it lies, and the pad.
  const uint32_t crc = crc32_ieee(icrc_before_payload(out, stamped), payload, payload_length);
  icrc_store(tail + pad, crc32_ieee(crc, tail, pad));
}

uint32_t PacketTemplate::icrc_before_payload(const uint8_t* out, const Stamped& stamped) const noexcept {
  const uint8_t* const l3 = out + l3_offset_;
  return icrc_compute(l3, static_cast<std::size_t>(stamped.payload - l3), ip_version_);
}

void PacketTemplate::copy_and_seal(uint8_t* out, const Stamped& stamped, const uint8_t* payload,
                                   std::size_t payload_length) const noexcept {
  if (payload_length >= kSealWhileCopyingMinPayload) {
    seal_after_payload(stamped, payload_length,
                       crc32_ieee_copy(icrc_before_payload(out, stamped), stamped.payload, payload, payload_length));
    return;
  }
  if (payload_length != 0) std::memcpy(stamped.payload, payload, payload_length);
  seal(out, stamped, payload_length);
}

void PacketTemplate::seal_after_payload(const Stamped& stamped, std::size_t payload_length,
                                        uint32_t crc) const noexcept {
  uint8_t* const pad = stamped.payload + payload_length;
  const std::size_t pad_length = pad_for(payload_length);
  std::memset(pad, 0, pad_length);
  icrc_store(pad + pad_length, crc32_ieee(crc, pad, pad_length));
}

}  // namespace uroce::proto
