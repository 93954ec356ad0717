// ARP (RFC 826) and IPv6 Neighbor Discovery (RFC 4861 §4.3, §4.4, §7) for the ports' own addresses.
//
// Engine 0 owns all of it: ARP and ICMPv6 frames that arrive on another engine's queue are redirected to
// engine 0 like packets for its QPs. The neighbour table therefore has one writer and is read only there, so
// it needs no atomics or locks; the control path reaches it through engine 0's mailbox (Dataplane::resolve).
// Neighbour traffic is a few packets per peer, so funnelling it through one engine costs nothing.
//
// Engine 0 answers ARP requests and Neighbor Solicitations for its addresses (real kernels such as rxe will
// not send to us otherwise), learns the senders of requests and solicitations that address us, and sends
// requests and solicitations for resolve(). Every neighbour is treated as an attacker that may send with any
// address:
// - a reply or advertisement only completes an entry resolve() asked for (RFC 4861 §7.2.5: an advertisement for an
//   unknown target is discarded; Linux's arp_accept=0 does the same for ARP replies), so unsolicited replies can
//   neither fill the table nor evict the peers resolve() found;
// - nothing unsolicited (a gratuitous ARP, a reply, an advertisement with the Override flag, a request naming the
//   peer as its sender) changes a known address: it only changes when resolve() asks again, once the entry's
//   lifetime (60 s) is over, so that a neighbour cannot re-point the next connection to a peer at its own MAC;
// - a sender with a group, zero or our own MAC, or with our own, a group or the broadcast address, is refused;
// - the table's hash is seeded per process (CSPRNG), so a neighbour cannot aim request senders at a victim's probe
//   window, and an entry learned from a request never replaces one resolve() made.
// An established QP keeps the MAC it connected with.
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

// Fixed-size open-addressing table: no allocation after construction, bounded probing. The `now` arguments and
// the lifetime share one unit (engine 0 passes TSC cycles).
class NeighborTable {
 public:
  static constexpr std::size_t kCapacity = 1024;
  static constexpr std::size_t kProbeLimit = 16;

  // `lifetime`: how long a learned address is used before resolve() asks for it again.
  explicit NeighborTable(uint64_t lifetime = UINT64_MAX) noexcept;

  // The address of a complete entry within its lifetime.
  [[nodiscard]] std::optional<proto::MacAddr> lookup(const NeighborKey& key, uint64_t now) const noexcept;
  // Marks `key` asked for, adding an entry unless there is one (a full probe window gives up an entry nobody asked
  // for): the answer may complete it. Called before asking for the address.
  void await(const NeighborKey& key) noexcept;
  // An answer, or a sender that addressed us: completes an entry that is asked for; renews a complete one whose
  // address it repeats (a different address is ignored, and counted as a conflict by the caller); adds an entry only
  // if `create` and its probe window has a free slot. Returns false for an address it ignored.
  bool learn(const NeighborKey& key, proto::MacAddr mac, bool create, uint64_t now) noexcept;

 private:
  struct Entry {
    bool used = false;
    bool complete = false;
    bool asked = false;  // await()ed and not answered yet
    bool ours = false;   // made by await(), not learned from a request
    NeighborKey key;
    proto::MacAddr mac;
    uint64_t learned_at = 0;
  };
  [[nodiscard]] std::size_t home_slot(const NeighborKey& key) const noexcept;
  // The entry for `key`, or nullptr; `free_slot` gets the first unused slot of its probe window, or nullptr.
  [[nodiscard]] Entry* find(const NeighborKey& key, Entry** free_slot) noexcept;
  std::array<Entry, kCapacity> entries_{};
  uint64_t lifetime_;
  uint64_t seed_;
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
