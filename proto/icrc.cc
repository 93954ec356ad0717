#include "proto/icrc.h"

#include "proto/headers.h"

namespace uroce::proto {

uint32_t icrc_headers(const uint8_t* l3, IpVersion version) noexcept {
  // Copy the covered headers once and mask the copy: the packet itself is never
  // modified, and one CRC call over ≤ 60 contiguous bytes is cheaper than several.
  uint8_t masked[Ipv6::kSize + Udp::kSize + Bth::kSize];
  const std::size_t ip_size = version == IpVersion::kV4 ? Ipv4::kSize : Ipv6::kSize;
  const std::size_t size = ip_size + Udp::kSize + Bth::kSize;
  std::memcpy(masked, l3, size);
  if (version == IpVersion::kV4) {
    masked[Ipv4::tos.kOffset] = 0xFF;
    masked[Ipv4::ttl.kOffset] = 0xFF;
    masked[Ipv4::checksum.kOffset] = 0xFF;
    masked[Ipv4::checksum.kOffset + 1] = 0xFF;
  } else {
    // Version stays; traffic class and flow label become ones: 0x6F 0xFF 0xFF 0xFF.
    masked[0] |= 0x0F;
    masked[1] = masked[2] = masked[3] = 0xFF;
    masked[Ipv6::hop_limit.kOffset] = 0xFF;
  }
  uint8_t* udp = masked + ip_size;
  udp[Udp::checksum.kOffset] = udp[Udp::checksum.kOffset + 1] = 0xFF;
  masked[ip_size + Udp::kSize + Bth::resv8a.kOffset] = 0xFF;
  return crc32_ieee(kIcrcSeed, masked, size);
}

}  // namespace uroce::proto
