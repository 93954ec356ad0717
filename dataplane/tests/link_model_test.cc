// The bottleneck link model: what does not fit its buffer is dropped and counted, ECN-capable packets are marked CE
// by queue depth with their IP checksum intact, and packets leave in order, never before their departure time and
// never faster than the rate. The model is driven with synthetic mbufs from a real mempool (under the loopback
// suite's EAL) and, mostly, synthetic TSC times, so nothing here depends on the machine's speed; the last test runs
// traffic through an engine.
#include "dataplane/link_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "loopback_fixture.h"
#include "proto/headers.h"
#include "proto/packet_builder.h"
#include "proto/packet_parser.h"

namespace uroce::dataplane::testing {
namespace {

using proto::Opcode;

constexpr uint8_t kNotEct = 0b00;
constexpr uint8_t kEct1 = 0b01;
constexpr uint8_t kEct0 = 0b10;
constexpr uint8_t kCe = 0b11;
constexpr uint64_t kTscHz = 2'100'000'000;  // synthetic: 16.8 cycles per byte at 1 Gb/s, not a whole number
constexpr std::size_t kIpOffset = proto::Eth::kSize;
// RoCE pads its payload to 4 bytes, and the IPv4 and IPv6 headers of a SEND are 58 and 78 bytes: frame() builds
// frames of 2 mod 4 bytes.
constexpr uint32_t kFrame = 1002;

// 128 bits: a TSC count times a rate in bit/s overflows 64.
using Wide = unsigned __int128;

class LinkModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    mbuf_pool = rte_pktmbuf_pool_create("link_model_test", kPoolSize, 0, 0, RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
    ASSERT_NE(mbuf_pool, nullptr) << rte_strerror(rte_errno);
  }
  static void TearDownTestSuite() {
    rte_mempool_free(mbuf_pool);
    mbuf_pool = nullptr;
  }
  // Every test returns every mbuf: the model frees what it drops and what it still holds when destroyed.
  void TearDown() override { EXPECT_EQ(rte_mempool_avail_count(mbuf_pool), kPoolSize); }

  // A RoCE SEND of `length` (2 mod 4) bytes, Ethernet header to ICRC, with PSN `psn` and the ECN bits `ecn`.
  static rte_mbuf* frame(uint32_t psn, uint32_t length, uint8_t ecn = kEct0, bool ipv6 = false) {
    static const std::array<uint8_t, proto::kMaxPayload> kPayload{};
    proto::PacketSpec s;
    s.src_mac = proto::MacAddr{0x02000000000aull};
    s.dst_mac = proto::MacAddr{0x02000000000bull};
    if (ipv6) {
      s.src_gid = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
      s.dst_gid = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
    } else {
      s.src_gid = proto::gid_from_ipv4(proto::Ipv4Addr{0xC6120001});
      s.dst_gid = proto::gid_from_ipv4(proto::Ipv4Addr{0xC6120002});
    }
    s.traffic_class = static_cast<uint8_t>(26 << 2 | ecn);  // RoCE's usual DSCP 26 in the bits ECN must not touch
    s.opcode = Opcode::kRcSendOnly;
    s.dest_qp = proto::Qpn{5};
    s.psn = proto::Psn{psn};
    const std::size_t headers = proto::packet_size(s);
    EXPECT_GE(length, headers);
    s.payload = std::span<const uint8_t>(kPayload).first(length - headers);
    rte_mbuf* m = rte_pktmbuf_alloc(mbuf_pool);
    EXPECT_NE(m, nullptr);
    if (m == nullptr) return nullptr;
    auto* data = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(length)));
    if (proto::build_packet(s, std::span<uint8_t>(data, length)) != length) {
      ADD_FAILURE() << "cannot build a frame of " << length << " bytes";
      rte_pktmbuf_free(m);
      return nullptr;
    }
    return m;
  }

  // The packet as the engine would parse it (IP checksum and ICRC checked); its PSN, or -1 if it does not parse.
  static int64_t psn_of(const rte_mbuf* m) {
    const proto::ParseResult parsed =
        proto::parse_packet(std::span<const uint8_t>(rte_pktmbuf_mtod(m, const uint8_t*), m->data_len));
    if (!parsed.ok()) return -1;
    return parsed.packet.bth().get(proto::Bth::psn).value();
  }
  static uint8_t ecn_of(const rte_mbuf* m, bool ipv6 = false) {
    const auto* ip = rte_pktmbuf_mtod_offset(m, const uint8_t*, kIpOffset);
    return ipv6 ? (ip[1] >> 4) & 3 : ip[1] & 3;
  }
  static uint8_t dscp_of(const rte_mbuf* m, bool ipv6 = false) {
    const auto* ip = rte_pktmbuf_mtod_offset(m, const uint8_t*, kIpOffset);
    return ipv6 ? static_cast<uint8_t>((ip[0] & 0xF) << 2 | ip[1] >> 6) : ip[1] >> 2;
  }

  static config::BottleneckConfig bottleneck(uint32_t rate_mbps, uint32_t buffer_bytes, uint32_t kmin = 0,
                                             uint32_t kmax = 0, double pmax = 1) {
    config::BottleneckConfig b;
    b.rate_mbps = rate_mbps;
    b.buffer_bytes = buffer_bytes;
    b.ecn_kmin_bytes = kmin;
    b.ecn_kmax_bytes = kmax;
    b.ecn_pmax = pmax;
    return b;
  }

  // Everything the model lets out by `now`, in order.
  static std::vector<rte_mbuf*> drain(LinkModel& link, uint64_t now) {
    std::vector<rte_mbuf*> out;
    std::array<rte_mbuf*, LinkModel::kMaxReleased> burst{};
    for (uint16_t n; (n = link.process(nullptr, 0, now, burst.data())) != 0;)
      out.insert(out.end(), burst.data(), burst.data() + n);
    return out;
  }
  static void free_all(const std::vector<rte_mbuf*>& mbufs) {
    for (rte_mbuf* m : mbufs) rte_pktmbuf_free(m);
  }

  static constexpr unsigned kPoolSize = 2047;
  static inline rte_mempool* mbuf_pool = nullptr;
  EngineCounters counters_;
};

TEST_F(LinkModelTest, ABurstLargerThanTheBufferDropsExactlyTheExcess) {
  LinkModel link(bottleneck(1000, 10 * kFrame), kTscHz, 1, 0, counters_);
  std::vector<rte_mbuf*> burst;
  for (uint32_t i = 0; i < 25; ++i) burst.push_back(frame(i, kFrame));
  std::array<rte_mbuf*, LinkModel::kMaxReleased> out{};
  EXPECT_EQ(link.process(burst.data(), static_cast<uint16_t>(burst.size()), 1'000'000, out.data()), 0u);
  EXPECT_EQ(link.queued_packets(), 10u);
  EXPECT_EQ(link.occupancy_bytes(), 10 * kFrame);
  EXPECT_EQ(counters_.bottleneck_dropped.read(), 15u);
  EXPECT_EQ(counters_.bottleneck_queue_peak_bytes.read(), 10 * kFrame);
  EXPECT_EQ(counters_.bottleneck_queue_bytes.read(), 10 * kFrame);  // the gauge

  // The first ten arrived, so the first ten leave, in order; then there is room again.
  const std::vector<rte_mbuf*> released = drain(link, UINT64_MAX);
  ASSERT_EQ(released.size(), 10u);
  EXPECT_EQ(counters_.bottleneck_queue_bytes.read(), 0u);
  EXPECT_EQ(counters_.bottleneck_queue_peak_bytes.read(), 10 * kFrame);
  for (uint32_t i = 0; i < 10; ++i) EXPECT_EQ(psn_of(released[i]), i);
  free_all(released);
  EXPECT_EQ(counters_.bottleneck_forwarded.read(), 10u);
  EXPECT_EQ(link.occupancy_bytes(), 0u);
  rte_mbuf* again = frame(100, kFrame);
  EXPECT_EQ(link.process(&again, 1, 2'000'000, out.data()), 0u);
  EXPECT_EQ(link.queued_packets(), 1u);
  EXPECT_EQ(counters_.bottleneck_dropped.read(), 15u);
}

TEST_F(LinkModelTest, ShortFramesAreChargedTheEthernetMinimum) {
  // 600 bytes hold ten minimum frames, not fourteen 42-byte ones.
  LinkModel link(bottleneck(1000, 600), kTscHz, 1, 0, counters_);
  std::vector<rte_mbuf*> burst;
  for (uint32_t i = 0; i < 14; ++i) {
    rte_mbuf* m = rte_pktmbuf_alloc(mbuf_pool);
    ASSERT_NE(m, nullptr);
    std::memset(rte_pktmbuf_append(m, 42), 0, 42);  // ARP's size: EtherType 0, queued like anything else
    burst.push_back(m);
  }
  std::array<rte_mbuf*, LinkModel::kMaxReleased> out{};
  EXPECT_EQ(link.process(burst.data(), static_cast<uint16_t>(burst.size()), 0, out.data()), 0u);
  EXPECT_EQ(link.queued_packets(), 10u);
  EXPECT_EQ(counters_.bottleneck_dropped.read(), 4u);
  EXPECT_EQ(counters_.bottleneck_ecn_marked.read(), 0u);  // not IP: nothing to mark
}

TEST_F(LinkModelTest, AboveKmaxEctPacketsAreMarkedCeWithAValidChecksum) {
  // A step at two frames: a packet that finds more than that queued is marked.
  LinkModel link(bottleneck(1000, 100'000, 2 * kFrame, 2 * kFrame), kTscHz, 1, 0, counters_);
  struct Arrival {
    uint8_t ecn;
    bool ipv6;
    uint8_t expected;
  };
  const std::vector<Arrival> arrivals = {
      {kEct0, false, kEct0},                         // finds no frame queued
      {kEct1, false, kEct1},                         // one
      {kEct0, false, kEct0},                         // two: not above the threshold
      {kEct0, false, kCe},                           // three
      {kEct1, false, kCe},                           // four
      {kNotEct, false, kNotEct}, {kCe, false, kCe},  // already marked: not counted again
      {kEct0, true, kCe},                            // IPv6
      {kNotEct, true, kNotEct},
  };
  std::vector<rte_mbuf*> burst;
  for (uint32_t i = 0; i < arrivals.size(); ++i) burst.push_back(frame(i, kFrame, arrivals[i].ecn, arrivals[i].ipv6));
  std::array<rte_mbuf*, LinkModel::kMaxReleased> out{};
  EXPECT_EQ(link.process(burst.data(), static_cast<uint16_t>(burst.size()), 0, out.data()), 0u);
  EXPECT_EQ(counters_.bottleneck_ecn_marked.read(), 3u);

  const std::vector<rte_mbuf*> released = drain(link, UINT64_MAX);
  ASSERT_EQ(released.size(), arrivals.size());
  for (uint32_t i = 0; i < released.size(); ++i) {
    const rte_mbuf* m = released[i];
    EXPECT_EQ(psn_of(m), i) << "does not parse, or out of order (IP checksum, ICRC)";  // the ICRC masks ECN
    EXPECT_EQ(ecn_of(m, arrivals[i].ipv6), arrivals[i].expected) << i;
    EXPECT_EQ(dscp_of(m, arrivals[i].ipv6), 26) << i;
    if (!arrivals[i].ipv6) {
      const auto* ip = rte_pktmbuf_mtod_offset(m, const uint8_t*, kIpOffset);
      EXPECT_EQ(proto::ipv4_header_checksum(ip), proto::Ipv4View{ip}.get(proto::Ipv4::checksum)) << i;
    }
  }
  free_all(released);
}

TEST_F(LinkModelTest, AMarkKeepsABadIpv4ChecksumBad) {
  LinkModel link(bottleneck(1000, 100'000, 1, 1), kTscHz, 1, 0, counters_);
  std::array<rte_mbuf*, 2> burst = {frame(0, kFrame), frame(1, kFrame)};
  rte_pktmbuf_mtod_offset(burst[1], uint8_t*, kIpOffset)[8] ^= 1;  // a flipped TTL bit, as the fault injector does
  std::array<rte_mbuf*, LinkModel::kMaxReleased> out{};
  EXPECT_EQ(link.process(burst.data(), 2, 0, out.data()), 0u);
  const std::vector<rte_mbuf*> released = drain(link, UINT64_MAX);
  ASSERT_EQ(released.size(), 2u);
  EXPECT_EQ(ecn_of(released[1]), kCe);
  const auto* ip = rte_pktmbuf_mtod_offset(released[1], const uint8_t*, kIpOffset);
  EXPECT_NE(proto::ipv4_header_checksum(ip), proto::Ipv4View{ip}.get(proto::Ipv4::checksum));
  EXPECT_EQ(psn_of(released[1]), -1);
  free_all(released);
}

TEST_F(LinkModelTest, BelowKminNothingIsMarked) {
  LinkModel link(bottleneck(1000, 100'000, 50'000, 90'000), kTscHz, 1, 0, counters_);
  std::vector<rte_mbuf*> burst;
  for (uint32_t i = 0; i < 50; ++i) burst.push_back(frame(i, kFrame));  // the last finds 49098 bytes queued
  std::array<rte_mbuf*, LinkModel::kMaxReleased> out{};
  EXPECT_EQ(link.process(burst.data(), 50, 0, out.data()), 0u);
  EXPECT_EQ(counters_.bottleneck_ecn_marked.read(), 0u);
  const std::vector<rte_mbuf*> released = drain(link, UINT64_MAX);
  ASSERT_EQ(released.size(), 50u);
  for (const rte_mbuf* m : released) EXPECT_EQ(ecn_of(m), kEct0);
  free_all(released);
}

TEST_F(LinkModelTest, BetweenKminAndKmaxTheMarkingProbabilityRisesLinearly) {
  // kmin 0, kmax 100 frames, pmax 0.5: the i-th of 100 frames finds i queued and is marked with probability i / 200.
  LinkModel link(bottleneck(1000, 100 * kFrame, 0, 100 * kFrame, 0.5), kTscHz, 7, 0, counters_);
  constexpr unsigned kRounds = 40;
  std::array<uint64_t, 2> marked_in_half{};
  for (unsigned round = 0; round < kRounds; ++round) {
    std::vector<rte_mbuf*> burst;
    for (uint32_t i = 0; i < 100; ++i) burst.push_back(frame(i, kFrame));
    std::array<rte_mbuf*, LinkModel::kMaxReleased> out{};
    for (std::size_t i = 0; i < burst.size(); i += LinkModel::kMaxReleased) {
      const auto n = static_cast<uint16_t>(std::min<std::size_t>(LinkModel::kMaxReleased, burst.size() - i));
      EXPECT_EQ(link.process(burst.data() + i, n, 0, out.data()), 0u);
    }
    const std::vector<rte_mbuf*> released = drain(link, UINT64_MAX);
    ASSERT_EQ(released.size(), 100u);
    for (uint32_t i = 0; i < 100; ++i) marked_in_half[i / 50] += ecn_of(released[i]) == kCe ? 1 : 0;
    free_all(released);
  }
  // Expected: 40 x (sum of i / 200 for i < 50) = 245 in the first half, 40 x 18.625 = 745 in the second. The
  // bounds are more than 8 standard deviations wide (the seed is fixed anyway).
  EXPECT_GT(marked_in_half[0], 120u);
  EXPECT_LT(marked_in_half[0], 370u);
  EXPECT_GT(marked_in_half[1], 620u);
  EXPECT_LT(marked_in_half[1], 870u);
  EXPECT_EQ(counters_.bottleneck_ecn_marked.read(), marked_in_half[0] + marked_in_half[1]);
}

// A full buffer at t0, then twice the rate in frames of every size, on a synthetic clock: packets leave in order,
// never before the exact departure time a FIFO at the rate gives them, and never more bytes than rate x elapsed +
// one frame; the queue is never empty, so the link is never idle and serves no fewer than rate x elapsed less a
// frame or two either.
TEST_F(LinkModelTest, PacketsLeaveInOrderNotBeforeTheirDepartureAndNoFasterThanTheRate) {
  constexpr uint64_t kRateMbps = 1000;
  constexpr Wide kRateBps = Wide{kRateMbps} * 1'000'000;
  constexpr uint32_t kMaxFrame = 1498;
  LinkModel link(bottleneck(kRateMbps, 64'000), kTscHz, 1, 0, counters_);
  struct Sent {
    uint64_t arrival;
    uint32_t length;
  };
  std::vector<Sent> sent;
  const uint64_t start = 5'000'000'000'000ull;  // an arbitrary, large TSC value
  std::array<rte_mbuf*, LinkModel::kMaxReleased> out{};
  std::vector<rte_mbuf*> fill;
  for (uint32_t i = 0; i < 42; ++i) {
    fill.push_back(frame(i, kMaxFrame));
    sent.push_back({start, kMaxFrame});
  }
  ASSERT_EQ(link.process(fill.data(), static_cast<uint16_t>(fill.size()), start, out.data()), 0u);
  uint64_t now = start;
  uint32_t next_length = 62;
  Wide departure_scaled = 0;  // the last departure x rate in bit/s, exact
  uint64_t released_bytes = 0;
  std::size_t released_count = 0;
  int64_t last_psn = -1;
  for (unsigned step = 0; step < 40'000; ++step) {
    // Each frame half its serialisation time after the one before: twice the rate (sizes cycle through 62..1406).
    now += static_cast<uint64_t>(Wide{next_length} * 8 * kTscHz / (2 * kRateBps)) + 1;
    rte_mbuf* m = frame(static_cast<uint32_t>(sent.size()), next_length);
    ASSERT_NE(m, nullptr);
    sent.push_back({now, next_length});
    next_length = next_length + 96 > kMaxFrame ? 62 : next_length + 96;
    const uint16_t n = link.process(&m, 1, now, out.data());
    for (uint16_t i = 0; i < n; ++i) {
      const int64_t psn = psn_of(out[i]);
      ASSERT_GT(psn, last_psn);  // in order (drops leave gaps)
      last_psn = psn;
      const Sent& s = sent[static_cast<std::size_t>(psn)];
      ASSERT_EQ(out[i]->pkt_len, s.length);
      departure_scaled = std::max(departure_scaled, Wide{s.arrival} * kRateBps) + Wide{s.length} * 8 * kTscHz;
      ASSERT_GE(Wide{now} * kRateBps, departure_scaled) << "packet " << psn << " left early";
      released_bytes += s.length;
      ++released_count;
      rte_pktmbuf_free(out[i]);
    }
    // All bytes since the first arrival, at the rate: released x 8 x hz <= rate x elapsed + one frame.
    ASSERT_LE(Wide{released_bytes} * 8 * kTscHz, Wide{now - start} * kRateBps + Wide{kMaxFrame} * 8 * kTscHz);
  }
  EXPECT_GT(counters_.bottleneck_dropped.read(), 0u);  // twice the rate: the buffer overflowed
  EXPECT_EQ(counters_.bottleneck_forwarded.read(), released_count);
  EXPECT_LE(counters_.bottleneck_queue_peak_bytes.read(), 64'000u);
  EXPECT_GT(link.queued_packets(), 0u);  // still backlogged at the end
  // Never idle: not slower than the rate either, less the frame in service and the one just short of its departure.
  EXPECT_GE(Wide{released_bytes + 2 * uint64_t{kMaxFrame}} * 8 * kTscHz, Wide{now - start} * kRateBps);
  const std::vector<rte_mbuf*> rest = drain(link, UINT64_MAX);
  free_all(rest);
}

// The same on the real clock, as the engine drives it: a burst at t0 and polls with rte_rdtsc until it is out.
// Only "not before" is asserted: how late a poll comes depends on the machine.
TEST_F(LinkModelTest, OnTheTscNoPacketLeavesBeforeItsDeparture) {
  constexpr uint64_t kRateMbps = 100;  // 80 us a frame: 40 frames take 3.2 ms
  constexpr Wide kRateBps = Wide{kRateMbps} * 1'000'000;
  const uint64_t hz = rte_get_tsc_hz();
  LinkModel link(bottleneck(kRateMbps, 100'000), hz, 1, 0, counters_);
  std::vector<rte_mbuf*> burst;
  for (uint32_t i = 0; i < 40; ++i) burst.push_back(frame(i, kFrame));
  std::array<rte_mbuf*, LinkModel::kMaxReleased> out{};
  const uint64_t t0 = rte_rdtsc();
  EXPECT_EQ(link.process(burst.data(), 40, t0, out.data()), 0u);
  uint32_t next = 0;
  const uint64_t deadline = t0 + 60 * hz;  // a bound on a hang only
  while (next < 40 && rte_rdtsc() < deadline) {
    const uint64_t now = rte_rdtsc();
    const uint16_t n = link.process(nullptr, 0, now, out.data());
    for (uint16_t i = 0; i < n; ++i, ++next) {
      EXPECT_EQ(psn_of(out[i]), next);
      EXPECT_GE(Wide{now - t0} * kRateBps, Wide{next + 1} * kFrame * 8 * hz) << "packet " << next << " left early";
      rte_pktmbuf_free(out[i]);
    }
  }
  EXPECT_EQ(next, 40u);
  EXPECT_TRUE(link.empty());
}

TEST_F(LinkModelTest, AnIdleLinkServesANewPacketFromItsArrival) {
  LinkModel link(bottleneck(1000, 100'000), kTscHz, 1, 0, counters_);
  rte_mbuf* m = frame(0, kFrame);
  std::array<rte_mbuf*, LinkModel::kMaxReleased> out{};
  EXPECT_EQ(link.process(&m, 1, 1'000'000, out.data()), 0u);
  // 1002 bytes at 1 Gb/s on a 2.1 GHz clock: 16833.6 cycles, rounded up.
  EXPECT_EQ(link.next_departure(), 1'016'834u);
  EXPECT_EQ(link.process(nullptr, 0, 1'016'833, out.data()), 0u);
  ASSERT_EQ(link.process(nullptr, 0, 1'016'834, out.data()), 1u);
  rte_pktmbuf_free(out[0]);
  m = frame(1, kFrame);
  EXPECT_EQ(link.process(&m, 1, 9'000'000, out.data()), 0u);  // long after: no credit from the idle time
  EXPECT_EQ(link.next_departure(), 9'016'834u);
  free_all(drain(link, UINT64_MAX));
}

TEST_F(LinkModelTest, HeldPacketsAreFreedWithTheModel) {
  auto link = std::make_unique<LinkModel>(bottleneck(1, 100'000), kTscHz, 1, 0, counters_);
  std::vector<rte_mbuf*> burst;
  for (uint32_t i = 0; i < 30; ++i) burst.push_back(frame(i, kFrame));
  std::array<rte_mbuf*, LinkModel::kMaxReleased> out{};
  EXPECT_EQ(link->process(burst.data(), 30, 0, out.data()), 0u);
  EXPECT_EQ(rte_mempool_avail_count(mbuf_pool), kPoolSize - 30);
  link.reset();  // TearDown checks the pool is full again
}

// Through an engine: engine 0 sends ECN-capable RoCE packets on port a far faster than the 100 Mb/s bottleneck in
// front of port b's queue; the excess is dropped, the queue marks what it holds beyond 5000 bytes, and everything
// that gets through still parses (IP checksum, ICRC) and reaches the QP, no sooner than the rate allows.
class BottleneckLoopbackTest : public LoopbackTest {};

TEST_F(BottleneckLoopbackTest, IncastOverflowsAndMarksAndEverythingForwardedArrives) {
  config::Config config = loopback_config();
  config.faults.bottleneck.rate_mbps = 100;
  config.faults.bottleneck.buffer_bytes = 20'000;
  config.faults.bottleneck.ecn_kmin_bytes = 5000;
  config.faults.bottleneck.ecn_kmax_bytes = 5000;
  ASSERT_TRUE(config.faults.enabled());
  Dataplane& dp = start(config);
  RecordingEndpoint endpoint;
  const proto::Qpn qpn = make_qpn(0, 5);
  ASSERT_TRUE(dp.engine(0).register_qp(qpn, endpoint.endpoint()).ok());

  constexpr uint64_t kPackets = 400;
  const std::vector<uint8_t> payload(900);
  FrameGenerator traffic(kPortA, kPackets, [&](uint64_t i, std::span<uint8_t> out) {
    proto::PacketSpec s = roce_spec(dp, kPortA, kPortB, qpn, Opcode::kRcSendOnly, static_cast<uint32_t>(i), payload);
    s.traffic_class = kEct0;
    return proto::build_packet(s, out);
  });
  const auto began = std::chrono::steady_clock::now();
  run_generator(dp.engine(0), traffic);
  const auto settled = [&] {
    return counter(0, "bottleneck_forwarded") + counter(0, "bottleneck_dropped") + counter(0, "tx_backlog_drops") ==
           kPackets;
  };
  ASSERT_TRUE(eventually(settled)) << counter(0, "bottleneck_forwarded") << " forwarded";
  // Nothing left before the link could have carried it (90%: DPDK measures the TSC's rate, to within a little).
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  EXPECT_GE(seconds, 0.9 * static_cast<double>(counter(0, "rx_bytes")) * 8 / 100e6);
  ASSERT_TRUE(eventually([&] { return endpoint.count() == counter(0, "bottleneck_forwarded"); }))
      << endpoint.count() << " delivered";

  EXPECT_GT(counter(0, "bottleneck_dropped"), 0u);
  EXPECT_GT(counter(0, "bottleneck_ecn_marked"), 0u);
  EXPECT_LT(counter(0, "bottleneck_ecn_marked"), counter(0, "bottleneck_forwarded"));  // not the first ones
  EXPECT_GT(counter(0, "bottleneck_queue_peak_bytes"), 5000u);
  EXPECT_LE(counter(0, "bottleneck_queue_peak_bytes"), 20'000u);
  EXPECT_EQ(counter(0, "rx_packets"), counter(0, "bottleneck_forwarded"));
  EXPECT_EQ(counter(0, "rx_drop_bad_ip_checksum"), 0u);
  EXPECT_EQ(counter(0, "rx_icrc_encapsulated"), 0u);
  EXPECT_EQ(counter(0, "fault_dropped"), 0u);  // the random faults stay off
  const auto packets = endpoint.packets();
  for (std::size_t i = 1; i < packets.size(); ++i) EXPECT_GT(packets[i].psn, packets[i - 1].psn);
}

}  // namespace
}  // namespace uroce::dataplane::testing
