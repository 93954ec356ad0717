// The RDMA CM conventions on top of the IB CM (Linux cma.c; cm-nvmf-dcqcn.md §1.7): IP addresses as RoCEv2 GIDs,
// the port space and port in the service ID, and the 36-byte `cma_hdr` at the start of a REQ's private data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "proto/cm_messages.h"
#include "proto/packet_builder.h"

namespace uroce::proto {

// Port spaces (Linux `enum rdma_ucm_port_space`). RC connections (rping, perftest -R, nvme-rdma) use TCP's.
inline constexpr uint16_t kRdmaPortSpaceTcp = 0x0106;
inline constexpr uint64_t kRdmaPortSpaceMask = 0xFFFFFFFFFFFF0000;

constexpr uint64_t rdma_cm_service_id(uint16_t port, uint16_t port_space = kRdmaPortSpaceTcp) noexcept {
  return uint64_t{port_space} << 16 | port;
}
constexpr bool is_rdma_cm_service_id(uint64_t service_id, uint16_t port_space = kRdmaPortSpaceTcp) noexcept {
  return (service_id & kRdmaPortSpaceMask) == rdma_cm_service_id(0, port_space);
}
constexpr uint16_t rdma_cm_port(uint64_t service_id) noexcept { return static_cast<uint16_t>(service_id); }

// An IP address as its RoCEv2 GID: IPv6 as is, IPv4 mapped as ::ffff:a.b.c.d (rocev2.md §1.5).
struct IpAddress {
  Gid gid{};
  [[nodiscard]] bool is_ipv4() const noexcept;
  static IpAddress from_ipv4(uint32_t host_order) noexcept;
  [[nodiscard]] uint32_t ipv4() const noexcept;  // host order; meaningful when is_ipv4()
  bool operator==(const IpAddress&) const noexcept = default;
};

struct IpEndpoint {
  IpAddress address;
  uint16_t port = 0;
  bool operator==(const IpEndpoint&) const noexcept = default;
};

// `struct cma_hdr`: version, IP version, the active side's source port, then its source and destination address
// (IPv4: 12 zero bytes, then the address).
struct CmaHdr {
  static constexpr std::size_t kSize = 36;
  static constexpr uint8_t kVersion = 0;
  static constexpr WireField<uint8_t, 0, 1> cma_version{};
  static constexpr WireField<uint8_t, 1, 1, 4, 4> ip_version{};
  static constexpr WireField<uint16_t, 2, 2> port{};
  static constexpr std::size_t kSrcAddrOffset = 4;
  static constexpr std::size_t kDstAddrOffset = 20;
};

// The most a consumer may put after the cma_hdr in a REQ, and in a REP and a REJ.
inline constexpr std::size_t kRdmaCmReqPrivateDataMax = CmReq::private_data.kSize - CmaHdr::kSize;  // 56
inline constexpr std::size_t kRdmaCmRepPrivateDataMax = CmRep::private_data.kSize;                  // 196
inline constexpr std::size_t kRdmaCmRejPrivateDataMax = CmRej::private_data.kSize;                  // 148

// Writes a cma_hdr for a connection from `source` to `destination` (same IP version) into `out`.
void write_cma_hdr(std::span<uint8_t, CmaHdr::kSize> out, const IpEndpoint& source,
                   const IpEndpoint& destination) noexcept;

struct CmaHdrFields {
  IpEndpoint source;      // the active side: its address and port
  IpAddress destination;  // what it connects to (the port is in the service ID)
};

// Reads a REQ's cma_hdr as Linux's passive side checks it (cma_save_ip_info): version 0 and IP version 4 or 6,
// else nothing.
[[nodiscard]] std::optional<CmaHdrFields> read_cma_hdr(std::span<const uint8_t, CmaHdr::kSize> in) noexcept;

}  // namespace uroce::proto
