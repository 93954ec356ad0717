// Backpressure: an empty mempool is a counted failure, a full TX queue fills a bounded backlog, and both
// recover without losing anything they accepted.
#include <gtest/gtest.h>

#include <rte_mbuf.h>

#include "loopback_fixture.h"

namespace uroce::dataplane::testing {
namespace {

using proto::Opcode;

class BackpressureTest : public LoopbackTest {};

TEST_F(BackpressureTest, EmptyMempoolIsCountedAndRecovers) {
  config::Config config = loopback_config();
  config.engine.mbufs_per_engine = 63;
  config.engine.mbuf_cache = 0;
  Dataplane& dp = start(config);
  RecordingEndpoint endpoint;
  const proto::Qpn qpn = make_qpn(0, 5);
  ASSERT_TRUE(dp.engine(0).register_qp(qpn, endpoint.endpoint()).ok());

  // Take every mbuf of engine 0's pool, then ask for more.
  std::vector<rte_mbuf*> held;
  ASSERT_TRUE(dp.engine(0)
                  .call([&](EngineContext& ctx) {
                    while (rte_mbuf* m = ctx.alloc_mbuf()) held.push_back(m);
                    for (int i = 0; i < 10; ++i) {
                      EXPECT_EQ(ctx.alloc_mbuf(), nullptr);
                    }
                  })
                  .ok());
  EXPECT_EQ(held.size(), 63u);
  EXPECT_EQ(counter(0, "mbuf_alloc_failures"), 11u);

  // A sender meets the empty pool: it keeps trying, sends nothing, and nothing crashes.
  FrameGenerator traffic(kPortA, 500, [&](uint64_t i, std::span<uint8_t> out) {
    return proto::build_packet(roce_spec(dp, kPortA, kPortB, qpn, Opcode::kRcSendOnly, static_cast<uint32_t>(i)), out);
  });
  ASSERT_TRUE(dp.engine(0).add_poller(traffic.poller()).ok());
  EXPECT_TRUE(eventually([&] { return counter(0, "mbuf_alloc_failures") > 100; }));
  EXPECT_EQ(traffic.sent(), 0u);
  // Give the mbufs back: the 63-mbuf pool now carries all 500 packets.
  ASSERT_TRUE(dp.engine(0)
                  .call([&](EngineContext&) { rte_pktmbuf_free_bulk(held.data(), static_cast<unsigned>(held.size())); })
                  .ok());
  EXPECT_TRUE(eventually([&] { return endpoint.count() == 500; })) << endpoint.count();
  ASSERT_TRUE(dp.engine(0).remove_poller(&traffic).ok());
}

TEST_F(BackpressureTest, ShortBurstsFillABoundedBacklogThenDrop) {
  config::Config config = loopback_config();
  config.ports[kPortB].rx_descriptors = 64;  // the a->b ring holds 64 packets
  config.engine.tx_backlog = 16;
  config.engine.tx_burst = 32;
  Dataplane& dp = start(config);
  RecordingEndpoint endpoint;
  const proto::Qpn qpn = make_qpn(0, 5);
  ASSERT_TRUE(dp.engine(0).register_qp(qpn, endpoint.endpoint()).ok());

  // 120 packets in one go, with no receive in between: 64 fill the ring, 16 wait in the backlog, 40 drop.
  ASSERT_TRUE(dp.engine(0)
                  .call([&](EngineContext& ctx) {
                    for (uint32_t i = 0; i < 120; ++i) {
                      rte_mbuf* m = ctx.alloc_mbuf();
                      ASSERT_NE(m, nullptr);
                      auto* data = rte_pktmbuf_mtod(m, uint8_t*);
                      const std::size_t n =
                          proto::build_packet(roce_spec(dp, kPortA, kPortB, qpn, Opcode::kRcSendOnly, i),
                                              std::span<uint8_t>(data, rte_pktmbuf_tailroom(m)));
                      rte_pktmbuf_append(m, static_cast<uint16_t>(n));
                      ctx.send(kPortA, m);
                    }
                  })
                  .ok());
  EXPECT_EQ(counter(0, "tx_backlog_drops"), 40u);
  EXPECT_TRUE(eventually([&] { return endpoint.count() == 80; })) << endpoint.count();
  EXPECT_EQ(counter(0, "tx_packets"), 80u);
  // The backlog kept order: PSNs arrive 0..79.
  const auto packets = endpoint.packets();
  for (std::size_t i = 0; i < packets.size(); ++i) EXPECT_EQ(packets[i].psn, i);
}

}  // namespace
}  // namespace uroce::dataplane::testing
