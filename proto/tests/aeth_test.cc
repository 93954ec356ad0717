#include "proto/aeth.h"

#include <gtest/gtest.h>

namespace uroce::proto {
namespace {

TEST(AethSyndrome, DecodesEveryKind) {
  EXPECT_EQ(AethSyndrome(0x1F).kind(), AethKind::kAck);
  EXPECT_EQ(AethSyndrome(0x1F).credits(), std::nullopt);
  EXPECT_EQ(AethSyndrome(0x0D).credits(), 96u);
  EXPECT_EQ(AethSyndrome(0x2E).kind(), AethKind::kRnrNak);
  EXPECT_EQ(AethSyndrome(0x2E).rnr_wait_ns(), 1'280'000u);
  EXPECT_EQ(AethSyndrome(0x20).rnr_wait_ns(), 655'360'000u) << "code 0 is the longest wait";
  EXPECT_EQ(AethSyndrome(0x60).kind(), AethKind::kNak);
  EXPECT_EQ(AethSyndrome(0x62).nak_code(), NakCode::kRemoteAccessError);
  EXPECT_EQ(AethSyndrome(0x63).nak_code(), NakCode::kRemoteOperationalError);
}

TEST(AethSyndrome, EncodeDecodeRoundTripsEveryValidSyndrome) {
  int valid = 0;
  for (int raw = 0; raw < 256; ++raw) {
    const AethSyndrome s(static_cast<uint8_t>(raw));
    if (!s.valid()) continue;
    ++valid;
    switch (s.kind()) {
      case AethKind::kAck:
        EXPECT_EQ(AethSyndrome::ack(s.value()), s);
        break;
      case AethKind::kRnrNak:
        EXPECT_EQ(AethSyndrome::rnr_nak(s.value()), s);
        break;
      case AethKind::kNak:
        EXPECT_EQ(AethSyndrome::nak(s.nak_code()), s);
        break;
      case AethKind::kReserved:
        ADD_FAILURE();
        break;
    }
  }
  EXPECT_EQ(valid, 32 + 32 + 4);  // ACKs, RNR NAKs, NAK codes 0-3 (4 is RD only)
}

TEST(AethSyndrome, CreditEncodingNeverOverstates) {
  for (uint32_t n = 0; n < 40000; n += 7) {
    const auto credits = AethSyndrome::ack_with_credits(n).credits();
    ASSERT_TRUE(credits);
    EXPECT_LE(*credits, n);
  }
}

TEST(AethSyndrome, RnrTimerTableIsMonotonicFromCodeOne) {
  for (std::size_t i = 2; i < kRnrTimerNs.size(); ++i) EXPECT_GT(kRnrTimerNs[i], kRnrTimerNs[i - 1]);
}

}  // namespace
}  // namespace uroce::proto
