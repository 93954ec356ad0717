// Socket addresses and the forms the provider uses (config::IpAddress, RoCEv2 GIDs, IB MTU codes), shared by
// QPs (UroceConnect) and connectors. Control path.
#pragma once

#include <cstdint>
#include <optional>

#include <sys/socket.h>

#include "api/ndk_types.h"
#include "config/config.h"
#include "dataplane/qpn.h"
#include "proto/packet_builder.h"

namespace uroce::ndk::detail {

struct SocketEndpoint {
  config::IpAddress ip;
  uint16_t port = 0;  // host order
};

[[nodiscard]] bool is_valid_path_mtu(uint32_t mtu) noexcept;
// IBTA's MTU code (1 = 256 ... 5 = 4096) and back; 0 for anything else.
[[nodiscard]] uint8_t ib_mtu_code(uint32_t mtu) noexcept;
[[nodiscard]] uint32_t mtu_of_ib_code(uint8_t code) noexcept;

// The address of a sockaddr_in or sockaddr_in6 (the length is not checked: UroceConnect's attributes carry none).
[[nodiscard]] std::optional<config::IpAddress> ip_of(const sockaddr* address) noexcept;
// Address and port, with the length checked against the family.
[[nodiscard]] std::optional<SocketEndpoint> endpoint_of(const sockaddr* address, uint32_t length) noexcept;
[[nodiscard]] bool same_address(const config::IpAddress& a, const config::IpAddress& b) noexcept;
[[nodiscard]] bool is_any_address(const config::IpAddress& a) noexcept;
// The port that owns `local`, or without one the first port with an address of that version.
[[nodiscard]] std::optional<dataplane::PortIndex> port_for(const config::Config& config,
                                                           const std::optional<config::IpAddress>& local,
                                                           bool v6) noexcept;
// Writes the endpoint as a sockaddr_in/in6 into `address` (NDK's in/out length: STATUS_BUFFER_TOO_SMALL with the
// size needed when *length is short).
NTSTATUS write_endpoint(const SocketEndpoint& endpoint, sockaddr* address, uint32_t* length) noexcept;

}  // namespace uroce::ndk::detail
