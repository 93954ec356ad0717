// Malformed packets are counted per reason and dropped, never delivered, whatever their bytes.
#include <gtest/gtest.h>

#include <random>

#include <rte_mbuf.h>

#include "loopback_fixture.h"

namespace uroce::dataplane::testing {
namespace {

using proto::Opcode;

class MalformedTest : public LoopbackTest {};

TEST_F(MalformedTest, EachReasonIsCountedAndNothingBadIsDelivered) {
  Dataplane& dp = start(loopback_config());
  RecordingEndpoint endpoint;
  const proto::Qpn qpn = make_qpn(0, 5);
  ASSERT_TRUE(dp.engine(0).register_qp(qpn, endpoint.endpoint()).ok());

  const uint8_t payload[16] = {9, 9, 9};
  std::vector<uint8_t> valid(256);
  valid.resize(proto::build_packet(roce_spec(dp, kPortA, kPortB, qpn, Opcode::kRcSendOnly, 1, payload), valid));
  ASSERT_FALSE(valid.empty());
  constexpr std::size_t kL3 = 14, kUdp = 34, kBth = 42, kPayload = 54;

  std::vector<std::vector<uint8_t>> frames;
  frames.push_back(valid);  // the one that must arrive
  auto bad_icrc = valid;
  bad_icrc[kPayload] ^= 0x01;
  frames.push_back(bad_icrc);
  frames.push_back(std::vector<uint8_t>(valid.begin(), valid.begin() + 50));  // IP length beyond the frame
  auto unknown_opcode = valid;
  unknown_opcode[kBth] = 0x15;
  frames.push_back(unknown_opcode);
  auto bad_ip_checksum = valid;
  bad_ip_checksum[kL3 + 8] ^= 0x10;  // TTL
  frames.push_back(bad_ip_checksum);
  auto not_roce = valid;
  not_roce[kUdp + 2] = 0;  // UDP destination port 4791 (0x12B7) -> 183
  not_roce[kUdp + 3] = 183;
  frames.push_back(not_roce);
  frames.push_back(std::vector<uint8_t>(valid.begin(), valid.begin() + 10));  // shorter than Ethernet
  auto other_mac = valid;
  other_mac[5] ^= 0x40;
  frames.push_back(other_mac);

  FrameGenerator traffic(kPortA, frames.size(), [&](uint64_t i, std::span<uint8_t> out) {
    std::copy(frames[i].begin(), frames[i].end(), out.begin());
    return frames[i].size();
  });
  run_generator(dp.engine(0), traffic);
  ASSERT_TRUE(eventually([&] { return counter(0, "rx_packets") == frames.size(); }));
  EXPECT_EQ(endpoint.count(), 1u);
  EXPECT_EQ(counter(0, "rx_icrc_encapsulated"), 1u);
  EXPECT_EQ(counter(0, "rx_drop_bad_ip_length"), 1u);
  EXPECT_EQ(counter(0, "rx_drop_unknown_opcode"), 1u);
  EXPECT_EQ(counter(0, "rx_drop_bad_ip_checksum"), 1u);
  EXPECT_EQ(counter(0, "rx_not_roce"), 1u);
  EXPECT_EQ(counter(0, "rx_drop_truncated_ethernet"), 1u);
  EXPECT_EQ(counter(0, "rx_not_for_us"), 1u);
  EXPECT_EQ(counter(0, "rx_delivered"), 1u);
}

// A NIC's IPv4 checksum verdict (RTE_ETH_RX_OFFLOAD_IPV4_CKSUM) stands for the software sum: a frame it found
// good is not summed again (so a checksum damaged after it looked goes through: the field is outside the ICRC),
// one it found bad is dropped however its bytes look, and without a verdict the engine sums itself.
TEST_F(MalformedTest, TheNicsIpChecksumVerdictReplacesTheSoftwareSum) {
  Dataplane& dp = start(loopback_config());
  RecordingEndpoint endpoint;
  const proto::Qpn qpn = make_qpn(0, 5);
  ASSERT_TRUE(dp.engine(0).register_qp(qpn, endpoint.endpoint()).ok());
  struct Case {
    bool checksum_right;
    uint64_t flags;
  };
  const std::vector<Case> cases = {
      {false, RTE_MBUF_F_RX_IP_CKSUM_GOOD},    // PSN 1, delivered: the NIC vouched
      {true, RTE_MBUF_F_RX_IP_CKSUM_BAD},      // PSN 2, dropped: the NIC refused it
      {false, 0},                              // PSN 3, dropped: no verdict, the software sum
      {true, RTE_MBUF_F_RX_IP_CKSUM_UNKNOWN},  // PSN 4, delivered
  };
  std::vector<std::vector<uint8_t>> frames;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const uint8_t payload[16] = {7};
    std::vector<uint8_t> frame(256);
    frame.resize(proto::build_packet(
        roce_spec(dp, kPortA, kPortB, qpn, Opcode::kRcSendOnly, static_cast<uint32_t>(i + 1), payload), frame));
    ASSERT_FALSE(frame.empty());
    if (!cases[i].checksum_right) frame[14 + 10] ^= 0x01;  // the IPv4 header checksum
    frames.push_back(frame);
  }
  FrameGenerator traffic(kPortA, cases.size(), [&](uint64_t i, std::span<uint8_t> out) {
    std::copy(frames[i].begin(), frames[i].end(), out.begin());
    return frames[i].size();
  });
  traffic.rx_flags = [&](uint64_t i) { return cases[i].flags; };
  run_generator(dp.engine(0), traffic);
  ASSERT_TRUE(eventually([&] { return counter(0, "rx_packets") == cases.size(); }));
  EXPECT_EQ(counter(0, "rx_drop_bad_ip_checksum"), 2u);
  std::vector<uint32_t> delivered;
  for (const auto& packet : endpoint.packets()) delivered.push_back(packet.psn);
  EXPECT_EQ(delivered, (std::vector<uint32_t>{1, 4}));
}

// Damaged frames for our MAC: the engine takes every one, delivers only what still parses with a good ICRC
// (damage to fields the ICRC masks, like the UDP checksum, goes unnoticed, as on a wire), and keeps running.
TEST_F(MalformedTest, RandomFramesNeverCrashAndAreAllAccountedFor) {
  Dataplane& dp = start(loopback_config());
  RecordingEndpoint endpoint;
  ASSERT_TRUE(dp.engine(0).register_qp(make_qpn(0, 5), endpoint.endpoint()).ok());
  const uint8_t payload[16] = {};
  std::vector<uint8_t> valid(256);
  valid.resize(
      proto::build_packet(roce_spec(dp, kPortA, kPortB, make_qpn(0, 5), Opcode::kRcSendOnly, 1, payload), valid));

  constexpr uint64_t kFrames = 20000;
  std::mt19937_64 random(12345);
  FrameGenerator traffic(kPortA, kFrames, [&](uint64_t i, std::span<uint8_t> out) -> std::size_t {
    // Start from a valid frame and damage it: a few random bytes and a random length. One in eight keeps
    // its EtherType random too, so ARP and IPv6/ICMPv6 handling see garbage as well.
    std::copy(valid.begin(), valid.end(), out.begin());
    const std::size_t length = random() % (valid.size() + 20);
    for (std::size_t k = valid.size(); k < length; ++k) out[k] = static_cast<uint8_t>(random());
    const int flips = 1 + static_cast<int>(random() % 4);
    for (int f = 0; f < flips && length > 14; ++f) out[14 + random() % (length - 14)] = static_cast<uint8_t>(random());
    if (i % 8 == 0 && length >= 14) {
      const uint16_t types[] = {0x0806, 0x86DD, 0x8100, static_cast<uint16_t>(random())};
      const uint16_t t = types[random() % 4];
      out[12] = static_cast<uint8_t>(t >> 8);
      out[13] = static_cast<uint8_t>(t);
      if (t == 0x86DD && length > 20) out[20] = 58;  // ICMPv6 next header
    }
    return length == 0 ? 1 : length;
  });
  run_generator(dp.engine(0), traffic);
  EXPECT_TRUE(eventually([&] { return counter(0, "rx_packets") == kFrames; }));
  EXPECT_GT(
      counter(0, "rx_icrc_encapsulated") + counter(0, "rx_drop_bad_ip_checksum") + counter(0, "rx_drop_bad_ip_length"),
      kFrames / 4);
  EXPECT_EQ(endpoint.count(), counter(0, "rx_delivered"));
  // Still alive and well: a valid packet gets through.
  const uint64_t before = endpoint.count();
  FrameGenerator one(kPortA, 1, [&](uint64_t, std::span<uint8_t> out) {
    std::copy(valid.begin(), valid.end(), out.begin());
    return valid.size();
  });
  run_generator(dp.engine(0), one);
  EXPECT_TRUE(eventually([&] { return endpoint.count() == before + 1; }));
}

}  // namespace
}  // namespace uroce::dataplane::testing
