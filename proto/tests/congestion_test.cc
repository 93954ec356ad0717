// Congestion control in the protocol layer: the DCQCN reaction point's rate (proto/dcqcn.h) in virtual time, and,
// over the simulated wire, the cap on packets in flight, CNPs for CE-marked packets and the pacing they cause.
#include <gtest/gtest.h>

#include <cmath>

#include "proto/dcqcn.h"
#include "proto/packet_template.h"
#include "proto/tests/rc_sim_requests.h"
#include "proto/tests/test_vectors.h"

namespace uroce::proto {
namespace {

using testing::Region;
using testing::SimNetwork;

constexpr uint64_t kUs = 1000;

// NVIDIA's ConnectX values (rocev2.md §7.4) at 10 Gb/s: the α and monitor clocks these tests count in.
DcqcnParameters ten_gig() {
  DcqcnParameters p;
  p.max_rate_mbps = 10'000;
  p.dce_tcp_g = 1019;
  p.dce_tcp_rtt_ns = 1'000;
  p.rate_reduce_monitor_period_ns = 4'000;
  p.time_reset_ns = 300'000;
  p.byte_reset = 32'767;
  p.threshold = 1;
  p.ai_rate_mbps = 5;
  p.hai_rate_mbps = 50;
  return p;
}

// ---- The reaction point's rate ----

TEST(Dcqcn, AFirstCnpCutsTheRateByAlphaOverTwo) {
  DcqcnRate r(ten_gig());
  EXPECT_FALSE(r.limited());
  r.on_cnp(1'000'000);
  EXPECT_TRUE(r.limited());
  EXPECT_EQ(r.alpha(), 1023u);
  EXPECT_EQ(r.target_mbps(), 10'000u);
  // α = 1023/1024, so the cut is 0.4995: 10000 x 0.5005.
  EXPECT_NEAR(r.current_mbps(), 5004, 1);
}

// A QP quiet for a long time after congestion: each rate-increase period T that passed is an increase event, however
// many passed before the QP next sends (only the first 64 of one advance used to count: a QP quiet for a second
// came back 64 additive steps, 320 Mb/s here, above where the congestion had left it).
TEST(Dcqcn, AQuietQpRecoversByEveryTimerPeriodThatPassed) {
  DcqcnParameters p = ten_gig();
  p.min_rate_mbps = 10;
  DcqcnRate r(p);
  uint64_t t = 1'000'000;
  for (int i = 0; i < 40; ++i) r.on_cnp(t += 4 * kUs);
  ASSERT_LT(r.current_mbps(), 100u);
  // 2000 periods of T (300 us): additive steps of 5 Mb/s (R_AI) bring 10 Gb/s back within them.
  EXPECT_TRUE(r.may_send(t + 2000 * 300 * kUs));
  EXPECT_FALSE(r.limited()) << "still at " << r.current_mbps() << " Mb/s";
  // Fewer periods bring back what they should, and no more: 200 steps of 5 Mb/s from where the cut left it.
  DcqcnRate s(p);
  t = 1'000'000;
  for (int i = 0; i < 40; ++i) s.on_cnp(t += 4 * kUs);
  const uint32_t cut = s.target_mbps();
  (void)s.may_send(t + 200 * 300 * kUs + 1);
  EXPECT_TRUE(s.limited());
  EXPECT_NEAR(s.target_mbps(), cut + (200 - p.threshold) * p.ai_rate_mbps, 2 * p.ai_rate_mbps);
}

TEST(Dcqcn, CnpsInsideTheMonitorPeriodCutOnce) {
  DcqcnRate r(ten_gig());
  const uint64_t t = 1'000'000;
  r.on_cnp(t);
  const uint32_t once = r.current_mbps();
  r.on_cnp(t + 1 * kUs);
  r.on_cnp(t + 3 * kUs);
  EXPECT_EQ(r.current_mbps(), once);
  r.on_cnp(t + 4 * kUs);  // rate_reduce_monitor_period: 4 us
  EXPECT_LT(r.current_mbps(), once);
  EXPECT_EQ(r.target_mbps(), once);
}

TEST(Dcqcn, NoCutIsDeeperThanMinDecFacAndNoRateBelowTheMinimum) {
  DcqcnParameters p = ten_gig();
  p.min_dec_fac = 10;
  p.min_rate_mbps = 4000;
  DcqcnRate r(p);
  uint64_t t = 1'000'000;
  r.on_cnp(t);
  EXPECT_EQ(r.current_mbps(), 9000u);  // α/2 would cut 50%
  for (int i = 0; i < 100; ++i) r.on_cnp(t += 4 * kUs);
  EXPECT_EQ(r.current_mbps(), 4000u);
}

TEST(Dcqcn, AlphaDecaysByGEachPeriodWithoutACnpAndRisesWithOne) {
  DcqcnRate r(ten_gig());
  const uint64_t t = 1'000'000;
  r.on_cnp(t);
  (void)r.may_send(t + 100 * kUs);  // 100 periods of 1 us
  const double decayed = 1023 * std::pow(1019.0 / 1024, 100);
  EXPECT_NEAR(r.alpha(), decayed, 1.5);
  // A period with a CNP: α ← α·g + (1 − g), against α·g in a period without; 1 − g is 5 of 1024.
  DcqcnRate quiet = r;
  r.on_cnp(t + 100 * kUs + 500);
  (void)r.may_send(t + 101 * kUs);
  (void)quiet.may_send(t + 101 * kUs);
  EXPECT_NEAR(r.alpha(), quiet.alpha() + 5, 1);
}

// After one CNP and no more, R_T is the line rate: each rate-increase timer expiry halves the distance to it (fast
// recovery; additive increase once past F only moves R_T, already at its cap). The limiter switches off at line rate
// after exactly as many expiries as that halving predicts.
TEST(Dcqcn, RecoveryToLineRateTakesTheTimeTheParametersPredict) {
  const DcqcnParameters p = ten_gig();
  DcqcnRate r(p);
  const uint64_t t0 = 1'000'000;
  r.on_cnp(t0);
  uint32_t rate = r.current_mbps();
  unsigned expiries = 0;
  while (rate < p.max_rate_mbps) {
    rate = (p.max_rate_mbps + rate + 1) / 2;
    ++expiries;
  }
  const uint64_t recovered_at = t0 + uint64_t{expiries} * p.time_reset_ns;
  (void)r.may_send(recovered_at - 1);
  EXPECT_TRUE(r.limited());
  (void)r.may_send(recovered_at);
  EXPECT_FALSE(r.limited());
  EXPECT_EQ(r.current_mbps(), p.max_rate_mbps);
}

TEST(Dcqcn, AdditiveIncreaseOnceOneCounterPassesFHyperOnceBoth) {
  DcqcnParameters p = ten_gig();
  p.threshold = 1;
  p.byte_reset = 1000;
  p.ai_rate_mbps = 5;
  p.hai_rate_mbps = 50;
  DcqcnRate r(p);
  uint64_t t = 1'000'000;
  r.on_cnp(t);
  r.on_cnp(t += 4 * kUs);  // a second cut: R_T is below the line rate now
  const uint32_t target = r.target_mbps();
  ASSERT_LT(target, p.max_rate_mbps);
  r.on_sent(1000, t);  // the byte counter expires once: byte stage 1 = F, timer stage 0: additive
  EXPECT_EQ(r.target_mbps(), target + 5);
  (void)r.may_send(t + p.time_reset_ns);  // the timer expires once: both stages at F: hyper, i = 1
  EXPECT_EQ(r.target_mbps(), target + 5 + 50);
}

// The pacer, driven by a sender that sends a 1000-byte frame whenever it may: over 10 ms at a fixed rate, the bytes
// sent never exceed rate x time plus the burst, and fall short of it by at most one frame.
TEST(Dcqcn, ThePacerHoldsTheRateItWasCutTo) {
  DcqcnParameters p = ten_gig();
  p.time_reset_ns = 1'000'000'000;  // no increase during the run: a fixed rate
  p.byte_reset = 0xFFFFFFFF;
  DcqcnRate r(p);
  const uint64_t t0 = 1'000'000;
  r.on_cnp(t0);
  const double bytes_per_ns = r.current_mbps() / 8000.0;
  uint64_t sent = 0;
  for (uint64_t t = t0; t <= t0 + 10'000 * kUs; t += 50) {
    while (r.may_send(t)) {
      r.on_sent(1000, t);
      sent += 1000;
      const double allowed = bytes_per_ns * static_cast<double>(t - t0) + DcqcnRate::kBurstBytes + 1000;
      ASSERT_LE(static_cast<double>(sent), allowed) << "at " << t - t0 << " ns";
    }
  }
  EXPECT_GE(static_cast<double>(sent), bytes_per_ns * 10'000 * kUs - 1000);
}

// ---- Over the wire ----

// Marks every frame from A to B CE (a congested switch on that direction), keeping its IPv4 checksum valid.
void mark_congestion_experienced(std::vector<uint8_t>& frame) {
  uint8_t* ip = frame.data() + Eth::kSize;
  ip[1] |= kEcnCe;
  MutView<Ipv4>{ip}.set(Ipv4::checksum, ipv4_header_checksum(ip));
}

struct WireCount {
  unsigned cnps = 0;
  unsigned becn = 0;
};
WireCount count_cnps(const SimNetwork& net) {
  WireCount c;
  for (const auto& f : net.wire_log) {
    const ParseResult r = parse_packet(std::span<const uint8_t>(f));
    if (!r.ok() || r.packet.opcode() != Opcode::kCnp) continue;
    ++c.cnps;
    c.becn += r.packet.bth().get(Bth::becn) ? 1 : 0;
  }
  return c;
}

// WRITE number `index` of `length` bytes: from and to offset index x length.
SendWqe write_of(const Region& src, const Region& dst, uint32_t length, uint64_t index) {
  SendWqe w;
  w.context = index;
  w.op = WorkOp::kRdmaWrite;
  w.flags = kWqeSignaled;
  w.num_sge = 1;
  w.sge[0] = Sge{src.addr(index * length), length, LocalToken{src.key}};
  w.length = length;
  w.remote_addr = dst.addr(index * length);
  w.rkey = RemoteToken{dst.key};
  return w;
}

TEST(CongestionWire, TheInFlightCapBoundsOutstandingPacketsEvenThroughLoss) {
  RcQpAttributes attrs;
  attrs.path_mtu = 1024;
  attrs.max_packets_in_flight = 8;
  SimNetwork net(attrs);
  net.faults.loss = 0.05;
  net.keep_wire_log = false;
  Region& src = net.a().add_region(256 * 1024, 0, 0x5A);
  Region& dst = net.b().add_region(256 * 1024, kAccessRemoteWrite);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(net.a().post_send(write_of(src, dst, 64 * 1024, i)));
  int32_t most = 0;
  ASSERT_TRUE(net.run([&] {
    most = std::max(most, distance(net.a().qp.next_send_psn(), net.a().qp.oldest_unacked_psn()));
    return net.a().send_completions.size() == 4;
  }));
  EXPECT_LE(most, 8);
  EXPECT_EQ(most, 8);  // and the window is used
  for (const Completion& c : net.a().send_completions) EXPECT_EQ(c.status, CompletionStatus::kSuccess);
  EXPECT_EQ(std::memcmp(dst.bytes.data(), src.bytes.data(), 256 * 1024), 0);
}

// The packet that fills the window asks for an ACK: a responder that ACKs only on AckReq (rxe) would otherwise leave
// the window shut until the retransmission timer.
TEST(CongestionWire, ThePacketThatFillsTheWindowAsksForAnAck) {
  RcQpAttributes attrs;
  attrs.path_mtu = 1024;
  attrs.max_packets_in_flight = 8;
  SimNetwork net(attrs);
  Region& src = net.a().add_region(64 * 1024, 0);
  Region& dst = net.b().add_region(64 * 1024, kAccessRemoteWrite);
  ASSERT_TRUE(net.a().post_send(write_of(src, dst, 64 * 1024, 0)));
  EXPECT_EQ(net.a().qp.send(32), 8u);
  ASSERT_EQ(net.a().outbox.size(), 8u);
  for (std::size_t i = 0; i < 8; ++i) {
    const ParseResult r = parse_packet(std::span<const uint8_t>(net.a().outbox[i]));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r.packet.bth().get(Bth::ack_req), i == 7) << "packet " << i;
  }
}

// Slow restart against a receiver that drops what it cannot buffer: B holds 24 frames and takes 8 a round, A sends
// up to 32 a round under a cap of 64 packets, so a full window always overflows B. Every loss is a go-back-N of the
// window; without slow restart each resend meets the same overflow.
struct SlowReceiverRun {
  RcCounters sender;
  uint64_t overflowed = 0;
  uint32_t smallest_window = 0;
  int32_t most_over_window = 0;  // the most packets in flight beyond the window at any point (should stay <= 0)
};

// `keep`: run on this network instead (its QPs keep the attributes it was made with) and leave it for more.
SlowReceiverRun write_into_slow_receiver(bool slow_restart, SimNetwork* keep = nullptr) {
  RcQpAttributes attrs;
  attrs.path_mtu = 1024;
  attrs.max_packets_in_flight = 64;
  attrs.slow_restart = slow_restart;
  SimNetwork local(attrs);
  SimNetwork& net = keep != nullptr ? *keep : local;
  net.faults.b_buffer_frames = 24;
  net.faults.b_frames_per_round = 8;
  net.keep_wire_log = false;
  constexpr uint32_t kWrites = 32, kSize = 64 * 1024;
  Region& src = net.a().add_region(std::size_t{kWrites} * kSize, 0, 0x5A);
  Region& dst = net.b().add_region(std::size_t{kWrites} * kSize, kAccessRemoteWrite);
  for (uint64_t i = 0; i < kWrites; ++i) EXPECT_TRUE(net.a().post_send(write_of(src, dst, kSize, i)));
  SlowReceiverRun r;
  r.smallest_window = net.a().qp.window_packets();
  r.most_over_window = -1'000'000;
  EXPECT_TRUE(net.run([&] {
    const RcQp& qp = net.a().qp;
    r.smallest_window = std::min(r.smallest_window, qp.window_packets());
    r.most_over_window = std::max(r.most_over_window, distance(qp.next_send_psn(), qp.oldest_unacked_psn()) -
                                                          static_cast<int32_t>(qp.window_packets()));
    return net.a().send_completions.size() == kWrites;
  }));
  for (const Completion& c : net.a().send_completions) EXPECT_EQ(c.status, CompletionStatus::kSuccess);
  EXPECT_EQ(std::memcmp(dst.bytes.data(), src.bytes.data(), std::size_t{kWrites} * kSize), 0);
  r.sender = net.a().qp.counters();
  r.overflowed = net.frames_overflowed;
  return r;
}

TEST(CongestionWire, SlowRestartHalvesTheWindowOnLossSoASlowReceiverStopsOverflowing) {
  const SlowReceiverRun without = write_into_slow_receiver(false);
  const SlowReceiverRun with = write_into_slow_receiver(true);
  // Without it: the window stays at the cap and every resend overflows B again.
  EXPECT_EQ(without.sender.roce_slow_restart, 0u);
  EXPECT_EQ(without.smallest_window, 64u);
  EXPECT_GT(without.overflowed, 0u);
  // With it: each loss halved the window, and in flight never exceeded it.
  EXPECT_GE(with.sender.roce_slow_restart, 1u);
  EXPECT_EQ(with.sender.roce_slow_restart, with.sender.packet_seq_err + with.sender.local_ack_timeout_err);
  EXPECT_LE(with.smallest_window, 32u);
  EXPECT_LE(with.most_over_window, 0);
  EXPECT_LE(without.most_over_window, 0);
  // ...and B dropped, and A resent, far less (the simulation is deterministic: these are fixed numbers).
  std::printf("slow receiver, 2048 packets: without slow restart %llu resent, %llu overflowed; with %llu, %llu\n",
              static_cast<unsigned long long>(without.sender.retransmitted_packets),
              static_cast<unsigned long long>(without.overflowed),
              static_cast<unsigned long long>(with.sender.retransmitted_packets),
              static_cast<unsigned long long>(with.overflowed));
  EXPECT_LT(with.sender.retransmitted_packets * 4, without.sender.retransmitted_packets);
  EXPECT_LT(with.overflowed * 4, without.overflowed);
}

TEST(CongestionWire, AfterSlowRestartTheWindowGrowsBackToTheCap) {
  RcQpAttributes attrs;
  attrs.path_mtu = 1024;
  attrs.max_packets_in_flight = 64;
  SimNetwork net(attrs);
  (void)write_into_slow_receiver(true, &net);
  const uint32_t after_loss = net.a().qp.window_packets();
  ASSERT_LT(after_loss, 64u);
  // B now takes everything: one packet more per window acknowledged, so from w to 64 in (64^2 - w^2) / 2 packets.
  net.faults.b_buffer_frames = 0;
  Region& src = net.a().add_region(4 << 20, 0, 0x33);
  Region& dst = net.b().add_region(4 << 20, kAccessRemoteWrite);
  uint32_t previous = after_loss;
  bool monotonic = true;
  for (uint64_t i = 0; i < 64; ++i) ASSERT_TRUE(net.a().post_send(write_of(src, dst, 64 * 1024, i)));
  ASSERT_TRUE(net.run([&] {
    monotonic &= net.a().qp.window_packets() >= previous;
    previous = net.a().qp.window_packets();
    return net.a().send_completions.size() == 32 + 64;
  }));
  EXPECT_TRUE(monotonic);
  EXPECT_EQ(net.a().qp.window_packets(), 64u);
  EXPECT_EQ(std::memcmp(dst.bytes.data(), src.bytes.data(), 4 << 20), 0);
}

RcQpAttributes dcqcn_attributes() {
  RcQpAttributes attrs;
  attrs.path_mtu = 1024;
  attrs.notify_congestion = true;
  attrs.min_time_between_cnps_ns = 50 * kUs;
  attrs.rate_control = true;
  attrs.dcqcn = ten_gig();
  return attrs;
}

TEST(CongestionWire, CeMarkedPacketsBringCnpsThatSlowTheSenderDown) {
  SimNetwork net(dcqcn_attributes());
  net.tamper = [](std::vector<uint8_t>& f, bool a_to_b) {
    if (a_to_b) mark_congestion_experienced(f);
  };
  Region& src = net.a().add_region(1 << 20, 0, 0x3C);
  Region& dst = net.b().add_region(1 << 20, kAccessRemoteWrite);
  const uint64_t start = net.now();
  for (uint64_t i = 0; i < 16; ++i) ASSERT_TRUE(net.a().post_send(write_of(src, dst, 64 * 1024, i)));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 16; }));
  const RcCounters& np = net.b().qp.counters();
  const RcCounters& rp = net.a().qp.counters();
  EXPECT_EQ(np.np_ecn_marked_roce_packets, 1024u);  // every WRITE packet
  EXPECT_GE(np.np_cnp_sent, 2u);
  // One CNP per 50 us at most.
  EXPECT_LE(np.np_cnp_sent, (net.now() - start) / (50 * kUs) + 1);
  EXPECT_EQ(rp.rp_cnp_handled, np.np_cnp_sent);
  EXPECT_GT(rp.tx_paced, 0u);
  EXPECT_LT(net.a().qp.rate().current_mbps(), 10'000u);
  const WireCount wire = count_cnps(net);
  EXPECT_EQ(wire.cnps, np.np_cnp_sent);
  EXPECT_EQ(wire.becn, wire.cnps);
  // B's own ACKs were not marked: A sent no CNPs.
  EXPECT_EQ(rp.np_cnp_sent, 0u);
  for (const Completion& c : net.a().send_completions) EXPECT_EQ(c.status, CompletionStatus::kSuccess);
  EXPECT_EQ(std::memcmp(dst.bytes.data(), src.bytes.data(), 1 << 20), 0);
}

// Paced at a low rate, a long message's packets leave far apart, and AckReq only every ack_request_interval (64)
// packets asked for an ACK less often than the ACK timeout: the retransmit timer fired with nothing lost, spending a
// retry, halving the window and resending what had arrived (a peer's forged CNPs alone could keep a QP so). A paced
// QP asks for an ACK at least every quarter of the timeout.
TEST(CongestionWire, APacedMessageAsksForAcksWithinTheAckTimeout) {
  RcQpAttributes attrs = dcqcn_attributes();
  attrs.ack_timeout = 8;           // 1.05 ms
  attrs.dcqcn.min_rate_mbps = 20;  // every packet marked: cut to about this, a 1 KiB packet every ~0.45 ms
  SimNetwork net(attrs);
  net.tamper = [](std::vector<uint8_t>& f, bool a_to_b) {
    if (a_to_b) mark_congestion_experienced(f);
  };
  Region& src = net.a().add_region(1 << 20, 0, 0x3C);
  Region& dst = net.b().add_region(1 << 20, kAccessRemoteWrite);
  // A first WRITE brings the CNP that starts the pacing; the long ones leave paced.
  ASSERT_TRUE(net.a().post_send(write_of(src, dst, 4096, 255)));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 1 && net.a().qp.rate().limited(); }));
  for (uint64_t i = 0; i < 2; ++i) ASSERT_TRUE(net.a().post_send(write_of(src, dst, 256 * 1024, i)));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 3; }));
  const RcCounters& rp = net.a().qp.counters();
  EXPECT_GT(rp.tx_paced, 0u);
  EXPECT_EQ(rp.local_ack_timeout_err, 0u);
  EXPECT_EQ(rp.retransmitted_packets, 0u);
  for (const Completion& c : net.a().send_completions) EXPECT_EQ(c.status, CompletionStatus::kSuccess);
  EXPECT_EQ(std::memcmp(dst.bytes.data(), src.bytes.data(), 512 * 1024), 0);
}

// Paced slower still, a packet leaves only after the ACK timeout: between two packets of the message nothing is in
// flight, every packet sent is acknowledged, and the message is only part sent. The retransmit timer runs only while
// a request sent awaits its answer; it used to run while a message was part sent, and fired between the packets:
// a timeout and a lost retry per packet, with nothing lost.
TEST(CongestionWire, ATimerRunsOnlyWhileARequestAwaitsItsAnswer) {
  RcQpAttributes attrs = dcqcn_attributes();
  attrs.ack_timeout = 8;  // 1.05 ms
  // The first CNP sets 4 Mb/s (a 1 KiB packet every ~2 ms), and the rate stays there.
  attrs.dcqcn.min_rate_mbps = 4;
  attrs.dcqcn.rate_to_set_on_first_cnp_mbps = 4;
  attrs.dcqcn.time_reset_ns = 4'000'000'000;
  attrs.dcqcn.byte_reset = 1U << 30;
  SimNetwork net(attrs);
  net.tamper = [](std::vector<uint8_t>& f, bool a_to_b) {
    if (a_to_b) mark_congestion_experienced(f);
  };
  Region& src = net.a().add_region(1 << 20, 0, 0x5D);
  Region& dst = net.b().add_region(1 << 20, kAccessRemoteWrite);
  // A first WRITE brings the CNP that sets the rate; the long one leaves paced.
  ASSERT_TRUE(net.a().post_send(write_of(src, dst, 1024, 255)));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 1 && net.a().qp.rate().limited(); }));
  const uint64_t start = net.now();
  ASSERT_TRUE(net.a().post_send(write_of(src, dst, 64 * 1024, 0)));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 2; }));
  EXPECT_GT(net.now() - start, 63 * ack_timeout_ns(attrs.ack_timeout)) << "the packets left a timeout apart or more";
  const RcCounters& rp = net.a().qp.counters();
  EXPECT_EQ(rp.local_ack_timeout_err, 0u);
  EXPECT_EQ(rp.retransmitted_packets, 0u);
  for (const Completion& c : net.a().send_completions) EXPECT_EQ(c.status, CompletionStatus::kSuccess);
  EXPECT_EQ(std::memcmp(dst.bytes.data(), src.bytes.data(), 64 * 1024), 0);
}

// The reaction point rate-limits the QP's data whichever way it flows (rocev2.md §7.1): READ responses too. Here
// the responses B sends are CE-marked, A's CNPs cut B's rate, and B's responses leave paced. (They used to leave at
// line rate whatever the CNPs said: an NVMe-oF target READing its hosts' write data saw no congestion control.)
TEST(CongestionWire, ReadResponsesArePacedByTheRespondersRate) {
  SimNetwork net(dcqcn_attributes());
  net.tamper = [](std::vector<uint8_t>& f, bool a_to_b) {
    if (!a_to_b) mark_congestion_experienced(f);
  };
  Region& sink = net.a().add_region(1 << 20, kAccessLocalWrite);
  Region& source = net.b().add_region(1 << 20, kAccessRemoteRead, 0x6E);
  for (uint64_t i = 0; i < 16; ++i) {
    SendWqe w;
    w.context = i;
    w.op = WorkOp::kRdmaRead;
    w.flags = kWqeSignaled;
    w.num_sge = 1;
    w.sge[0] = Sge{sink.addr(i * 64 * 1024), 64 * 1024, LocalToken{sink.key}};
    w.length = 64 * 1024;
    w.remote_addr = source.addr(i * 64 * 1024);
    w.rkey = RemoteToken{source.key};
    ASSERT_TRUE(net.a().post_send(w));
  }
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 16; }));
  const RcCounters& np = net.a().qp.counters();
  const RcCounters& rp = net.b().qp.counters();
  EXPECT_GE(np.np_cnp_sent, 2u);
  EXPECT_LE(np.np_cnp_sent - rp.rp_cnp_handled, 1u) << "all but the last, which may still be on its way";
  EXPECT_GT(rp.tx_paced, 0u) << "B's READ responses waited for its pacer";
  EXPECT_LT(net.b().qp.rate().current_mbps(), 10'000u);
  for (const Completion& c : net.a().send_completions) EXPECT_EQ(c.status, CompletionStatus::kSuccess);
  EXPECT_EQ(std::memcmp(sink.bytes.data(), source.bytes.data(), 1 << 20), 0);
}

TEST(CongestionWire, WithoutMarksThereAreNoCnpsAndNoPacing) {
  SimNetwork net(dcqcn_attributes());
  Region& src = net.a().add_region(1 << 20, 0);
  Region& dst = net.b().add_region(1 << 20, kAccessRemoteWrite);
  for (uint64_t i = 0; i < 16; ++i) ASSERT_TRUE(net.a().post_send(write_of(src, dst, 64 * 1024, i)));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 16; }));
  EXPECT_EQ(net.b().qp.counters().np_cnp_sent, 0u);
  EXPECT_EQ(net.a().qp.counters().tx_paced, 0u);
  EXPECT_FALSE(net.a().qp.rate().limited());
  EXPECT_EQ(count_cnps(net).cnps, 0u);
}

// A CNP acts only when it comes along the connected path: one from another address is dropped and counted, and a
// QP without rate control counts the CNPs it ignores.
TEST(CongestionWire, ACnpFromAnotherAddressIsDroppedAndOneWithoutRateControlIgnored) {
  SimNetwork net(dcqcn_attributes());
  PacketSpec spec = testing::b_to_a_spec();
  PacketTemplate genuine;
  genuine.init(spec);
  spec.src_gid = gid_from_ipv4(Ipv4Addr{0xC6120063u});  // an off-path attacker's address
  PacketTemplate forged;
  forged.init(spec);
  std::vector<uint8_t> frame(genuine.frame_length(Opcode::kCnp, 0));

  frame.resize(forged.stamp_cnp(frame.data(), 48 << 2));
  ParseResult r = parse_packet(std::span<const uint8_t>(frame));
  ASSERT_TRUE(r.ok());
  net.a().qp.on_packet(r.packet);
  EXPECT_EQ(net.a().qp.counters().rx_path_mismatch, 1u);
  EXPECT_EQ(net.a().qp.counters().rp_cnp_handled, 0u);
  EXPECT_FALSE(net.a().qp.rate().limited());

  frame.resize(genuine.stamp_cnp(frame.data(), 48 << 2));
  r = parse_packet(std::span<const uint8_t>(frame));
  ASSERT_TRUE(r.ok());
  net.a().qp.on_packet(r.packet);
  EXPECT_EQ(net.a().qp.counters().rp_cnp_handled, 1u);
  EXPECT_TRUE(net.a().qp.rate().limited());

  RcQpAttributes plain = dcqcn_attributes();
  plain.rate_control = false;
  SimNetwork without(plain);
  without.a().qp.on_packet(r.packet);
  EXPECT_EQ(without.a().qp.counters().rp_cnp_ignored, 1u);
  EXPECT_FALSE(without.a().qp.rate().limited());
}

// The CNP we build is the one a ConnectX-4 Lx sends, byte for byte (rocev2.md §3.4 (a)): the same addresses, IP ID,
// TTL, UDP source port and destination QP give the same frame, ICRC included.
TEST(CongestionWire, OurCnpIsAConnectXCnpByteForByte) {
  const std::vector<uint8_t> expected = testing::from_hex(testing::kReferenceFrames[0].hex);
  ASSERT_EQ(testing::kReferenceFrames[0].name, "connectx_cnp");
  PacketSpec spec;
  spec.dst_mac = MacAddr{0xe41d2dab2bc2ull};
  spec.src_mac = MacAddr{0x7cfe90643b32ull};
  spec.src_gid = gid_from_ipv4(Ipv4Addr{0x0a001101u});
  spec.dst_gid = gid_from_ipv4(Ipv4Addr{0x0a001201u});
  spec.traffic_class = kEcnEct0;  // the data's; the CNP's own class replaces it
  spec.ip_id = 0x718c;
  spec.hop_limit = 64;
  spec.udp_src_port = 0;
  spec.dest_qp = Qpn{0x118};
  PacketTemplate t;
  t.init(spec);
  std::vector<uint8_t> frame(t.frame_length(Opcode::kCnp, 0), 0xCD);
  ASSERT_EQ(t.stamp_cnp(frame.data(), 48 << 2 | kEcnEct0), expected.size());
  EXPECT_EQ(frame, expected);
}

}  // namespace
}  // namespace uroce::proto
