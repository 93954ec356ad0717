// ARP and Neighbor Discovery across a ring link: port a resolves port b's addresses through engine 0.
#include "dataplane/neighbor.h"

#include <gtest/gtest.h>

#include "loopback_fixture.h"

namespace uroce::dataplane::testing {
namespace {

using namespace std::chrono_literals;

class NeighborTest : public LoopbackTest {};

TEST_F(NeighborTest, ArpResolvesThePeerPortsMac) {
  Dataplane& dp = start(loopback_config());
  auto mac = dp.resolve(kPortA, ipv4(198, 18, 0, 2), 10s);
  ASSERT_TRUE(mac.ok()) << mac.error();
  EXPECT_EQ(*mac, dp.port(kPortB).mac) << mac_to_string(*mac);
  EXPECT_GE(counter(0, "arp_requests_sent"), 1u);
  EXPECT_GE(counter(0, "arp_requests_answered"), 1u);
  EXPECT_GE(counter(0, "arp_replies_received"), 1u);
  // b learnt a from the request that addressed it: resolving the other way needs no new request.
  const uint64_t sent = counter(0, "arp_requests_sent");
  auto back = dp.resolve(kPortB, ipv4(198, 18, 0, 1), 10s);
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(*back, dp.port(kPortA).mac);
  EXPECT_EQ(counter(0, "arp_requests_sent"), sent);
}

TEST_F(NeighborTest, NeighborDiscoveryResolvesThePeerPortsMac) {
  Dataplane& dp = start(loopback_config());
  auto mac = dp.resolve(kPortA, ipv6("fd00::2"), 10s);
  ASSERT_TRUE(mac.ok()) << mac.error();
  EXPECT_EQ(*mac, dp.port(kPortB).mac);
  EXPECT_GE(counter(0, "nd_solicitations_sent"), 1u);
  EXPECT_GE(counter(0, "nd_solicitations_answered"), 1u);
  EXPECT_GE(counter(0, "nd_advertisements_received"), 1u);
  EXPECT_EQ(counter(0, "rx_neighbor_malformed"), 0u);  // our checksums and options are right
}

TEST_F(NeighborTest, UnansweredAddressTimesOutWithAClearError) {
  Dataplane& dp = start(loopback_config());
  auto mac = dp.resolve(kPortA, ipv4(198, 18, 0, 99), 350ms);
  ASSERT_FALSE(mac.ok());
  EXPECT_NE(mac.error().find("198.18.0.99"), std::string::npos) << mac.error();
  EXPECT_GE(counter(0, "arp_requests_sent"), 2u);  // retried every ~100 ms
  EXPECT_EQ(counter(0, "arp_requests_answered"), 0u);

  auto no_v6 = dp.resolve(kPortA, ipv6("fd00::99"), 350ms);
  EXPECT_FALSE(no_v6.ok());
}

TEST_F(NeighborTest, ArpArrivingOnAnotherEngineIsRedirectedToEngineZero) {
  Dataplane& dp = start(loopback_config());
  // A broadcast ARP request for b's address, sent on engine 1's queue: it arrives on engine 1.
  FrameGenerator request(kPortA, 1, [&](uint64_t, std::span<uint8_t> out) -> std::size_t {
    const uint8_t frame[42] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0,  0, 0, 0,
                               0x0a, 0x08, 0x06, 0,    1,    0x08, 0,    6,  4, 0, 1,  // Ethernet/IPv4, request
                               0x02, 0,    0,    0,    0,    0x0a, 198,  18, 0, 1,     // sender
                               0,    0,    0,    0,    0,    0,    198,  18, 0, 2};    // target
    std::copy(std::begin(frame), std::end(frame), out.begin());
    return sizeof(frame);
  });
  run_generator(dp.engine(1), request);
  EXPECT_TRUE(eventually([&] { return counter(0, "arp_requests_answered") == 1; }));
  EXPECT_EQ(counter(1, "redirect_enqueued"), 1u);
  EXPECT_EQ(counter(0, "redirect_received"), 1u);
}

// Frames from a neighbour nobody asked: an ARP reply and a Neighbor Advertisement (Override set) for addresses
// resolve() never asked about, addressed to port b. Neither may create an entry (RFC 4861 §7.2.5; arp_accept=0):
// a stream of them with fresh addresses would otherwise evict the peers resolve() found.
std::size_t unsolicited_arp_reply(std::span<uint8_t> out) {
  const uint8_t frame[42] = {0x02, 0,    0,    0, 0, 0x0b, 0x02, 0x66, 0, 0,  0,
                             0x66, 0x08, 0x06, 0, 1, 0x08, 0,    6,    4, 0,  2,  // Ethernet/IPv4, reply
                             0x02, 0x66, 0,    0, 0, 0x66, 198,  18,   0, 77,     // sender: 198.18.0.77
                             0x02, 0,    0,    0, 0, 0x0b, 198,  18,   0, 2};     // target: b
  std::copy(std::begin(frame), std::end(frame), out.begin());
  return sizeof(frame);
}

std::size_t unsolicited_advertisement(std::span<uint8_t> out, const Ipv6Bytes& to) {
  constexpr std::size_t kIcmp = 32;  // NA (24) + target link-layer address option (8)
  std::array<uint8_t, 14 + 40 + kIcmp> f{};
  const uint8_t eth[14] = {0x33, 0x33, 0, 0, 0, 1, 0x02, 0x66, 0, 0, 0, 0x66, 0x86, 0xdd};
  std::copy(std::begin(eth), std::end(eth), f.begin());
  uint8_t* const ip = f.data() + 14;
  ip[0] = 0x60;
  ip[5] = kIcmp;
  ip[6] = 58;   // ICMPv6
  ip[7] = 255;  // hop limit
  const Ipv6Bytes from = ipv6("fd00::77").bytes;
  std::copy(from.begin(), from.end(), ip + 8);
  std::copy(to.begin(), to.end(), ip + 24);
  uint8_t* const icmp = ip + 40;
  icmp[0] = 136;   // Neighbor Advertisement
  icmp[4] = 0x20;  // Override, not Solicited
  std::copy(from.begin(), from.end(), icmp + 8);
  const uint8_t option[8] = {2, 1, 0x02, 0x66, 0, 0, 0, 0x66};  // target link-layer address
  std::copy(std::begin(option), std::end(option), icmp + 24);
  const uint16_t checksum = icmpv6_checksum(ip, icmp, kIcmp);
  icmp[2] = static_cast<uint8_t>(checksum >> 8);
  icmp[3] = static_cast<uint8_t>(checksum);
  std::copy(f.begin(), f.end(), out.begin());
  return f.size();
}

TEST_F(NeighborTest, UnsolicitedRepliesAndAdvertisementsCreateNoEntry) {
  Dataplane& dp = start(loopback_config());
  const Ipv6Bytes b_address = ipv6("fd00::2").bytes;
  FrameGenerator unsolicited(kPortA, 2, [&](uint64_t i, std::span<uint8_t> out) -> std::size_t {
    return i == 0 ? unsolicited_arp_reply(out) : unsolicited_advertisement(out, b_address);
  });
  run_generator(dp.engine(0), unsolicited);
  ASSERT_TRUE(eventually([&] { return counter(0, "nd_advertisements_received") == 1; }));
  ASSERT_TRUE(eventually([&] { return counter(0, "arp_replies_received") == 1; }));
  EXPECT_EQ(counter(0, "rx_neighbor_malformed"), 0u) << "the forged frames must be well-formed to test anything";
  std::optional<proto::MacAddr> v4;
  std::optional<proto::MacAddr> v6;
  ASSERT_TRUE(dp.engine(0)
                  .call([&](EngineContext& ctx) {
                    v4 = ctx.neighbors()->lookup(neighbor_key(kPortB, ipv4(198, 18, 0, 77)));
                    v6 = ctx.neighbors()->lookup(neighbor_key(kPortB, ipv6("fd00::77")));
                  })
                  .ok());
  EXPECT_FALSE(v4) << "an ARP reply nobody asked for created an entry";
  EXPECT_FALSE(v6) << "a Neighbor Advertisement nobody asked for created an entry";
  // Resolving still works: the reply to our own request completes the entry resolve() made.
  auto mac = dp.resolve(kPortA, ipv6("fd00::2"), 10s);
  ASSERT_TRUE(mac.ok()) << mac.error();
  EXPECT_EQ(*mac, dp.port(kPortB).mac);
}

TEST(NeighborTable, AdvertisementsCompleteAwaitedEntriesAndReplaceOnlyWithOverride) {
  NeighborTable table;
  const auto key = neighbor_key(0, ipv6("fd00::5").bytes);
  table.advertise(key, proto::MacAddr{0x1}, true);
  EXPECT_FALSE(table.lookup(key)) << "no entry: the advertisement is discarded";
  table.await(key);
  EXPECT_FALSE(table.lookup(key)) << "an incomplete entry has no address";
  table.advertise(key, proto::MacAddr{0x1}, false);
  EXPECT_EQ(table.lookup(key), proto::MacAddr{0x1});
  table.advertise(key, proto::MacAddr{0x2}, false);
  EXPECT_EQ(table.lookup(key), proto::MacAddr{0x1}) << "without Override a known address stays";
  table.advertise(key, proto::MacAddr{0x2}, true);
  EXPECT_EQ(table.lookup(key), proto::MacAddr{0x2});
  table.await(key);
  EXPECT_EQ(table.lookup(key), proto::MacAddr{0x2}) << "awaiting a known address keeps it";
}

TEST(NeighborTable, LearnsUpdatesAndOnlyCreatesWhenAsked) {
  NeighborTable table;
  const auto key = neighbor_key(1, proto::Ipv4Addr{0xC6120002});
  table.learn(key, proto::MacAddr{0x1}, false);
  EXPECT_FALSE(table.lookup(key));
  table.learn(key, proto::MacAddr{0x1}, true);
  EXPECT_EQ(table.lookup(key), proto::MacAddr{0x1});
  table.learn(key, proto::MacAddr{0x2}, false);
  EXPECT_EQ(table.lookup(key), proto::MacAddr{0x2});
  EXPECT_FALSE(table.lookup(neighbor_key(0, proto::Ipv4Addr{0xC6120002})));  // per port
  // Many more entries than one probe window holds: the table keeps working (old entries may be replaced).
  for (uint32_t i = 0; i < 5000; ++i) table.learn(neighbor_key(0, proto::Ipv4Addr{i}), proto::MacAddr{i}, true);
  EXPECT_EQ(table.lookup(neighbor_key(0, proto::Ipv4Addr{4999})), proto::MacAddr{4999});
}

TEST(Icmpv6Checksum, MatchesAKnownNeighborSolicitation) {
  // IPv6 header + NS for fd00::2 from fd00::1 with a source link-layer option, checksum field 0.
  uint8_t ip[40] = {0x60, 0, 0, 0, 0, 32, 58, 255};
  ip[8] = 0xfd;
  ip[23] = 1;
  ip[24] = 0xff;
  ip[25] = 0x02;
  ip[35] = 1;
  ip[36] = 0xff;
  ip[39] = 2;
  uint8_t icmp[32] = {135, 0, 0, 0, 0, 0, 0, 0, 0xfd};
  icmp[23] = 2;
  icmp[24] = 1;
  icmp[25] = 1;
  icmp[26] = 0x02;
  icmp[31] = 0x0a;
  const uint16_t sum = icmpv6_checksum(ip, icmp, sizeof(icmp));
  icmp[2] = static_cast<uint8_t>(sum >> 8);
  icmp[3] = static_cast<uint8_t>(sum);
  EXPECT_EQ(icmpv6_checksum(ip, icmp, sizeof(icmp)), 0);  // verifies
  icmp[10] ^= 1;
  EXPECT_NE(icmpv6_checksum(ip, icmp, sizeof(icmp)), 0);
}

}  // namespace
}  // namespace uroce::dataplane::testing
