#include <gtest/gtest.h>

#include <array>

#include "proto/headers.h"
#include "proto/opcode.h"

namespace uroce::proto {
namespace {

TEST(WireField, ReadsAndWritesBigEndianSubfieldsWithoutDisturbingNeighbours) {
  std::array<uint8_t, Bth::kSize> b{};
  b.fill(0xA5);
  const MutView<Bth> bth{b.data()};
  bth.set(Bth::psn, Psn{0x123456});
  bth.set(Bth::pad_count, 3);
  bth.set(Bth::dest_qp, Qpn{0xABCDEF});
  EXPECT_EQ(b[9], 0x12);
  EXPECT_EQ(b[10], 0x34);
  EXPECT_EQ(b[11], 0x56);
  EXPECT_EQ(b[1], 0xB5) << "PadCnt is bits 5:4 of byte 1; SE, M and TVer untouched";
  EXPECT_EQ(bth.get(Bth::pad_count), 3);
  EXPECT_EQ(bth.get(Bth::dest_qp), Qpn{0xABCDEF});
  EXPECT_EQ(bth.get(Bth::psn), Psn{0x123456});
  EXPECT_TRUE(bth.get(Bth::ack_req)) << "byte 8 was 0xA5";
  bth.set(Bth::ack_req, false);
  EXPECT_EQ(b[8], 0x25);
}

TEST(WireField, UnalignedSixtyFourBitAndFortyEightBitFields) {
  std::array<uint8_t, 40> buf{};
  const MutView<Reth> reth{buf.data() + 3};  // deliberately misaligned
  reth.set(Reth::va, 0x0102030405060708ull);
  reth.set(Reth::rkey, RemoteToken{0xDEADBEEF});
  reth.set(Reth::dma_length, 4096);
  EXPECT_EQ(buf[3], 0x01);
  EXPECT_EQ(buf[10], 0x08);
  EXPECT_EQ(reth.get(Reth::va), 0x0102030405060708ull);
  EXPECT_EQ(reth.get(Reth::rkey), RemoteToken{0xDEADBEEF});
  const MutView<Eth> eth{buf.data() + 1};
  eth.set(Eth::src, MacAddr{0x020000000001});
  EXPECT_EQ(buf[7], 0x02);
  EXPECT_EQ(buf[12], 0x01);
  EXPECT_EQ(eth.get(Eth::src), MacAddr{0x020000000001});
}

TEST(WireField, Ipv6FirstWordSplitsVersionTrafficClassFlowLabel) {
  std::array<uint8_t, Ipv6::kSize> b{};
  const MutView<Ipv6> ip{b.data()};
  ip.set(Ipv6::version, 6);
  ip.set(Ipv6::traffic_class, 0xE2);
  ip.set(Ipv6::flow_label, 0x1FACE);
  EXPECT_EQ(b[0], 0x6E);
  EXPECT_EQ(b[1], 0x21);
  EXPECT_EQ(b[2], 0xFA);
  EXPECT_EQ(b[3], 0xCE);
}

TEST(Psn, ModularComparisonAcrossTheWrap) {
  EXPECT_EQ(distance(Psn{5}, Psn{0xFFFFFE}), 7);
  EXPECT_TRUE(is_before(Psn{0xFFFFFE}, Psn{5}));
  EXPECT_FALSE(is_before(Psn{5}, Psn{0xFFFFFE}));
  EXPECT_EQ(Psn{0xFFFFFF} + 2, Psn{1});
  EXPECT_EQ(distance(Psn{0x800000}, Psn{0}), -0x800000) << "exactly half the space is behind";
}

TEST(Ipv4Checksum, MatchesReferenceHeader) {
  // rocev2.md §3.4(d) RDMA_WRITE_ONLY IPv4 header, checksum 0xB6E2.
  const uint8_t h[] = {0x45, 0x6a, 0x00, 0x4c, 0x00, 0x01, 0x40, 0x00, 0x40, 0x11,
                       0xb6, 0xe2, 0xc0, 0xa8, 0x01, 0x01, 0xc0, 0xa8, 0x01, 0x02};
  EXPECT_EQ(ipv4_header_checksum(h), 0xB6E2);
}

}  // namespace
}  // namespace uroce::proto
