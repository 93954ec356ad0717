// perftest's key message (text over TCP, binary over -R) and MTU enum, as ib_*_bw writes and reads them
// (rocev2.md §8.2).
#include "apps/perf/perftest_exchange.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace uroce::apps::perf {
namespace {

PerftestDest sample() {
  PerftestDest d;
  d.out_reads = 0x80;
  d.qpn = 0x000011;
  d.psn = 0xA3C2F1;
  d.rkey = 0x00000252;
  d.vaddr = 0x000055B2DB13B000ull;
  d.gid = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 198, 18, 0, 2};
  return d;
}

KeyMessage message_of(const std::string& text) {
  KeyMessage m{};
  std::memcpy(m.data(), text.data(), std::min(text.size(), m.size()));
  return m;
}

TEST(PerftestKeyMessage, IsPerftestsLayoutAndSize) {
  const KeyMessage m = format_key_message(sample());
  EXPECT_EQ(std::string(m.data()),
            "0000:0080:000011:a3c2f1:00000252:000055b2db13b000:"
            "00:00:00:00:00:00:00:00:00:00:ff:ff:c6:12:00:02:00000000:");
  EXPECT_EQ(std::strlen(m.data()), kKeyMessageSize - 1);  // 107 characters and the NUL
}

TEST(PerftestKeyMessage, RoundTrips) {
  const std::optional<PerftestDest> d = parse_key_message(format_key_message(sample()));
  ASSERT_TRUE(d);
  EXPECT_EQ(*d, sample());
}

TEST(PerftestKeyMessage, RefusesWhatPerftestWouldNotSend) {
  const std::string good(format_key_message(sample()).data());
  EXPECT_FALSE(parse_key_message(message_of("")));
  EXPECT_FALSE(parse_key_message(message_of(good.substr(0, 60))));                      // cut short
  EXPECT_FALSE(parse_key_message(message_of("0000:0080:00001g" + good.substr(16))));    // not hex
  EXPECT_FALSE(parse_key_message(message_of("0000:0080:0000011:" + good.substr(17))));  // QPN too wide
  EXPECT_FALSE(parse_key_message(message_of(good.substr(0, good.size() - 1))));         // no last ':'
  KeyMessage unterminated;
  unterminated.fill('0');
  EXPECT_FALSE(parse_key_message(unterminated));
}

// Over -R, perftest sends its struct pingpong_dest with each integer in network order (rdma_write_keys).
TEST(PerftestBinaryKey, IsStructPingpongDestBigEndian) {
  const BinaryKey k = format_binary_key(sample());
  const BinaryKey expected = {
      0, 0, 0,    0,    0,    0,    0,    0x80, 0, 0, 0,    0x11, 0,   0xA3, 0xC2, 0xF1,  // lid, out_reads, qpn, psn
      0, 0, 2,    0x52, 0,    0,    0,    0,                                              // rkey, padding
      0, 0, 0x55, 0xB2, 0xDB, 0x13, 0xB0, 0,                                              // vaddr
      0, 0, 0,    0,    0,    0,    0,    0,    0, 0, 0xFF, 0xFF, 198, 18,   0,    2,     // gid
      0, 0, 0,    0,    0,    0,    0,    0};                                             // srqn, gid_index
  EXPECT_EQ(k, expected);
  EXPECT_EQ(parse_binary_key(k), sample());
}

TEST(PerftestMtu, EnumIsIbvMtu) {
  EXPECT_EQ(mtu_enum_of_bytes(1024), 3u);
  EXPECT_EQ(mtu_enum_of_bytes(4096), 5u);
  EXPECT_EQ(mtu_enum_of_bytes(1500), 0u);
  EXPECT_EQ(mtu_bytes_of_enum(1), 256u);
  EXPECT_EQ(mtu_bytes_of_enum(5), 4096u);
  EXPECT_EQ(mtu_bytes_of_enum(6), 0u);
}

}  // namespace
}  // namespace uroce::apps::perf
