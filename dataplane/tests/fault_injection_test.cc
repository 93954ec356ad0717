// Fault injection moves its counters at roughly the configured rates, and what it does shows on the wire:
// duplicates and reordering reach the QP, corruption is caught by the IP checksum or the ICRC.
#include <gtest/gtest.h>

#include <set>

#include "dataplane/fault_injector.h"
#include "loopback_fixture.h"

namespace uroce::dataplane::testing {
namespace {

using proto::Opcode;

class FaultInjectionTest : public LoopbackTest {};

TEST_F(FaultInjectionTest, CountersMoveAtRoughlyTheConfiguredRates) {
  config::Config config = loopback_config();
  config.faults.loss = 0.01;
  config.faults.duplicate = 0.01;
  config.faults.reorder = 0.01;
  config.faults.corrupt = 0.01;
  config.faults.seed = 7;
  Dataplane& dp = start(config);
  RecordingEndpoint endpoint;
  const proto::Qpn qpn = make_qpn(0, 5);
  ASSERT_TRUE(dp.engine(0).register_qp(qpn, endpoint.endpoint()).ok());

  constexpr uint64_t kPackets = 100'000;
  const uint8_t payload[32] = {};
  FrameGenerator traffic(kPortA, kPackets, [&](uint64_t i, std::span<uint8_t> out) {
    return proto::build_packet(
        roce_spec(dp, kPortA, kPortB, qpn, Opcode::kRcSendOnly, static_cast<uint32_t>(i), payload), out);
  });
  run_generator(dp.engine(0), traffic);
  // Everything sent has been received once the last held-back packet is out (an empty poll releases it).
  const auto settled = [&] {
    return counter(0, "rx_packets") + counter(0, "fault_dropped") + counter(0, "tx_backlog_drops") ==
           kPackets + counter(0, "fault_duplicated");
  };
  ASSERT_TRUE(eventually(settled)) << counter(0, "rx_packets");

  // Expected ~1000 each; bounds of 1/3x..3x are ~15 standard deviations wide (and the seed is fixed).
  for (const char* name : {"fault_dropped", "fault_duplicated", "fault_reordered", "fault_corrupted"}) {
    EXPECT_GT(counter(0, name), 333u) << name;
    EXPECT_LT(counter(0, name), 3000u) << name;
  }
  EXPECT_EQ(counter(1, "fault_dropped"), 0u);  // engine 1 received nothing

  const uint64_t caught = counter(0, "rx_icrc_encapsulated") + counter(0, "rx_drop_bad_ip_checksum") +
                          counter(0, "rx_drop_bad_ip_length") + counter(0, "rx_not_roce") +
                          counter(0, "rx_not_for_us") + counter(0, "rx_unknown_qp");
  EXPECT_GT(caught, counter(0, "fault_corrupted") / 2);
  EXPECT_LE(caught,
            counter(0, "fault_corrupted") + counter(0, "fault_duplicated"));  // a corrupted duplicate counts twice

  const auto packets = endpoint.packets();
  std::set<uint32_t> seen;
  uint64_t duplicates = 0;
  uint64_t out_of_order = 0;
  for (std::size_t i = 0; i < packets.size(); ++i) {
    duplicates += seen.insert(packets[i].psn).second ? 0 : 1;
    out_of_order += i > 0 && packets[i].psn < packets[i - 1].psn ? 1 : 0;
  }
  EXPECT_GT(duplicates, 0u);
  EXPECT_GT(out_of_order, 0u);
  EXPECT_LT(seen.size(), kPackets);  // losses
}

TEST(SplitMix64, ThresholdsAreProbabilities) {
  EXPECT_EQ(SplitMix64::threshold(0), 0u);
  EXPECT_EQ(SplitMix64::threshold(-1), 0u);
  EXPECT_EQ(SplitMix64::threshold(1), UINT64_MAX);
  EXPECT_EQ(SplitMix64::threshold(0.5), uint64_t{1} << 63);
  SplitMix64 a(42), b(42);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next(), b.next());  // repeatable from the seed
}

}  // namespace
}  // namespace uroce::dataplane::testing
