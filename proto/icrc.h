// RoCEv2 invariant CRC (IBTA Annex A17.3.3, rocev2.md §3).
//
// ICRC = CRC-32 (zlib's) over: 8 bytes of 0xFF standing in for the IB LRH, the IP
// header with its variant fields set to ones (IPv4: TOS, TTL, header checksum;
// IPv6: traffic class, flow label, hop limit), the UDP header with its checksum set
// to ones, the BTH with byte 4 (FECN/BECN/reserved) set to ones, and every byte
// after the BTH up to the ICRC. It is stored least-significant byte first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "proto/crc32.h"

namespace uroce::proto {

enum class IpVersion : uint8_t { kV4 = 4, kV6 = 6 };

// crc32_ieee(0, eight 0xFF bytes): every ICRC starts from here. (The raw, uncomplemented
// register at that point is 0xDEBB20E3, the constant rxe uses.)
inline constexpr uint32_t kIcrcSeed = 0x2144DF1C;

// Both functions read the 8 bytes before `l3` (the end of the Ethernet header, which the ICRC
// replaces with ones): the headers are taken in 16-byte blocks from there. Precondition for
// both: `l3` lies at least 8 bytes into a frame.

// The CRC state after the seed and the masked IP, UDP and BTH headers that start
// at `l3`. Continue it over the rest of the packet with crc32_ieee(); the result
// after the last byte before the ICRC is the ICRC. This is the incremental form for
// packets split across buffers.
uint32_t icrc_headers(const uint8_t* l3, IpVersion version) noexcept;

// The ICRC of a contiguous packet: `l3` is the IP header and `length` counts the
// bytes from it up to (not including) the ICRC field. One CRC pass over masked
// header blocks and the rest of the packet.
// Precondition: length >= IP + UDP + BTH headers.
uint32_t icrc_compute(const uint8_t* l3, std::size_t length, IpVersion version) noexcept;

// The ICRC field is little-endian on the wire (rocev2.md §3.2).
inline uint32_t icrc_load(const uint8_t* field) noexcept {
  return static_cast<uint32_t>(field[0]) | static_cast<uint32_t>(field[1]) << 8 |
         static_cast<uint32_t>(field[2]) << 16 | static_cast<uint32_t>(field[3]) << 24;
}
inline void icrc_store(uint8_t* field, uint32_t icrc) noexcept {
  field[0] = static_cast<uint8_t>(icrc);
  field[1] = static_cast<uint8_t>(icrc >> 8);
  field[2] = static_cast<uint8_t>(icrc >> 16);
  field[3] = static_cast<uint8_t>(icrc >> 24);
}

}  // namespace uroce::proto
