#include "dataplane/neighbor.h"

#include <cstring>

#include <rte_mbuf.h>

#include "dataplane/engine.h"
#include "proto/entropy.h"
#include "proto/headers.h"

namespace uroce::dataplane {

namespace {

using proto::WireField;

// ARP for IPv4 over Ethernet (RFC 826), after the Ethernet header.
struct Arp {
  static constexpr std::size_t kSize = 28;
  static constexpr WireField<uint16_t, 0, 2> hardware_type{};
  static constexpr WireField<uint16_t, 2, 2> protocol_type{};
  static constexpr WireField<uint8_t, 4, 1> hardware_length{};
  static constexpr WireField<uint8_t, 5, 1> protocol_length{};
  static constexpr WireField<uint16_t, 6, 2> operation{};
  static constexpr WireField<proto::MacAddr, 8, 6> sender_mac{};
  static constexpr WireField<proto::Ipv4Addr, 14, 4> sender_ip{};
  static constexpr WireField<proto::MacAddr, 18, 6> target_mac{};
  static constexpr WireField<proto::Ipv4Addr, 24, 4> target_ip{};
};
constexpr uint16_t kArpHardwareEthernet = 1;
constexpr uint16_t kArpRequest = 1;
constexpr uint16_t kArpReply = 2;

// ICMPv6 Neighbor Solicitation / Advertisement (RFC 4861 §4.3, §4.4): type, code, checksum, 4 bytes of
// reserved/flags, the 16-byte target, then options.
struct NeighborMessage {
  static constexpr std::size_t kSize = 24;
  static constexpr std::size_t kTargetOffset = 8;
  static constexpr WireField<uint8_t, 0, 1> type{};
  static constexpr WireField<uint8_t, 1, 1> code{};
  static constexpr WireField<uint16_t, 2, 2> checksum{};
  static constexpr WireField<uint8_t, 4, 1> flags{};  // NA: R(0x80) S(0x40) O(0x20)
};
constexpr uint8_t kIcmpv6NextHeader = 58;
constexpr uint8_t kNeighborSolicitation = 135;
constexpr uint8_t kNeighborAdvertisement = 136;
constexpr uint8_t kNaSolicited = 0x40;
constexpr uint8_t kNaOverride = 0x20;
constexpr uint8_t kOptionSourceLinkAddress = 1;
constexpr uint8_t kOptionTargetLinkAddress = 2;
constexpr std::size_t kLinkAddressOptionSize = 8;
constexpr uint8_t kNdHopLimit = 255;  // RFC 4861 §7.1: anything else came through a router
constexpr std::size_t kMinEthernetFrame = 60;
constexpr proto::MacAddr kBroadcastMac{0xFFFFFFFFFFFF};

bool is_multicast(const Ipv6Bytes& a) noexcept { return a[0] == 0xFF; }
bool is_unspecified(const Ipv6Bytes& a) noexcept {
  for (uint8_t b : a)
    if (b != 0) return false;
  return true;
}

// ff02::1:ffXX:XXXX and its MAC 33:33:ff:XX:XX:XX (RFC 4291 §2.7.1, RFC 2464 §7).
Ipv6Bytes solicited_node_address(const Ipv6Bytes& target) noexcept {
  Ipv6Bytes a{0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xFF, target[13], target[14], target[15]};
  return a;
}
proto::MacAddr multicast_mac(const Ipv6Bytes& group) noexcept {
  return proto::MacAddr{uint64_t{0x3333} << 32 | uint64_t{group[12]} << 24 | uint64_t{group[13]} << 16 |
                        uint64_t{group[14]} << 8 | group[15]};
}
constexpr Ipv6Bytes kAllNodes{0xFF, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01};

uint32_t add_be16_words(uint32_t sum, const uint8_t* p, std::size_t length) noexcept {
  for (std::size_t i = 0; i + 1 < length; i += 2) sum += uint32_t{p[i]} << 8 | p[i + 1];
  if (length % 2 != 0) sum += uint32_t{p[length - 1]} << 8;
  return sum;
}

// The link-layer address option of `type` in the options after a neighbour message, if well formed.
// Returns false if any option is malformed (zero length or running past the end: RFC 4861 §7.1.1).
bool find_link_address(const uint8_t* options, std::size_t length, uint8_t type, std::optional<proto::MacAddr>& out) {
  std::size_t at = 0;
  while (at + 2 <= length) {
    const std::size_t option_length = std::size_t{options[at + 1]} * 8;
    if (option_length == 0 || at + option_length > length) return false;
    if (options[at] == type && option_length >= kLinkAddressOptionSize) out = mac_from_bytes(options + at + 2);
    at += option_length;
  }
  return at == length;
}

// A fresh single-segment frame of `length` bytes (padded to the Ethernet minimum), zero-filled.
rte_mbuf* new_frame(EngineContext& ctx, std::size_t length) noexcept {
  rte_mbuf* m = ctx.alloc_mbuf();
  if (m == nullptr) return nullptr;
  const std::size_t frame = length < kMinEthernetFrame ? kMinEthernetFrame : length;
  auto* data = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(frame)));
  if (data == nullptr) {
    rte_pktmbuf_free(m);
    return nullptr;
  }
  std::memset(data, 0, frame);
  return m;
}

bool send_arp(EngineContext& ctx, const Port& port, uint16_t operation, proto::MacAddr eth_dst,
              proto::MacAddr target_mac, proto::Ipv4Addr sender_ip, proto::Ipv4Addr target_ip) noexcept {
  rte_mbuf* m = new_frame(ctx, proto::Eth::kSize + Arp::kSize);
  if (m == nullptr) return false;
  auto* frame = rte_pktmbuf_mtod(m, uint8_t*);
  const proto::MutView<proto::Eth> eth{frame};
  eth.set(proto::Eth::dst, eth_dst);
  eth.set(proto::Eth::src, port.mac);
  eth.set(proto::Eth::ether_type, proto::kEtherTypeArp);
  const proto::MutView<Arp> arp{frame + proto::Eth::kSize};
  arp.set(Arp::hardware_type, kArpHardwareEthernet);
  arp.set(Arp::protocol_type, proto::kEtherTypeIpv4);
  arp.set(Arp::hardware_length, 6);
  arp.set(Arp::protocol_length, 4);
  arp.set(Arp::operation, operation);
  arp.set(Arp::sender_mac, port.mac);
  arp.set(Arp::sender_ip, sender_ip);
  arp.set(Arp::target_mac, target_mac);
  arp.set(Arp::target_ip, target_ip);
  ctx.send(port.index, m);
  return true;
}

// Writes Ethernet + IPv6 + a neighbour message with one link-layer address option, checksummed.
bool send_neighbor_message(EngineContext& ctx, const Port& port, proto::MacAddr eth_dst, const Ipv6Bytes& src,
                           const Ipv6Bytes& dst, uint8_t type, uint8_t flags, const Ipv6Bytes& target,
                           uint8_t option_type) noexcept {
  constexpr std::size_t kIcmpLength = NeighborMessage::kSize + kLinkAddressOptionSize;
  rte_mbuf* m = new_frame(ctx, proto::Eth::kSize + proto::Ipv6::kSize + kIcmpLength);
  if (m == nullptr) return false;
  auto* frame = rte_pktmbuf_mtod(m, uint8_t*);
  const proto::MutView<proto::Eth> eth{frame};
  eth.set(proto::Eth::dst, eth_dst);
  eth.set(proto::Eth::src, port.mac);
  eth.set(proto::Eth::ether_type, proto::kEtherTypeIpv6);
  uint8_t* const ip = frame + proto::Eth::kSize;
  const proto::MutView<proto::Ipv6> ip6{ip};
  ip6.set(proto::Ipv6::version, 6);
  ip6.set(proto::Ipv6::payload_length, static_cast<uint16_t>(kIcmpLength));
  ip6.set(proto::Ipv6::next_header, kIcmpv6NextHeader);
  ip6.set(proto::Ipv6::hop_limit, kNdHopLimit);
  std::memcpy(ip + proto::Ipv6::kSrcOffset, src.data(), 16);
  std::memcpy(ip + proto::Ipv6::kDstOffset, dst.data(), 16);
  uint8_t* const icmp = ip + proto::Ipv6::kSize;
  const proto::MutView<NeighborMessage> msg{icmp};
  msg.set(NeighborMessage::type, type);
  msg.set(NeighborMessage::code, 0);
  msg.set(NeighborMessage::flags, flags);
  std::memcpy(icmp + NeighborMessage::kTargetOffset, target.data(), 16);
  uint8_t* const option = icmp + NeighborMessage::kSize;
  option[0] = option_type;
  option[1] = 1;  // length in units of 8 bytes
  mac_to_bytes(port.mac, option + 2);
  msg.set(NeighborMessage::checksum, icmpv6_checksum(ip, icmp, kIcmpLength));
  ctx.send(port.index, m);
  return true;
}

}  // namespace

NeighborKey neighbor_key(PortIndex port, proto::Ipv4Addr ip) noexcept {
  NeighborKey k{port, false, {}};
  const uint32_t v = ip.value();
  k.ip[0] = static_cast<uint8_t>(v >> 24);
  k.ip[1] = static_cast<uint8_t>(v >> 16);
  k.ip[2] = static_cast<uint8_t>(v >> 8);
  k.ip[3] = static_cast<uint8_t>(v);
  return k;
}
NeighborKey neighbor_key(PortIndex port, const Ipv6Bytes& ip) noexcept { return NeighborKey{port, true, ip}; }
NeighborKey neighbor_key(PortIndex port, const config::IpAddress& ip) noexcept {
  if (ip.is_v6) return neighbor_key(port, ip.bytes);
  return neighbor_key(port, proto::Ipv4Addr{uint32_t{ip.bytes[0]} << 24 | uint32_t{ip.bytes[1]} << 16 |
                                            uint32_t{ip.bytes[2]} << 8 | ip.bytes[3]});
}

NeighborTable::NeighborTable(uint64_t lifetime) noexcept : lifetime_(lifetime), seed_(0) {
  proto::random_bytes(&seed_, sizeof seed_);
}

// FNV-1a over the key, started from a per-process random seed: which slot an address lands in is not known outside.
std::size_t NeighborTable::home_slot(const NeighborKey& key) const noexcept {
  uint64_t h = 0xCBF29CE484222325ull ^ seed_;
  auto mix = [&h](uint8_t b) { h = (h ^ b) * 0x100000001B3ull; };
  mix(static_cast<uint8_t>(key.port));
  mix(static_cast<uint8_t>(key.port >> 8));
  mix(key.is_v6 ? 1 : 0);
  for (uint8_t b : key.ip) mix(b);
  h ^= h >> 32;
  return static_cast<std::size_t>(h % kCapacity);
}

NeighborTable::Entry* NeighborTable::find(const NeighborKey& key, Entry** free_slot) noexcept {
  const std::size_t home = home_slot(key);
  *free_slot = nullptr;
  for (std::size_t i = 0; i < kProbeLimit; ++i) {
    Entry& e = entries_[(home + i) % kCapacity];
    if (e.used && e.key == key) return &e;
    if (!e.used && *free_slot == nullptr) *free_slot = &e;
  }
  return nullptr;
}

std::optional<proto::MacAddr> NeighborTable::lookup(const NeighborKey& key, uint64_t now) const noexcept {
  const std::size_t home = home_slot(key);
  for (std::size_t i = 0; i < kProbeLimit; ++i) {
    const Entry& e = entries_[(home + i) % kCapacity];
    if (!e.used || !(e.key == key)) continue;
    if (!e.complete || now - e.learned_at >= lifetime_) return std::nullopt;
    return e.mac;
  }
  return std::nullopt;
}

void NeighborTable::await(const NeighborKey& key) noexcept {
  Entry* free_slot = nullptr;
  if (Entry* e = find(key, &free_slot)) {
    e->asked = true;
    return;
  }
  if (free_slot == nullptr) {
    // A full probe window: give up an entry nobody is waiting for, one learned from a request before one we asked
    // for. Only if every entry of the window is awaited does the home slot go.
    const std::size_t home = home_slot(key);
    for (const bool spare_ours : {true, false}) {
      for (std::size_t i = 0; i < kProbeLimit && free_slot == nullptr; ++i) {
        Entry& e = entries_[(home + i) % kCapacity];
        if (!e.asked && !(spare_ours && e.ours)) free_slot = &e;
      }
    }
    if (free_slot == nullptr) free_slot = &entries_[home];
  }
  *free_slot = Entry{true, false, true, true, key, {}, 0};
}

bool NeighborTable::learn(const NeighborKey& key, proto::MacAddr mac, bool create, uint64_t now) noexcept {
  Entry* free_slot = nullptr;
  Entry* const e = find(key, &free_slot);
  if (e == nullptr) {
    if (create && free_slot != nullptr) *free_slot = Entry{true, true, false, false, key, mac, now};
    return true;
  }
  if (e->asked || !e->complete) {
    e->complete = true;
    e->asked = false;
    e->mac = mac;
    e->learned_at = now;
    return true;
  }
  if (!(e->mac == mac)) return false;  // only our own question, after the lifetime, changes a known address
  e->learned_at = now;
  return true;
}

namespace {

// A neighbour message's sender that no peer can be: a group (multicast, broadcast) MAC; on a port with a MAC, the
// zero MAC or our own. (The in-process ring link's ports have none: both ends are 00:00:00:00:00:00.)
bool refused_sender_mac(const Port& port, proto::MacAddr mac) noexcept {
  if (proto::is_group_mac(mac)) return true;
  return port.mac.value() != 0 && (mac.value() == 0 || mac == port.mac);
}

}  // namespace

uint16_t icmpv6_checksum(const uint8_t* ipv6_header, const uint8_t* icmp, std::size_t length) noexcept {
  uint32_t sum = add_be16_words(0, ipv6_header + proto::Ipv6::kSrcOffset, 32);  // source and destination
  sum += static_cast<uint32_t>(length >> 16) + static_cast<uint32_t>(length & 0xFFFF);
  sum += kIcmpv6NextHeader;
  sum = add_be16_words(sum, icmp, length);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

void handle_arp(EngineContext& ctx, NeighborTable& table, const Port& port, rte_mbuf* m) noexcept {
  EngineCounters& c = ctx.counters();
  const auto* frame = rte_pktmbuf_mtod(m, const uint8_t*);
  if (m->data_len < proto::Eth::kSize + Arp::kSize) {
    c.rx_neighbor_malformed.add();
    rte_pktmbuf_free(m);
    return;
  }
  const proto::View<Arp> arp{frame + proto::Eth::kSize};
  if (arp.get(Arp::hardware_type) != kArpHardwareEthernet || arp.get(Arp::protocol_type) != proto::kEtherTypeIpv4 ||
      arp.get(Arp::hardware_length) != 6 || arp.get(Arp::protocol_length) != 4) {
    c.rx_neighbor_malformed.add();
    rte_pktmbuf_free(m);
    return;
  }
  const uint16_t operation = arp.get(Arp::operation);
  const proto::MacAddr sender_mac = arp.get(Arp::sender_mac);
  const proto::Ipv4Addr sender_ip = arp.get(Arp::sender_ip);
  const proto::Ipv4Addr target_ip = arp.get(Arp::target_ip);
  rte_pktmbuf_free(m);  // everything needed is copied out

  const bool for_us = port.owns(target_ip);
  // Nobody's sender: a group, zero or our own MAC; our own, a multicast or the broadcast address. (Sender 0.0.0.0 is
  // an address probe, RFC 5227: answered, nothing learned.)
  if (refused_sender_mac(port, sender_mac) || port.owns(sender_ip) || proto::is_group_ipv4(sender_ip)) {
    c.rx_neighbor_refused.add();
    return;
  }
  // RFC 826 "merge", within what NeighborTable::learn allows: complete the entry resolve() awaits, renew a known
  // sender, and add the sender if it asks for our address. A reply adds nothing: one nobody asked for would only
  // fill the table.
  if (sender_ip.value() != 0 &&
      !table.learn(neighbor_key(port.index, sender_ip), sender_mac, for_us && operation == kArpRequest, ctx.now()))
    c.rx_neighbor_refused.add();
  if (operation == kArpReply) {
    c.arp_replies_received.add();
  } else if (operation == kArpRequest && for_us) {
    if (send_arp(ctx, port, kArpReply, sender_mac, sender_mac, target_ip, sender_ip)) c.arp_requests_answered.add();
  }
}

void handle_icmpv6(EngineContext& ctx, NeighborTable& table, const Port& port, rte_mbuf* m) noexcept {
  EngineCounters& c = ctx.counters();
  const auto* frame = rte_pktmbuf_mtod(m, const uint8_t*);
  const uint8_t* const ip = frame + proto::Eth::kSize;
  const uint8_t* const icmp = ip + proto::Ipv6::kSize;
  const std::size_t available = m->data_len;
  auto drop = [&](Counter& counter) {
    counter.add();
    rte_pktmbuf_free(m);
  };
  if (available < proto::Eth::kSize + proto::Ipv6::kSize + 1) return drop(c.rx_neighbor_malformed);
  const proto::Ipv6View ip6{ip};
  const std::size_t length = ip6.get(proto::Ipv6::payload_length);
  if (proto::Eth::kSize + proto::Ipv6::kSize + length > available) return drop(c.rx_neighbor_malformed);
  const uint8_t type = icmp[0];
  if (type != kNeighborSolicitation && type != kNeighborAdvertisement) return drop(c.rx_not_roce);  // MLD, RA, ...
  const proto::View<NeighborMessage> msg{icmp};
  if (length < NeighborMessage::kSize || msg.get(NeighborMessage::code) != 0 ||
      ip6.get(proto::Ipv6::hop_limit) != kNdHopLimit || icmpv6_checksum(ip, icmp, length) != 0)
    return drop(c.rx_neighbor_malformed);
  Ipv6Bytes target;
  Ipv6Bytes source;
  std::memcpy(target.data(), icmp + NeighborMessage::kTargetOffset, 16);
  std::memcpy(source.data(), ip + proto::Ipv6::kSrcOffset, 16);
  const proto::MacAddr eth_source = proto::EthView{frame}.get(proto::Eth::src);
  std::optional<proto::MacAddr> link_address;
  const uint8_t option_type = type == kNeighborSolicitation ? kOptionSourceLinkAddress : kOptionTargetLinkAddress;
  if (is_multicast(target) ||
      !find_link_address(icmp + NeighborMessage::kSize, length - NeighborMessage::kSize, option_type, link_address))
    return drop(c.rx_neighbor_malformed);
  rte_pktmbuf_free(m);
  // Nobody's link address or source: a group, zero or our own MAC; one of our own addresses, or a multicast one.
  if ((link_address && refused_sender_mac(port, *link_address)) || refused_sender_mac(port, eth_source) ||
      port.owns(source) || is_multicast(source)) {
    c.rx_neighbor_refused.add();
    return;
  }

  if (type == kNeighborAdvertisement) {
    // The Override flag (RFC 4861 §7.2.5) replaces no known address here: that needs our own solicitation, once the
    // entry's lifetime is over (neighbor.h).
    c.nd_advertisements_received.add();
    if (link_address && !table.learn(neighbor_key(port.index, target), *link_address, false, ctx.now()))
      c.rx_neighbor_refused.add();
    return;
  }
  if (!port.owns(target)) return;
  // A solicitation from the unspecified address is duplicate address detection: answer all nodes, not
  // solicited (RFC 4861 §7.2.4). Otherwise learn the solicitor and answer it directly.
  if (is_unspecified(source)) {
    if (link_address) {  // RFC 4861 §7.1.1: a solicitation from the unspecified address carries no link address
      c.rx_neighbor_malformed.add();
      return;
    }
    if (send_neighbor_message(ctx, port, multicast_mac(kAllNodes), target, kAllNodes, kNeighborAdvertisement,
                              kNaOverride, target, kOptionTargetLinkAddress))
      c.nd_solicitations_answered.add();
    return;
  }
  const proto::MacAddr reply_mac = link_address.value_or(eth_source);
  if (link_address && !table.learn(neighbor_key(port.index, source), *link_address, true, ctx.now()))
    c.rx_neighbor_refused.add();
  if (send_neighbor_message(ctx, port, reply_mac, target, source, kNeighborAdvertisement, kNaSolicited | kNaOverride,
                            target, kOptionTargetLinkAddress))
    c.nd_solicitations_answered.add();
}

bool send_arp_request(EngineContext& ctx, const Port& port, proto::Ipv4Addr target) noexcept {
  if (port.ipv4.empty()) return false;
  if (!send_arp(ctx, port, kArpRequest, kBroadcastMac, proto::MacAddr{0}, port.ipv4.front(), target)) return false;
  ctx.counters().arp_requests_sent.add();
  return true;
}

bool send_neighbor_solicitation(EngineContext& ctx, const Port& port, const Ipv6Bytes& target) noexcept {
  if (port.ipv6.empty()) return false;
  const Ipv6Bytes group = solicited_node_address(target);
  if (!send_neighbor_message(ctx, port, multicast_mac(group), port.ipv6.front(), group, kNeighborSolicitation, 0,
                             target, kOptionSourceLinkAddress))
    return false;
  ctx.counters().nd_solicitations_sent.add();
  return true;
}

}  // namespace uroce::dataplane
