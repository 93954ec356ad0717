#include "proto/rdma_cm.h"

#include <algorithm>

namespace uroce::proto {

namespace {

// In a cma_hdr an IPv4 address is 12 zero bytes, then the address (not the ::ffff: mapped form of a GID).
void write_address(uint8_t* out, const IpAddress& a) noexcept {
  if (a.is_ipv4()) {
    std::fill_n(out, 12, uint8_t{0});
    detail::store_be<4>(out + 12, a.ipv4());
  } else {
    std::copy(a.gid.begin(), a.gid.end(), out);
  }
}

IpAddress read_address(const uint8_t* in, bool ipv4) noexcept {
  if (ipv4) return IpAddress::from_ipv4(detail::load_be<4>(in + 12));
  IpAddress a;
  std::copy_n(in, 16, a.gid.begin());
  return a;
}

}  // namespace

bool IpAddress::is_ipv4() const noexcept { return gid_is_ipv4_mapped(gid); }

IpAddress IpAddress::from_ipv4(uint32_t host_order) noexcept { return IpAddress{gid_from_ipv4(Ipv4Addr{host_order})}; }

uint32_t IpAddress::ipv4() const noexcept { return gid_to_ipv4(gid).value(); }

void write_cma_hdr(std::span<uint8_t, CmaHdr::kSize> out, const IpEndpoint& source,
                   const IpEndpoint& destination) noexcept {
  const HeaderView<CmaHdr, uint8_t> h(out.data());
  h.set(CmaHdr::cma_version, CmaHdr::kVersion);
  out[1] = 0;
  h.set(CmaHdr::ip_version, source.address.is_ipv4() ? 4 : 6);
  h.set(CmaHdr::port, source.port);
  write_address(out.data() + CmaHdr::kSrcAddrOffset, source.address);
  write_address(out.data() + CmaHdr::kDstAddrOffset, destination.address);
}

std::optional<CmaHdrFields> read_cma_hdr(std::span<const uint8_t, CmaHdr::kSize> in) noexcept {
  const HeaderView<CmaHdr, const uint8_t> h(in.data());
  if (h.get(CmaHdr::cma_version) != CmaHdr::kVersion) return std::nullopt;
  const uint8_t version = h.get(CmaHdr::ip_version);
  if (version != 4 && version != 6) return std::nullopt;
  CmaHdrFields f;
  f.source.address = read_address(in.data() + CmaHdr::kSrcAddrOffset, version == 4);
  f.source.port = h.get(CmaHdr::port);
  f.destination = read_address(in.data() + CmaHdr::kDstAddrOffset, version == 4);
  return f;
}

}  // namespace uroce::proto
