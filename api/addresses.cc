#include "api/addresses.h"

#include <algorithm>
#include <cstring>

#include <netinet/in.h>

namespace uroce::ndk::detail {

bool is_valid_path_mtu(uint32_t mtu) noexcept { return ib_mtu_code(mtu) != 0; }

uint8_t ib_mtu_code(uint32_t mtu) noexcept {
  switch (mtu) {
    case 256:
      return 1;
    case 512:
      return 2;
    case 1024:
      return 3;
    case 2048:
      return 4;
    case 4096:
      return 5;
    default:
      return 0;
  }
}

uint32_t mtu_of_ib_code(uint8_t code) noexcept { return code >= 1 && code <= 5 ? 128u << code : 0; }

std::optional<config::IpAddress> ip_of(const sockaddr* address) noexcept {
  if (address == nullptr) return std::nullopt;
  config::IpAddress ip;
  if (address->sa_family == AF_INET) {
    sockaddr_in in{};
    std::memcpy(&in, address, sizeof in);
    std::memcpy(ip.bytes.data(), &in.sin_addr, 4);
    return ip;
  }
  if (address->sa_family == AF_INET6) {
    sockaddr_in6 in6{};
    std::memcpy(&in6, address, sizeof in6);
    ip.is_v6 = true;
    ip.prefix_length = 128;
    std::memcpy(ip.bytes.data(), &in6.sin6_addr, 16);
    return ip;
  }
  return std::nullopt;
}

std::optional<SocketEndpoint> endpoint_of(const sockaddr* address, uint32_t length) noexcept {
  if (address == nullptr || length < sizeof(sa_family_t)) return std::nullopt;
  if (address->sa_family == AF_INET && length >= sizeof(sockaddr_in)) {
    sockaddr_in in{};
    std::memcpy(&in, address, sizeof in);
    return SocketEndpoint{*ip_of(address), ntohs(in.sin_port)};
  }
  if (address->sa_family == AF_INET6 && length >= sizeof(sockaddr_in6)) {
    sockaddr_in6 in6{};
    std::memcpy(&in6, address, sizeof in6);
    return SocketEndpoint{*ip_of(address), ntohs(in6.sin6_port)};
  }
  return std::nullopt;
}

bool same_address(const config::IpAddress& a, const config::IpAddress& b) noexcept {
  return a.is_v6 == b.is_v6 && std::memcmp(a.bytes.data(), b.bytes.data(), a.is_v6 ? 16 : 4) == 0;
}

bool is_any_address(const config::IpAddress& a) noexcept {
  return std::all_of(a.bytes.begin(), a.bytes.begin() + (a.is_v6 ? 16 : 4), [](uint8_t b) { return b == 0; });
}

std::optional<dataplane::PortIndex> port_for(const config::Config& config,
                                             const std::optional<config::IpAddress>& local, bool v6) noexcept {
  for (std::size_t p = 0; p < config.ports.size(); ++p) {
    for (const config::IpAddress& a : config.ports[p].addresses) {
      if (local ? same_address(a, *local) : a.is_v6 == v6) return static_cast<dataplane::PortIndex>(p);
    }
  }
  return std::nullopt;
}

NTSTATUS write_endpoint(const SocketEndpoint& endpoint, sockaddr* address, uint32_t* length) noexcept {
  if (length == nullptr) return STATUS_INVALID_PARAMETER;
  const uint32_t needed = endpoint.ip.is_v6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (*length < needed || address == nullptr) {
    *length = needed;
    return STATUS_BUFFER_TOO_SMALL;
  }
  if (endpoint.ip.is_v6) {
    sockaddr_in6 in6{};
    in6.sin6_family = AF_INET6;
    in6.sin6_port = htons(endpoint.port);
    std::memcpy(&in6.sin6_addr, endpoint.ip.bytes.data(), 16);
    std::memcpy(address, &in6, sizeof in6);
  } else {
    sockaddr_in in{};
    in.sin_family = AF_INET;
    in.sin_port = htons(endpoint.port);
    std::memcpy(&in.sin_addr, endpoint.ip.bytes.data(), 4);
    std::memcpy(address, &in, sizeof in);
  }
  *length = needed;
  return STATUS_SUCCESS;
}

}  // namespace uroce::ndk::detail
