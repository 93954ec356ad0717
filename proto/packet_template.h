// A QP's prebuilt packet headers (STYLE.md §8).
//
// At connect time the Ethernet, IP, UDP and BTH headers that never change for a QP
// (addresses, ports, P_Key, destination QP) are built once with build_packet().
// Per packet, stamp() copies them and patches only what changes (lengths, IPv4
// checksum, opcode, flags, PSN); the caller fills extension headers and payload,
// then seal() writes the pad and the ICRC.
//
// IPv4 (the common case) is stamped in registers: the 48 bytes from 8 before the IP
// header to the end of the BTH are three 16-byte blocks of the template with the
// per-packet fields ORed in, stored whole, and the IPv4 checksum is the template's
// partial sum plus the total length (RFC 1624). seal()'s ICRC reads those same
// blocks back (icrc.h), so its loads forward from whole stores instead of waiting
// for 2-byte patches to retire.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "proto/packet_builder.h"
#include "proto/packet_parser.h"

namespace uroce::proto {

enum BthFlag : uint8_t {
  kBthAckReq = 1u << 0,
  kBthSolicited = 1u << 1,
};

// See PacketTemplate::icrc_before_payload.
inline constexpr std::size_t kSealWhileCopyingMinPayload = 512;

class PacketTemplate {
 public:
  struct Stamped {
    uint8_t* ext;      // the opcode's extension headers (opcode_info(op).offset_of(h) from here)
    uint8_t* payload;  // where `payload_length` bytes go
    std::size_t frame_length;
  };

  // Prebuilds the headers from `base`; its opcode, PSN, flags and payload are ignored.
  void init(const PacketSpec& base) noexcept;

  [[nodiscard]] std::size_t frame_length(Opcode op, std::size_t payload_length) const noexcept {
    return headers_length_ + opcode_info(op).ext_length + payload_length + pad_for(payload_length) + kIcrcSize;
  }

  // The bytes before the payload: headers through the BTH and the opcode's extension headers.
  [[nodiscard]] std::size_t header_length(Opcode op) const noexcept {
    return headers_length_ + opcode_info(op).ext_length;
  }
  // The bytes after the payload: pad and ICRC.
  [[nodiscard]] static std::size_t tail_length(std::size_t payload_length) noexcept {
    return pad_for(payload_length) + kIcrcSize;
  }

  // Writes the fixed headers for one packet into `out` (frame_length(op, payload_length) bytes, or
  // header_length(op) for a frame whose payload lies elsewhere: stamp() writes nothing past the headers).
  Stamped stamp(uint8_t* out, Opcode op, std::size_t payload_length, Psn psn, uint8_t bth_flags) const noexcept;

  // Zeroes the pad and writes the ICRC; `stamped` is what stamp() returned.
  void seal(uint8_t* out, const Stamped& stamped, std::size_t payload_length) const noexcept;

  // seal() for a frame in three pieces (zero-copy TX): the headers at `out` as stamp() wrote them, the payload
  // at `payload`, and `tail` (tail_length(payload_length) bytes), where the pad and the ICRC go.
  void seal_split(const uint8_t* out, const Stamped& stamped, const uint8_t* payload, std::size_t payload_length,
                  uint8_t* tail) const noexcept;

  // seal() in two steps around a payload copied in while its CRC is taken (crc32_ieee_copy), so that the
  // payload is read once, not copied and then read back: icrc_before_payload() is the ICRC's running value over
  // the headers and extension headers stamp() and the caller wrote; the caller continues it over the payload as
  // it copies it to stamped.payload, and seal_after_payload() zeroes the pad and writes the ICRC. Worth it from
  // kSealWhileCopyingMinPayload bytes: below that, the extra CRC reduction costs more than the second read saves.
  [[nodiscard]] uint32_t icrc_before_payload(const uint8_t* out, const Stamped& stamped) const noexcept;
  void seal_after_payload(const Stamped& stamped, std::size_t payload_length, uint32_t crc) const noexcept;
  // Copies the payload (`payload_length` bytes at `payload`) to stamped.payload and seals the frame, in one pass
  // over the payload from kSealWhileCopyingMinPayload bytes.
  void copy_and_seal(uint8_t* out, const Stamped& stamped, const uint8_t* payload,
                     std::size_t payload_length) const noexcept;

  // Builds a whole CNP back along this path into `out` (frame_length(Opcode::kCnp, 0) bytes) and returns its
  // length (rocev2.md §7.2): BTH opcode 0x81 with BECN set, the template's P_Key and destination QP (the QP whose
  // packets were marked), PSN 0, 16 reserved zero bytes, the ICRC; `traffic_class` is the IP TOS / traffic class
  // byte (DSCP << 2 | ECN), which CNPs take apart from data so that they can bypass the congested queue.
  std::size_t stamp_cnp(uint8_t* out, uint8_t traffic_class) const noexcept;

  [[nodiscard]] IpVersion ip_version() const noexcept { return ip_version_; }

  // True when `p` came back along this path: the same IP version, from the address these headers send to, to
  // the address they send from. An RC QP acts only on such packets, as rxe checks them: anything else was sent
  // by someone other than the connected peer, or to someone other than us.
  // Inline: it runs once per received packet, and IPv4's check is one 8-byte compare (source and destination are
  // adjacent in both IP versions).
  [[nodiscard]] bool is_reply(const ParsedPacket& p) const noexcept {
    if (p.ip_version != ip_version_) return false;
    const uint8_t* const l3 = p.frame.data() + p.l3_offset;
    if (ip_version_ == IpVersion::kV4) return std::memcmp(l3 + Ipv4::src.kOffset, reply_addresses_.data(), 8) == 0;
    return std::memcmp(l3 + Ipv6::kSrcOffset, reply_addresses_.data(), 2 * Ipv6::kAddrSize) == 0;
  }

 private:
  static constexpr std::size_t pad_for(std::size_t n) noexcept { return (4 - n % 4) % 4; }

  Stamped stamp_ipv4(uint8_t* out, Opcode op, std::size_t payload_length, Psn psn, uint8_t bth_flags) const noexcept;

  std::array<uint8_t, Eth::kSize + Vlan::kSize + Ipv6::kSize + Udp::kSize + Bth::kSize> bytes_{};
  std::size_t headers_length_ = 0;  // through the BTH
  std::size_t l3_offset_ = 0;
  IpVersion ip_version_ = IpVersion::kV4;
  // IPv4: bytes [l3 - 8, l3 + 40) of the template as little-endian words, with the
  // per-packet fields (total length, checksum, UDP length, opcode, SE, PadCnt, AckReq,
  // PSN) zero, and the IPv4 header's one's complement sum without length and checksum.
  std::array<uint64_t, 6> ipv4_words_{};
  uint32_t ipv4_partial_sum_ = 0;
  // A reply's source and destination addresses as they appear in its IP header (our destination, then our
  // source): 8 bytes for IPv4, 32 for IPv6.
  std::array<uint8_t, 2 * Ipv6::kAddrSize> reply_addresses_{};
};

}  // namespace uroce::proto
