#include "proto/icrc.h"

#include <gtest/gtest.h>

#include <zlib.h>

#include "proto/packet_parser.h"
#include "proto/tests/test_vectors.h"

namespace uroce::proto {
namespace {

using testing::from_hex;
using testing::kReferenceFrames;

std::size_t l3_offset(const std::vector<uint8_t>& f) { return f[12] == 0x81 && f[13] == 0x00 ? 18 : 14; }
IpVersion version_of(const std::vector<uint8_t>& f) {
  return (f[l3_offset(f)] >> 4) == 6 ? IpVersion::kV6 : IpVersion::kV4;
}
uint32_t icrc_of(const std::vector<uint8_t>& f) {
  const std::size_t l3 = l3_offset(f);
  return icrc_compute(f.data() + l3, f.size() - l3 - kIcrcSize, version_of(f));
}

TEST(Icrc, SeedIsCrcOfEightOnesBytes) {
  const uint8_t ones[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
  EXPECT_EQ(kIcrcSeed, ::crc32(0, ones, 8));
  EXPECT_EQ(~kIcrcSeed, 0xDEBB20E3u) << "rxe's raw-register constant";
}

TEST(Icrc, MatchesEveryReferenceFrame) {
  for (const auto& ref : kReferenceFrames) {
    const auto f = from_hex(ref.hex);
    EXPECT_EQ(icrc_of(f), icrc_load(f.data() + f.size() - 4)) << ref.name;
  }
}

TEST(Icrc, WireOrderIsLeastSignificantByteFirst) {
  const auto cnp = from_hex(kReferenceFrames[0].hex);
  EXPECT_EQ(icrc_of(cnp), 0x2A00FD82u) << "wire bytes 82 fd 00 2a";
}

TEST(Icrc, IndependentMaskedBufferComputationAgrees) {
  // The 52 bytes rocev2.md §3.4 says are fed to the CRC for the reference ACK.
  const auto fed = from_hex(
      "ffffffffffffffff 45ff003000104000ff11ffffc0a80102c0a80101 c13212b7001cffff"
      "1100ffffff00001100000101 1f000002");
  const auto ack = from_hex(kReferenceFrames[5].hex);
  EXPECT_EQ(::crc32(0, fed.data(), static_cast<uInt>(fed.size())), icrc_of(ack));
}

TEST(Icrc, MaskedFieldsDoNotChangeItAndCoveredFieldsDo) {
  const auto base = from_hex(kReferenceFrames[3].hex);  // RC WRITE ONLY, IPv4
  const uint32_t icrc = icrc_of(base);
  const std::size_t l3 = 14, udp = 34, bth = 42;
  for (std::size_t masked : {l3 + 1, l3 + 8, l3 + 10, l3 + 11, udp + 6, udp + 7, bth + 4}) {
    auto f = base;
    f[masked] ^= 0x5A;
    EXPECT_EQ(icrc_of(f), icrc) << "byte " << masked << " is masked";
  }
  for (std::size_t covered = l3; covered < base.size() - 4; ++covered) {
    if (covered == l3 + 1 || covered == l3 + 8 || covered == l3 + 10 || covered == l3 + 11 || covered == udp + 6 ||
        covered == udp + 7 || covered == bth + 4)
      continue;
    auto f = base;
    f[covered] ^= 0x01;
    EXPECT_NE(icrc_of(f), icrc) << "byte " << covered << " is covered";
  }
}

TEST(Icrc, Ipv6MasksTrafficClassFlowLabelAndHopLimit) {
  const auto base = from_hex(kReferenceFrames[2].hex);
  auto f = base;
  f[14] = 0x60;  // traffic class high nibble
  f[15] = 0x00;
  f[16] = 0x00;
  f[17] = 0x00;
  f[14 + 7] = 1;  // hop limit
  EXPECT_EQ(icrc_of(f), icrc_of(base));
  f[14 + 4] ^= 1;  // payload length is covered
  EXPECT_NE(icrc_of(f), icrc_of(base));
}

TEST(Icrc, IncrementalOverSplitPayloadEqualsOneShot) {
  const auto f = from_hex(kReferenceFrames[3].hex);
  const std::size_t covered_end = f.size() - 4;
  const std::size_t rest = 14 + 20 + 8 + 12;
  for (std::size_t split = rest; split <= covered_end; ++split) {
    uint32_t crc = icrc_headers(f.data() + 14, IpVersion::kV4);
    crc = crc32_ieee(crc, f.data() + rest, split - rest);
    crc = crc32_ieee(crc, f.data() + split, covered_end - split);
    EXPECT_EQ(crc, icrc_of(f)) << split;
  }
}

TEST(Icrc, VlanTagIsNotCovered) {
  const auto plain = from_hex(kReferenceFrames[5].hex);
  std::vector<uint8_t> tagged(plain.begin(), plain.begin() + 12);
  for (uint8_t b : {0x81, 0x00, 0x60, 0x64}) tagged.push_back(b);
  tagged.insert(tagged.end(), plain.begin() + 12, plain.end());
  EXPECT_EQ(icrc_of(tagged), icrc_of(plain));
  EXPECT_TRUE(parse_packet(tagged).ok());
}

}  // namespace
}  // namespace uroce::proto
