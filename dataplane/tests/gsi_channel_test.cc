// The GSI channel on real DPDK devices: MADs between the two ports of the loopback link go down the send ring,
// out of engine 0 onto the wire, back in, and up the receive ring with the addresses the CM needs; frames a GSI QP
// must not accept are counted and never reach the CM.
#include "dataplane/gsi_channel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "dataplane/tests/loopback_fixture.h"
#include "proto/cm_messages.h"

namespace uroce::dataplane::testing {
namespace {

std::array<uint8_t, proto::kMadSize> mad_with(uint8_t marker) {
  std::array<uint8_t, proto::kMadSize> mad{};
  mad[0] = proto::kMadBaseVersion;
  mad[1] = proto::kCmManagementClass;
  mad[2] = proto::kCmClassVersion;
  mad[255] = marker;
  return mad;
}

proto::Gid gid_of_port(const Dataplane& dp, PortIndex p) { return proto::gid_from_ipv4(dp.port(p).ipv4.front()); }

// A MAD from port a to port b, with `marker` in its last byte.
GsiDatagram a_to_b(const Dataplane& dp, uint8_t marker) {
  GsiDatagram out;
  out.port = kPortA;
  out.local_gid = gid_of_port(dp, kPortA);
  out.remote_gid = gid_of_port(dp, kPortB);
  out.remote_mac = dp.port(kPortB).mac;
  out.mad = mad_with(marker);
  return out;
}

std::vector<GsiDatagram> receive_until(GsiChannel& gsi, std::size_t count) {
  std::vector<GsiDatagram> got;
  std::array<GsiDatagram, 8> batch;
  eventually([&] {
    const std::size_t n = gsi.receive(batch);
    got.insert(got.end(), batch.begin(), batch.begin() + static_cast<std::ptrdiff_t>(n));
    return got.size() >= count;
  });
  return got;
}

class GsiChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto started = Dataplane::start(loopback_config());
    ASSERT_TRUE(started.ok()) << started.error();
    dp = std::move(started.value());
    auto channel = GsiChannel::start(*dp);
    ASSERT_TRUE(channel.ok()) << channel.error();
    gsi = std::move(channel.value());
  }
  void TearDown() override {
    gsi.reset();
    if (dp) dp->stop();
  }
  std::unique_ptr<Dataplane> dp;
  std::unique_ptr<GsiChannel> gsi;
};

TEST_F(GsiChannelTest, MadsCrossTheLinkWithTheirAddresses) {
  GsiDatagram out = a_to_b(*dp, 0x5A);
  ASSERT_TRUE(gsi->send(out));
  out.mad = mad_with(0x5B);
  ASSERT_TRUE(gsi->send(out));

  const auto got = receive_until(*gsi, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].port, kPortB);
  EXPECT_EQ(got[0].local_gid, gid_of_port(*dp, kPortB));
  EXPECT_EQ(got[0].remote_gid, gid_of_port(*dp, kPortA));
  EXPECT_EQ(got[0].remote_mac, dp->port(kPortA).mac);
  EXPECT_EQ(got[0].mad, mad_with(0x5A));
  EXPECT_EQ(got[1].mad, mad_with(0x5B));
  EXPECT_EQ(gsi->counters().tx_mads.read(), 2u);
  EXPECT_EQ(gsi->counters().rx_mads.read(), 2u);
}

// The CM's last datagrams (the DREP answering a peer's DREQ as the adapter closes) leave even when the channel
// closes before its poller runs again: the engine is held on a command while they are queued and the channel
// closes, so the removal of the poller is queued right behind it.
TEST_F(GsiChannelTest, DatagramsSentJustBeforeTheChannelClosesStillLeave) {
  constexpr uint64_t kDatagrams = 40;
  Engine& engine = dp->engine(0);  // the GSI engine (engine_of(QPN 1))
  const uint64_t sent_before = engine.port_counters(kPortA).tx_packets.read();
  std::atomic<bool> release{false};
  EngineCommand hold;
  hold.run = [](void* arg, EngineContext&) {
    while (!static_cast<std::atomic<bool>*>(arg)->load(std::memory_order_acquire)) std::this_thread::yield();
  };
  hold.arg = &release;
  ASSERT_TRUE(engine.post(hold).ok());
  const GsiDatagram out = a_to_b(*dp, 0x77);
  for (uint64_t i = 0; i < kDatagrams; ++i) ASSERT_TRUE(gsi->send(out));
  std::thread closer([&] { gsi.reset(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the closer's commands queue behind `hold`
  release.store(true, std::memory_order_release);
  closer.join();
  EXPECT_TRUE(eventually([&] { return engine.port_counters(kPortA).tx_packets.read() - sent_before >= kDatagrams; }))
      << engine.port_counters(kPortA).tx_packets.read() - sent_before << " of " << kDatagrams << " left";
  while (!Engine::done(hold)) std::this_thread::yield();
}

TEST_F(GsiChannelTest, ADatagramFromAnAddressThePortDoesNotOwnIsNotSent) {
  GsiDatagram out;
  out.port = kPortA;
  out.local_gid = gid_of_port(*dp, kPortB);  // port b's address, sent from port a
  out.remote_gid = gid_of_port(*dp, kPortB);
  out.remote_mac = dp->port(kPortB).mac;
  ASSERT_TRUE(gsi->send(out));
  out.port = 7;  // no such port
  ASSERT_TRUE(gsi->send(out));
  ASSERT_TRUE(eventually([&] { return gsi->counters().tx_bad_datagram.read() == 2; }));
  EXPECT_EQ(gsi->counters().tx_mads.read(), 0u);
}

TEST_F(GsiChannelTest, FramesAGsiQpMustRefuseNeverReachTheCm) {
  const auto mad = mad_with(1);
  struct Case {
    const char* what;
    std::function<void(proto::PacketSpec&)> change;
    const Counter& counter;
  };
  const Case cases[] = {
      {"wrong Q_Key", [](proto::PacketSpec& s) { s.deth.qkey = proto::QKey{0x11111111}; }, gsi->counters().rx_not_gsi},
      {"not from QP 1", [](proto::PacketSpec& s) { s.deth.src_qp = proto::Qpn{0x42}; }, gsi->counters().rx_not_gsi},
      {"UD SEND with immediate", [](proto::PacketSpec& s) { s.opcode = proto::Opcode::kUdSendOnlyWithImmediate; },
       gsi->counters().rx_not_gsi},
      {"half a MAD", [&](proto::PacketSpec& s) { s.payload = std::span(mad).first(128); },
       gsi->counters().rx_bad_length},
      {"the invalid P_Key 0", [](proto::PacketSpec& s) { s.pkey = proto::PKey{0}; }, gsi->counters().rx_bad_pkey},
      {"another partition's P_Key", [](proto::PacketSpec& s) { s.pkey = proto::PKey{0x8001}; },
       gsi->counters().rx_bad_pkey},
      {"to another host's address",
       [](proto::PacketSpec& s) { s.dst_gid = proto::gid_from_ipv4(proto::Ipv4Addr{0xC6120063}); },
       gsi->counters().rx_not_our_address},
      {"from the broadcast MAC", [](proto::PacketSpec& s) { s.src_mac = proto::MacAddr{0xFFFFFFFFFFFF}; },
       gsi->counters().rx_bad_source},
      {"from a multicast MAC", [](proto::PacketSpec& s) { s.src_mac = proto::MacAddr{0x01005E000001}; },
       gsi->counters().rx_bad_source},
      {"from a multicast address",
       [](proto::PacketSpec& s) { s.src_gid = proto::gid_from_ipv4(proto::Ipv4Addr{0xE0000001}); },
       gsi->counters().rx_bad_source},
      {"from 0.0.0.0", [](proto::PacketSpec& s) { s.src_gid = proto::gid_from_ipv4(proto::Ipv4Addr{0}); },
       gsi->counters().rx_bad_source},
      {"from the receiving port's own address", [](proto::PacketSpec& s) { s.src_gid = s.dst_gid; },
       gsi->counters().rx_bad_source},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const uint64_t before = c.counter.read();
    FrameGenerator generator(kPortA, 1, [&](uint64_t, std::span<uint8_t> out) {
      proto::PacketSpec s = roce_spec(*dp, kPortA, kPortB, proto::kGsiQpn, proto::Opcode::kUdSendOnly, 0, mad);
      s.deth.qkey = proto::kGsiQKey;
      s.deth.src_qp = proto::kGsiQpn;
      c.change(s);
      return proto::build_packet(s, out);
    });
    run_generator(dp->engine(1), generator);
    EXPECT_TRUE(eventually([&] { return c.counter.read() == before + 1; }));
  }
  std::array<GsiDatagram, 4> batch;
  EXPECT_EQ(gsi->receive(batch), 0u);
  EXPECT_EQ(gsi->counters().rx_mads.read(), 0u);
}

TEST_F(GsiChannelTest, AFullReceiveRingDropsAndCounts) {
  GsiDatagram out;
  out.port = kPortA;
  out.local_gid = gid_of_port(*dp, kPortA);
  out.remote_gid = gid_of_port(*dp, kPortB);
  out.remote_mac = dp->port(kPortB).mac;
  // The control side reads nothing while more MADs arrive than the ring holds (its usable size is one less).
  unsigned sent = 0;
  while (sent < GsiChannel::kRingSize + 50) {
    if (gsi->send(out)) {
      ++sent;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  ASSERT_TRUE(eventually([&] {
    return gsi->counters().rx_mads.read() + gsi->counters().rx_ring_full.read() +
               dp->engine(0).counters().tx_backlog_drops.read() >=
           sent;
  }));
  EXPECT_EQ(gsi->counters().rx_mads.read(), GsiChannel::kRingSize - 1);
  EXPECT_GT(gsi->counters().rx_ring_full.read(), 0u);
  const auto got = receive_until(*gsi, GsiChannel::kRingSize - 1);
  EXPECT_EQ(got.size(), GsiChannel::kRingSize - 1);
}

}  // namespace
}  // namespace uroce::dataplane::testing
