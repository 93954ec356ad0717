// ARP (RFC 826) and IPv6 Neighbor Discovery (RFC 4861 §4.3, §4.4, §7) for the ports' own addresses.
//
// Engine 0 owns all of it: ARP and ICMPv6 frames that arrive on another engine's queue are redirected to
// engine 0 like packets for its QPs. The neighbour table therefore has one writer and is read only there, so
// it needs no atomics or locks; the control path reaches it through engine 0's mailbox (Dataplane::resolve).
// Neighbour traffic is a few packets per peer, so funnelling it through one engine costs nothing.
//
// Engine 0 answers ARP requests and Neighbor Solicitations for its addresses (real kernels such as rxe will
// not send to us otherwise), learns the senders of requests and solicitations that address us, and sends
// requests and solicitations for resolve(). A reply or advertisement only completes or refreshes an entry that
// exists: resolve() creates an incomplete one before it asks (RFC 4861 §7.2.5: an advertisement for an unknown
// target is discarded; Linux's arp_accept=0 does the same for ARP replies). So unsolicited replies cannot fill the
// table and evict the peers that resolve() found, and an advertisement without the Override flag does not replace
// a known address (§7.2.5). Requests and solicitations for our address still add their sender, as RFC 826 and
// RFC 4861 §7.2.3 say (and Linux does); a full probe window replaces its oldest entry, and an established QP keeps
// the MAC it connected with.
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

  // The address of a complete entry.
  [[nodiscard]] std::optional<proto::MacAddr> lookup(const NeighborKey& key) const noexcept;
  // Adds an incomplete entry for `key` unless there is one: a reply or advertisement may complete it. Called
  // before asking for the address.
  void await(const NeighborKey& key) noexcept;
  // Sets an existing entry's address (completing it); adds an entry only if `create`.
  void learn(const NeighborKey& key, proto::MacAddr mac, bool create) noexcept;
  // A Neighbor Advertisement (RFC 4861 §7.2.5): completes an incomplete entry; replaces a complete entry's address
  // only with the Override flag; never creates one.
  void advertise(const NeighborKey& key, proto::MacAddr mac, bool override) noexcept;

 private:
  struct Entry {
    bool used = false;
    bool complete = false;
    NeighborKey key;
    proto::MacAddr mac;
  };
  [[nodiscard]] static std::size_t home_slot(const NeighborKey& key) noexcept;
  // The entry for `key`, or nullptr; `free_slot` gets the first unused slot of its probe window (or its home slot,
  // which a new entry replaces when the window is full).
  [[nodiscard]] Entry* find(const NeighborKey& key, Entry** free_slot) noexcept;
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
