// ARP (RFC 826) and IPv6 Neighbor Discovery (RFC 4861 §4.3, §4.4, §7) for the ports' own addresses.
//
// Engine 0 owns all of it: ARP and ICMPv6 frames that arrive on another engine's queue are redirected to
// engine 0 like packets for its QPs. The neighbour table therefore has one writer and is read only there, so
// it needs no atomics or locks; the control path reaches it through engine 0's mailbox (Dataplane::resolve).
// Neighbour traffic is a few packets per peer, so funnelling it through one engine costs nothing.
//
// Engine 0 answers ARP requests and Neighbor Solicitations for its addresses (real kernels such as rxe will
// not send to us otherwise), learns senders that address us and every reply, and sends requests and
// solicitations for resolve().
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "dataplane/port.h"
#include "dataplane/qpn.h"
#include "proto/types.h"

struct rte_mbuf;

namespace uroce::dataplane {

class EngineContext;

struct NeighborKey {
  PortIndex port = 0;
  bool is_v6 = false;
  Ipv6Bytes ip{};  // IPv4 in bytes 0..3, the rest zero
  bool operator==(const NeighborKey&) const = default;
};

[[nodiscard]] NeighborKey neighbor_key(PortIndex port, proto::Ipv4Addr ip) noexcept;
[[nodiscard]] NeighborKey neighbor_key(PortIndex port, const Ipv6Bytes& ip) noexcept;
[[nodiscard]] NeighborKey neighbor_key(PortIndex port, const config::IpAddress& ip) noexcept;

// Fixed-size open-addressing table: no allocation after construction, bounded probing. When a probe window is
// full the oldest-probed entry is replaced; peers re-resolve if they matter.
class NeighborTable {
 public:
  static constexpr std::size_t kCapacity = 1024;
  static constexpr std::size_t kProbeLimit = 16;

  [[nodiscard]] std::optional<proto::MacAddr> lookup(const NeighborKey& key) const noexcept;
  // Updates an existing entry; adds one only if `create`.
  void learn(const NeighborKey& key, proto::MacAddr mac, bool create) noexcept;

 private:
  struct Entry {
    bool used = false;
    NeighborKey key;
    proto::MacAddr mac;
  };
  [[nodiscard]] static std::size_t home_slot(const NeighborKey& key) noexcept;
  std::array<Entry, kCapacity> entries_{};
};

// Engine 0's handlers for an untagged ARP / ICMPv6 frame. They own `m` and free it (a reply is a new mbuf).
void handle_arp(EngineContext& ctx, NeighborTable& table, const Port& port, rte_mbuf* m) noexcept;
void handle_icmpv6(EngineContext& ctx, NeighborTable& table, const Port& port, rte_mbuf* m) noexcept;

// Broadcast an ARP request / multicast a Neighbor Solicitation for `target` from `port`. False if no mbuf or
// the port has no address of that family to send from.
[[gnu::cold]] bool send_arp_request(EngineContext& ctx, const Port& port, proto::Ipv4Addr target) noexcept;
[[gnu::cold]] bool send_neighbor_solicitation(EngineContext& ctx, const Port& port, const Ipv6Bytes& target) noexcept;

// The ICMPv6 checksum (RFC 4443 §2.3) over the pseudo-header of `ipv6_header` and `length` bytes of `icmp`,
// with the message's checksum field taken as is: 0 over a message whose checksum is right, or the value to
// store over a message whose checksum field is zero.
[[nodiscard]] uint16_t icmpv6_checksum(const uint8_t* ipv6_header, const uint8_t* icmp, std::size_t length) noexcept;

}  // namespace uroce::dataplane
