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
                    v4 = ctx.neighbors()->lookup(neighbor_key(kPortB, ipv4(198, 18, 0, 77)), ctx.now());
                    v6 = ctx.neighbors()->lookup(neighbor_key(kPortB, ipv6("fd00::77")), ctx.now());
                  })
                  .ok());
  EXPECT_FALSE(v4) << "an ARP reply nobody asked for created an entry";
  EXPECT_FALSE(v6) << "a Neighbor Advertisement nobody asked for created an entry";
  // Resolving still works: the reply to our own request completes the entry resolve() made.
  auto mac = dp.resolve(kPortA, ipv6("fd00::2"), 10s);
  ASSERT_TRUE(mac.ok()) << mac.error();
  EXPECT_EQ(*mac, dp.port(kPortB).mac);
}

// Answers complete only entries asked for; nothing unsolicited re-points a known address (an advertisement with
// Override, a reply, a request naming the peer as sender); our own question, once the lifetime is over, does.
TEST(NeighborTable, OnlyOurOwnQuestionChangesAKnownAddress) {
  NeighborTable table(/*lifetime=*/100);
  const auto key = neighbor_key(0, ipv6("fd00::5").bytes);
  EXPECT_TRUE(table.learn(key, proto::MacAddr{0x1}, false, 0));
  EXPECT_FALSE(table.lookup(key, 0)) << "no entry: an answer nobody asked for is discarded";
  table.await(key);
  EXPECT_FALSE(table.lookup(key, 0)) << "an incomplete entry has no address";
  EXPECT_TRUE(table.learn(key, proto::MacAddr{0x1}, false, 10));
  EXPECT_EQ(table.lookup(key, 10), proto::MacAddr{0x1});
  for (const bool create : {false, true}) {
    EXPECT_FALSE(table.learn(key, proto::MacAddr{0x2}, create, 20)) << "an unsolicited answer or request";
    EXPECT_EQ(table.lookup(key, 20), proto::MacAddr{0x1});
  }
  EXPECT_TRUE(table.learn(key, proto::MacAddr{0x1}, false, 50)) << "the same address renews the entry";
  EXPECT_EQ(table.lookup(key, 149), proto::MacAddr{0x1});
  EXPECT_FALSE(table.lookup(key, 150)) << "past its lifetime resolve() asks again";
  table.await(key);
  EXPECT_TRUE(table.learn(key, proto::MacAddr{0x2}, false, 160));
  EXPECT_EQ(table.lookup(key, 160), proto::MacAddr{0x2}) << "the answer to our question";
}

TEST(NeighborTable, LearnsFromRequestsOnlyIntoFreeSlotsAndKeepsWhatWasAskedFor) {
  NeighborTable table;
  const auto key = neighbor_key(1, proto::Ipv4Addr{0xC6120002});
  table.learn(key, proto::MacAddr{0x1}, false, 0);
  EXPECT_FALSE(table.lookup(key, 0));
  table.learn(key, proto::MacAddr{0x1}, true, 0);
  EXPECT_EQ(table.lookup(key, 0), proto::MacAddr{0x1});
  EXPECT_FALSE(table.lookup(neighbor_key(0, proto::Ipv4Addr{0xC6120002}), 0));  // per port
  // Entries resolve() asked for and got, then many more senders than the table holds: every asked-for entry stays.
  std::vector<NeighborKey> asked;
  for (uint32_t i = 0; i < 64; ++i) {
    asked.push_back(neighbor_key(0, proto::Ipv4Addr{0x0A000000 + i}));
    table.await(asked.back());
    table.learn(asked.back(), proto::MacAddr{0x100 + i}, false, 0);
  }
  for (uint32_t i = 0; i < 5000; ++i) table.learn(neighbor_key(0, proto::Ipv4Addr{i}), proto::MacAddr{i}, true, 0);
  for (uint32_t i = 0; i < asked.size(); ++i) EXPECT_EQ(table.lookup(asked[i], 0), proto::MacAddr{0x100 + i});
  // New questions still find room: they give up entries learned from requests, not the ones asked for before.
  for (uint32_t i = 0; i < 64; ++i) {
    const auto late = neighbor_key(0, proto::Ipv4Addr{0x0B000000 + i});
    table.await(late);
    table.learn(late, proto::MacAddr{0x77}, false, 0);
    EXPECT_EQ(table.lookup(late, 0), proto::MacAddr{0x77});
  }
  for (uint32_t i = 0; i < asked.size(); ++i) EXPECT_EQ(table.lookup(asked[i], 0), proto::MacAddr{0x100 + i});
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
