// Congestion control end to end on DPDK devices (issue #16): eight RC QPs write into one port through the
// bottleneck link model (dataplane/link_model.h), whose queue marks ECN above a threshold. The receiving QPs answer
// the marks with CNPs, the senders' DCQCN rate cuts and paces them, and every byte still lands.
//
// What is asserted does not depend on the machine's speed (STYLE.md 17): counts that the protocol ties together
// (every CNP sent reaches a sender, no more CNPs than marked packets), that pacing happened, and the data. How close
// DCQCN gets to the bottleneck's rate, how fair it is and what it drops are measured in bench/ (uroce_bench_incast).
#include <gtest/gtest.h>

#include <cstring>
#include <string_view>

#include "dataplane/tests/rc_players.h"

namespace uroce::dataplane::testing {
namespace {

uint64_t sum(Dataplane& dp, Counter TransportCounters::*member) {
  uint64_t total = 0;
  for (EngineId e = 0; e < dp.engine_count(); ++e) total += (dp.engine(e).counters().transport.*member).read();
  return total;
}

uint64_t sum_engine(Dataplane& dp, Counter EngineCounters::*member) {
  uint64_t total = 0;
  for (EngineId e = 0; e < dp.engine_count(); ++e) total += (dp.engine(e).counters().*member).read();
  return total;
}

struct IncastResult {
  uint64_t marked = 0, cnps_sent = 0, cnps_handled = 0, cnps_ignored = 0, paced = 0, ecn_marked_at_bottleneck = 0;
};

enum class Flow : uint8_t { kWrites, kReads };

// Eight pairs, A_i on port a writing 8 x 32 KiB into B_i on port b, all of it through one bottleneck queue. With
// kReads, B_i reads them from A_i instead: A_i's READ responses cross the bottleneck, two READs of each QP at once
// (as much in flight as the WRITEs' cap allows them).
IncastResult run_incast(config::Config c, Flow flow = Flow::kWrites) {
  c.faults.bottleneck.rate_mbps = 200;
  // Eight QPs with 64 KiB each in flight never fill a 1 MiB queue, so nothing is dropped: this test is about the
  // marks (and the queueing delay, 512 KiB at 200 Mb/s = 21 ms, stays below the 67 ms ACK timeout).
  c.congestion.max_bytes_in_flight = 64 * 1024;
  c.faults.bottleneck.buffer_bytes = 1 << 20;
  c.faults.bottleneck.ecn_kmin_bytes = 16 * 1024;
  c.faults.bottleneck.ecn_kmax_bytes = 16 * 1024;  // a step, as DCTCP-style switches mark
  RcWorld world(c);
  EXPECT_TRUE(world.ok()) << world.error();
  if (!world.ok()) return {};
  constexpr int kPairs = 8;
  constexpr uint32_t kWrites = 8;
  constexpr uint32_t kSize = 32 * 1024;
  std::vector<std::pair<Player*, Player*>> pairs;
  proto::RcQpAttributes attrs;
  attrs.max_rd_atomic = 2;
  for (int i = 0; i < kPairs; ++i) {
    pairs.push_back(world.connected_pair(1024, attrs));
    if (pairs.back().first == nullptr) {
      ADD_FAILURE() << world.error();
      return {};
    }
  }
  for (auto& [a, b] : pairs) {
    fill_pattern(a->buffer, std::size_t{kSize} * kWrites, static_cast<uint32_t>(a->qp()->qpn().value()));
    if (flow == Flow::kReads) {
      b->post_reads(*a, kWrites, kSize);
    } else {
      a->post_writes(*b, kWrites, kSize);
    }
  }
  for (auto& [a, b] : pairs) {
    const auto moved = (flow == Flow::kReads ? b : a)->wait_send_successes(kWrites);
    EXPECT_TRUE(moved);
    if (!moved) return {};
    EXPECT_EQ(std::memcmp(a->buffer.data(), b->buffer.data(), std::size_t{kSize} * kWrites), 0);
  }
  Dataplane& dp = world.dataplane();
  // The counters reach the engines' totals when the QPs go idle; a CNP sent last may still be on its way.
  IncastResult r;
  const auto read = [&] {
    r.marked = sum(dp, &TransportCounters::np_ecn_marked_roce_packets);
    r.cnps_sent = sum(dp, &TransportCounters::np_cnp_sent);
    r.cnps_handled = sum(dp, &TransportCounters::rp_cnp_handled);
    r.cnps_ignored = sum(dp, &TransportCounters::rp_cnp_ignored);
    r.paced = sum(dp, &TransportCounters::tx_paced);
    r.ecn_marked_at_bottleneck = sum_engine(dp, &EngineCounters::bottleneck_ecn_marked);
    return r.cnps_handled + r.cnps_ignored == r.cnps_sent && r.marked == r.ecn_marked_at_bottleneck;
  };
  EXPECT_TRUE(eventually(read)) << r.cnps_sent << " CNPs sent, " << r.cnps_handled << " handled; " << r.marked
                                << " marked packets received, " << r.ecn_marked_at_bottleneck << " marked";
  EXPECT_EQ(sum_engine(dp, &EngineCounters::bottleneck_dropped), 0u);
  for (auto& [a, b] : pairs) world.destroy(a, b);
  return r;
}

TEST(CongestionLoopback, MarkedPacketsBringCnpsThatPaceTheSendersAndEveryByteLands) {
  const IncastResult r = run_incast(loopback_config());
  EXPECT_GT(r.ecn_marked_at_bottleneck, 0u) << "the queue never passed its marking threshold";
  EXPECT_EQ(r.marked, r.ecn_marked_at_bottleneck);  // every data packet was ECN-capable, and every mark was seen
  EXPECT_GT(r.cnps_sent, 0u);
  EXPECT_LE(r.cnps_sent, r.marked);
  EXPECT_EQ(r.cnps_handled, r.cnps_sent);  // each reached its sender, which has rate control
  EXPECT_EQ(r.cnps_ignored, 0u);
  EXPECT_GT(r.paced, 0u) << "no sender was ever held back by its DCQCN rate";
}

// READ responses are the QP's data as much as its requests (rocev2.md §7.1): B_i read from A_i, A_i's responses are
// marked at the bottleneck, B_i's CNPs reach A_i, and A_i's responses wait for its DCQCN rate. (Responses used to
// leave at line rate whatever the CNPs said.)
TEST(CongestionLoopback, MarkedReadResponsesBringCnpsThatPaceTheResponders) {
  const IncastResult r = run_incast(loopback_config(), Flow::kReads);
  EXPECT_GT(r.ecn_marked_at_bottleneck, 0u) << "the queue never passed its marking threshold";
  EXPECT_EQ(r.marked, r.ecn_marked_at_bottleneck);
  EXPECT_GT(r.cnps_sent, 0u);
  EXPECT_EQ(r.cnps_handled, r.cnps_sent);
  EXPECT_GT(r.paced, 0u) << "no responder was ever held back by its DCQCN rate";
}

// The A/B half: with ECN off the switch marks nothing (a Not-ECT packet is never marked), so no CNP is sent and
// nothing is paced; with only the reaction point off, the CNPs arrive and are counted as ignored.
TEST(CongestionLoopback, WithoutEcnNothingIsMarkedAndWithoutTheReactionPointCnpsAreIgnored) {
  config::Config no_ecn = loopback_config();
  no_ecn.congestion.ecn = false;
  const IncastResult off = run_incast(no_ecn);
  EXPECT_EQ(off.ecn_marked_at_bottleneck, 0u);
  EXPECT_EQ(off.cnps_sent, 0u);
  EXPECT_EQ(off.paced, 0u);

  config::Config no_rp = loopback_config();
  no_rp.congestion.reaction_point.enabled = false;
  const IncastResult ignored = run_incast(no_rp);
  EXPECT_GT(ignored.cnps_sent, 0u);
  EXPECT_EQ(ignored.cnps_ignored, ignored.cnps_sent);
  EXPECT_EQ(ignored.cnps_handled, 0u);
  EXPECT_EQ(ignored.paced, 0u);
}

struct SlowReceiverResult {
  uint64_t dropped = 0, retransmitted = 0, losses = 0, slow_restarts = 0, window = 0;
};

// One QP writes 2 MiB through a bottleneck whose 64 KiB buffer holds far less than the default in-flight cap (1 MiB:
// 1024 packets at PMTU 1024), with no ECN marking: the bottleneck drops what does not fit, the receiver NAKs the
// gap, and the sender goes back N. 50 Mb/s is slower than any sender, so the buffer overflows on any machine.
SlowReceiverResult write_through_small_buffer(bool slow_restart) {
  config::Config c = loopback_config();
  c.faults.bottleneck.rate_mbps = 50;
  c.faults.bottleneck.buffer_bytes = 64 * 1024;
  c.congestion.slow_restart = slow_restart;
  RcWorld world(c);
  EXPECT_TRUE(world.ok()) << world.error();
  if (!world.ok()) return {};
  auto [a, b] = world.connected_pair(1024);
  EXPECT_TRUE(a && b) << world.error();
  if (a == nullptr || b == nullptr) return {};
  constexpr uint32_t kWrites = 32, kSize = 64 * 1024;
  fill_pattern(a->buffer, std::size_t{kSize} * kWrites, 7);
  a->post_writes(*b, kWrites, kSize);
  const auto written = a->wait_send_successes(kWrites);
  EXPECT_TRUE(written);
  if (!written) return {};
  EXPECT_EQ(std::memcmp(a->buffer.data(), b->buffer.data(), std::size_t{kSize} * kWrites), 0);
  // The sender's own counters, as telemetry reports them (read on its engine).
  const auto report = world.transport().report_qp(a->qp()->qpn().value());
  EXPECT_TRUE(report);
  if (!report) return {};
  const auto number = [&](std::string_view name) {
    for (const auto& [key, value] : report->numbers)
      if (key == name) return value;
    ADD_FAILURE() << "no " << name << " in the QP report";
    return uint64_t{0};
  };
  SlowReceiverResult r;
  r.dropped = sum_engine(world.dataplane(), &EngineCounters::bottleneck_dropped);
  r.retransmitted = number("retransmitted_packets");
  r.losses = number("packet_seq_err") + number("local_ack_timeout_err");
  r.slow_restarts = number("roce_slow_restart");
  r.window = number("window_packets");
  world.destroy(a, b);
  return r;
}

// congestion.slow_restart A/B: each loss halves the window, so the resends stop overflowing the buffer; without it,
// every go-back-N sends the whole 1024-packet window into it again.
TEST(CongestionLoopback, SlowRestartShrinksTheWindowToWhatTheReceiverCanBuffer) {
  const SlowReceiverResult off = write_through_small_buffer(false);
  const SlowReceiverResult on = write_through_small_buffer(true);
  std::printf(
      "2048 packets through a 64 KiB buffer: slow restart off: %llu dropped, %llu resent; on: %llu dropped, "
      "%llu resent, %llu slow restarts\n",
      static_cast<unsigned long long>(off.dropped), static_cast<unsigned long long>(off.retransmitted),
      static_cast<unsigned long long>(on.dropped), static_cast<unsigned long long>(on.retransmitted),
      static_cast<unsigned long long>(on.slow_restarts));
  EXPECT_GT(off.dropped, 0u);
  EXPECT_GT(off.retransmitted, 0u);
  EXPECT_EQ(off.slow_restarts, 0u);
  EXPECT_EQ(off.window, 1024u);
  EXPECT_GT(on.dropped, 0u);
  EXPECT_GE(on.slow_restarts, 1u);
  EXPECT_LE(on.slow_restarts, on.losses);  // once per loss at most (a go-back-N pass ignores its gap's other NAKs)
  EXPECT_LT(on.window, 1024u);             // 2048 packets grow a halved window back by at most a few packets
  // The first overflow is the same in both runs; after it, the halved windows drop and resend less.
  EXPECT_LT(on.dropped, off.dropped);
  EXPECT_LT(on.retransmitted, off.retransmitted);
}

}  // namespace
}  // namespace uroce::dataplane::testing
