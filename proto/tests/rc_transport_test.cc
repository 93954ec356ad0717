// The RC requester, responder and completer end to end over a simulated wire:
// every operation at the sizes around the PMTU, data verified byte for byte,
// under loss, reordering, duplication and corruption, and every error path. Regressions
// that need millions of packets are in rc_transport_long_test.cc (proto_long).
#include <gtest/gtest.h>

#include <numeric>

#include "proto/tests/rc_sim_requests.h"

namespace uroce::proto {
namespace {

using testing::recv_wqe;
using testing::Region;
using testing::SimNetwork;
using testing::wqe;

constexpr uint32_t kAll = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;

void fill_pattern(Region& r, uint32_t seed) {
  for (std::size_t i = 0; i < r.bytes.size(); ++i) {
    r.bytes[i] = static_cast<uint8_t>(i * 131 + std::size_t{seed} * 7 + (i >> 8));
  }
}

RcQpAttributes attrs(uint32_t mtu, Psn send_psn = Psn{0x100}, Psn recv_psn = Psn{0xABC}) {
  RcQpAttributes a;
  a.path_mtu = mtu;
  a.send_psn = send_psn;
  a.receive_psn = recv_psn;
  a.ack_timeout = 10;  // ~4 ms of simulated time
  return a;
}

bool equal_bytes(const Region& x, std::size_t xo, const Region& y, std::size_t yo, std::size_t n) {
  return std::memcmp(x.bytes.data() + xo, y.bytes.data() + yo, n) == 0;
}

struct SizeCase {
  uint32_t mtu;
  uint32_t size;
};
std::vector<SizeCase> size_cases() {
  std::vector<SizeCase> v;
  for (uint32_t mtu : {1024u, 4096u})
    for (uint32_t size : {0u, 1u, mtu - 1, mtu, mtu + 1, 1u << 20}) v.push_back({mtu, size});
  return v;
}
std::string size_name(const ::testing::TestParamInfo<SizeCase>& i) {
  return "mtu" + std::to_string(i.param.mtu) + "_size" + std::to_string(i.param.size);
}

class RcSizes : public ::testing::TestWithParam<SizeCase> {};

TEST_P(RcSizes, SendDeliversEveryByte) {
  const auto [mtu, size] = GetParam();
  SimNetwork net(attrs(mtu));
  Region& src = net.a().add_region(size, kAll);
  Region& dst = net.b().add_region(size, kAll, 0xEE);
  fill_pattern(src, 1);
  net.b().post_receive(recv_wqe(dst, size, 77));
  ASSERT_TRUE(net.a().post_send(wqe(WorkOp::kSend, src, size, 5)));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 1; }));
  EXPECT_EQ(net.a().send_completions[0].status, CompletionStatus::kSuccess);
  EXPECT_EQ(net.a().send_completions[0].context, 5u);
  ASSERT_EQ(net.b().recv_completions.size(), 1u);
  EXPECT_EQ(net.b().recv_completions[0].context, 77u);
  EXPECT_EQ(net.b().recv_completions[0].byte_length, size);
  EXPECT_TRUE(equal_bytes(src, 0, dst, 0, size));
  EXPECT_EQ(dst.bytes[size], 0xEE) << "wrote past the message";
}

TEST_P(RcSizes, WriteDeliversEveryByte) {
  const auto [mtu, size] = GetParam();
  SimNetwork net(attrs(mtu));
  Region& src = net.a().add_region(size, kAll);
  Region& dst = net.b().add_region(size + 64, kAll, 0xEE);
  fill_pattern(src, 2);
  SendWqe w = wqe(WorkOp::kRdmaWrite, src, size, 9);
  w.remote_addr = dst.addr(64);
  w.rkey = RemoteToken{dst.key};
  ASSERT_TRUE(net.a().post_send(w));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 1; }));
  EXPECT_EQ(net.a().send_completions[0].status, CompletionStatus::kSuccess);
  EXPECT_TRUE(equal_bytes(src, 0, dst, 64, size));
  EXPECT_EQ(dst.bytes[63], 0xEE);
  EXPECT_EQ(dst.bytes[64 + size], 0xEE);
  EXPECT_TRUE(net.b().recv_completions.empty()) << "a plain WRITE consumes no receive WQE";
}

TEST_P(RcSizes, ReadFetchesEveryByte) {
  const auto [mtu, size] = GetParam();
  SimNetwork net(attrs(mtu));
  Region& dst = net.a().add_region(size, kAll, 0xEE);
  Region& src = net.b().add_region(size, kAll);
  fill_pattern(src, 3);
  SendWqe w = wqe(WorkOp::kRdmaRead, dst, size, 11);
  w.remote_addr = src.addr();
  w.rkey = RemoteToken{src.key};
  ASSERT_TRUE(net.a().post_send(w));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 1; }));
  EXPECT_EQ(net.a().send_completions[0].status, CompletionStatus::kSuccess);
  EXPECT_EQ(net.a().send_completions[0].byte_length, size);
  EXPECT_TRUE(equal_bytes(src, 0, dst, 0, size));
  EXPECT_EQ(dst.bytes[size], 0xEE);
}

INSTANTIATE_TEST_SUITE_P(AroundThePmtu, RcSizes, ::testing::ValuesIn(size_cases()), size_name);

// A WRITE gathered from several SGEs, so that packets take their payload from one, two or three of them: large
// packets are copied while their ICRC is taken (PacketTemplate::icrc_before_payload), and the receiver checks
// every ICRC, so a CRC that missed a piece would lose the packet and, in the end, the WRITE.
TEST(RcTransport, AWriteGatheredFromSeveralSgesArrivesWhole) {
  for (const uint32_t mtu : {1024u, 4096u}) {
    SCOPED_TRACE(mtu);
    SimNetwork net(attrs(mtu));
    Region& src = net.a().add_region(8192, kAll);
    fill_pattern(src, 4);
    constexpr std::array<std::pair<uint32_t, uint32_t>, 4> kPieces = {{{0, 700}, {1000, 1}, {2000, 3000}, {6000, 600}}};
    Region& dst = net.b().add_region(4301 + 128, kAll, 0xEE);
    SendWqe w = wqe(WorkOp::kRdmaWrite, src, 0, 21);
    w.num_sge = kPieces.size();
    for (std::size_t i = 0; i < kPieces.size(); ++i) {
      w.sge[i] = {src.addr(kPieces[i].first), kPieces[i].second, LocalToken{src.key}};
      w.length += kPieces[i].second;
    }
    w.remote_addr = dst.addr(64);
    w.rkey = RemoteToken{dst.key};
    ASSERT_TRUE(net.a().post_send(w));
    ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 1; }));
    EXPECT_EQ(net.a().send_completions[0].status, CompletionStatus::kSuccess);
    std::size_t at = 64;
    for (const auto& [offset, length] : kPieces) {
      EXPECT_TRUE(equal_bytes(src, offset, dst, at, length)) << "the piece at " << offset;
      at += length;
    }
    EXPECT_EQ(dst.bytes[at], 0xEE);
  }
}

TEST(RcTransport, ImmediateAndSolicitedReachTheReceiver) {
  SimNetwork net(attrs(1024));
  Region& src = net.a().add_region(3000, kAll);
  Region& dst = net.b().add_region(4096, kAll);
  fill_pattern(src, 4);
  net.b().post_receive(recv_wqe(dst, 4096, 1));
  net.b().post_receive(recv_wqe(dst, 4096, 2));
  SendWqe s = wqe(WorkOp::kSendWithImmediate, src, 3000, 1, kWqeSignaled | kWqeSolicited);
  s.immediate = 0xC0FFEE01;
  SendWqe w = wqe(WorkOp::kRdmaWriteWithImmediate, src, 2049, 2);
  w.remote_addr = dst.addr();
  w.rkey = RemoteToken{dst.key};
  w.immediate = 0xC0FFEE02;
  ASSERT_TRUE(net.a().post_send(s));
  ASSERT_TRUE(net.a().post_send(w));
  ASSERT_TRUE(net.run([&] { return net.b().recv_completions.size() == 2 && net.a().send_completions.size() == 2; }));
  const auto& r = net.b().recv_completions;
  EXPECT_EQ(r[0].op, WorkOp::kSendWithImmediate);
  EXPECT_EQ(r[0].immediate, 0xC0FFEE01u);
  EXPECT_TRUE(r[0].flags & kCompletionSolicited);
  EXPECT_EQ(r[1].op, WorkOp::kRdmaWriteWithImmediate);
  EXPECT_EQ(r[1].immediate, 0xC0FFEE02u);
  EXPECT_EQ(r[1].byte_length, 2049u);
  EXPECT_FALSE(r[1].flags & kCompletionSolicited);
  EXPECT_TRUE(equal_bytes(src, 0, dst, 0, 2049));
}

TEST(RcTransport, SendWithInvalidateInvalidatesTheReceiversKey) {
  SimNetwork net(attrs(1024));
  Region& src = net.a().add_region(100, kAll);
  Region& dst = net.b().add_region(100, kAll);
  Region& target = net.b().add_region(64, kAll);
  target.remotely_invalidatable = true;
  net.b().post_receive(recv_wqe(dst, 100, 1));
  SendWqe s = wqe(WorkOp::kSendWithInvalidate, src, 100, 1);
  s.invalidate_rkey = RemoteToken{target.key};
  ASSERT_TRUE(net.a().post_send(s));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 1; }));
  ASSERT_EQ(net.b().recv_completions.size(), 1u);
  EXPECT_EQ(net.b().recv_completions[0].op, WorkOp::kSendWithInvalidate);
  EXPECT_EQ(net.b().recv_completions[0].invalidated_rkey, RemoteToken{target.key});
  EXPECT_FALSE(target.valid);
}

TEST(RcTransport, AtomicsReturnTheOriginalAndApplyOnce) {
  SimNetwork net(attrs(1024));
  Region& result = net.a().add_region(16, kAll);
  Region& word = net.b().add_region(8, kAll);
  uint64_t* target = reinterpret_cast<uint64_t*>((reinterpret_cast<uintptr_t>(word.bytes.data()) + 7) & ~uintptr_t{7});
  *target = 40;
  SendWqe add = wqe(WorkOp::kFetchAdd, result, 8, 1);
  add.remote_addr = reinterpret_cast<uint64_t>(target);
  add.rkey = RemoteToken{word.key};
  add.compare_add = 2;
  SendWqe cas = wqe(WorkOp::kCompareSwap, result, 8, 2);
  cas.sge[0].addr = result.addr(8);
  cas.remote_addr = add.remote_addr;
  cas.rkey = add.rkey;
  cas.compare_add = 42;
  cas.swap = 1000;
  ASSERT_TRUE(net.a().post_send(add));
  ASSERT_TRUE(net.a().post_send(cas));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 2; }));
  uint64_t first, second;
  std::memcpy(&first, result.bytes.data(), 8);
  std::memcpy(&second, result.bytes.data() + 8, 8);
  EXPECT_EQ(first, 40u);
  EXPECT_EQ(second, 42u);
  EXPECT_EQ(*target, 1000u);
}

TEST(RcTransport, PsnWrapsAcrossTheTwentyFourBitBoundary) {
  SimNetwork net(attrs(1024, Psn{0xFFFFF0}, Psn{0xFFFFFA}));
  constexpr uint32_t kLength = 64 * 1024;  // one WRITE of the whole region: 64 packets, across the wrap
  Region& src = net.a().add_region(kLength, kAll);
  Region& dst = net.b().add_region(kLength, kAll);
  fill_pattern(src, 5);
  SendWqe w = wqe(WorkOp::kRdmaWrite, src, kLength, 1);
  w.remote_addr = dst.addr();
  w.rkey = RemoteToken{dst.key};
  ASSERT_TRUE(net.a().post_send(w));
  SendWqe r = wqe(WorkOp::kRdmaRead, src, 32 * 1024, 2);
  r.remote_addr = dst.addr();
  r.rkey = RemoteToken{dst.key};
  ASSERT_TRUE(net.a().post_send(r));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 2; }));
  EXPECT_EQ(net.a().send_completions[1].status, CompletionStatus::kSuccess);
  EXPECT_TRUE(equal_bytes(src, 0, dst, 0, kLength));
}

// Mixed traffic through loss, reordering, duplication and corruption: every message
// is delivered exactly once, intact, and completions come in posting order.
TEST(RcTransport, MixedTrafficSurvivesAHostileWire) {
  RcQpAttributes a = attrs(1024);
  a.ack_timeout = 8;  // ~1 ms
  a.max_rd_atomic = 4;
  a.max_dest_rd_atomic = 4;
  SimNetwork net(a, 64, 42);
  net.faults = {.loss = 0.01, .reorder = 0.01, .duplicate = 0.005, .corrupt = 0.001};
  constexpr int kMessages = 3000;
  Region& src = net.a().add_region(8192, kAll);
  Region& sink = net.b().add_region(32768, kAll);
  Region& readback = net.a().add_region(8192, kAll);
  Region& counter = net.b().add_region(8, kAll);
  uint64_t* word = reinterpret_cast<uint64_t*>((reinterpret_cast<uintptr_t>(counter.bytes.data()) + 7) & ~uintptr_t{7});
  fill_pattern(src, 6);
  fill_pattern(sink, 7);
  std::vector<Region*> recv_slots;
  recv_slots.reserve(64);
  for (int i = 0; i < 64; ++i) recv_slots.push_back(&net.b().add_region(3000, kAll));

  std::mt19937 rng(7);
  int posted = 0, sends = 0, adds = 0;
  std::vector<std::pair<uint32_t, uint32_t>> send_spans;  // (source offset, length) of each SEND, in order
  uint32_t longest_read = 0;
  std::array<uint32_t, 4> longest_write{};
  uint64_t recv_posted = 0;
  auto post_more = [&] {
    while (posted < kMessages) {
      const int kind = static_cast<int>(rng() % 4);
      const uint32_t len = 1 + rng() % 2999;
      SendWqe w;
      if (kind == 0) {
        if (recv_posted - net.b().recv_completions.size() >= 32) break;
        w = wqe(WorkOp::kSend, src, len, posted);
        w.sge[0].addr = src.addr(posted % 4096);
      } else if (kind == 1) {
        w = wqe(WorkOp::kRdmaWrite, src, len, posted);
        w.remote_addr = sink.addr(8192 + (posted % 4) * 4096);
        w.rkey = RemoteToken{sink.key};
        longest_write[posted % 4] = std::max(longest_write[posted % 4], len);
      } else if (kind == 2) {
        w = wqe(WorkOp::kRdmaRead, readback, len, posted);
        w.remote_addr = sink.addr(0);
        w.rkey = RemoteToken{sink.key};
        longest_read = std::max(longest_read, len);
      } else {
        w = wqe(WorkOp::kFetchAdd, readback, 8, posted);
        w.sge[0].addr = readback.addr(8000);
        w.remote_addr = reinterpret_cast<uint64_t>(word);
        w.rkey = RemoteToken{counter.key};
        w.compare_add = 1;
      }
      if (!net.a().post_send(w)) break;
      if (kind == 0) {
        net.b().post_receive(recv_wqe(*recv_slots[recv_posted % 64], 3000, recv_posted));
        ++recv_posted;
        send_spans.emplace_back(posted % 4096, len);
        ++sends;
      }
      if (kind == 3) ++adds;
      ++posted;
    }
  };
  ASSERT_TRUE(net.run(
      [&] {
        post_more();
        return net.a().send_completions.size() == static_cast<std::size_t>(kMessages);
      },
      50'000'000))
      << "stalled: A sent " << net.a().send_completions.size() << " completions, posted " << posted
      << ", A outstanding " << net.a().qp.has_outstanding() << " deadline " << net.a().qp.next_deadline_ns()
      << " B responses " << net.b().qp.has_responses() << " lost " << net.frames_lost << " head "
      << net.a().qp.send_queue_head() << " tail " << net.a().send_queue_tail() << " unsent "
      << net.a().qp.has_unsent_work() << " A state " << int(net.a().qp.state()) << " B state "
      << int(net.b().qp.state()) << " recv " << net.b().recv_completions.size() << "/" << recv_posted << " first error "
      << [&] {
           for (const auto& c : net.a().send_completions) {
             if (c.status != CompletionStatus::kSuccess)
               return std::to_string(c.context) + ":" + std::to_string(int(c.status)) + ":" + std::to_string(int(c.op));
           }
           return std::string("none");
         }();
  const auto& done = net.a().send_completions;
  for (int i = 0; i < kMessages; ++i) {
    ASSERT_EQ(done[i].context, static_cast<uint64_t>(i)) << "completions out of posting order";
    ASSERT_EQ(done[i].status, CompletionStatus::kSuccess) << i;
  }
  EXPECT_EQ(net.b().recv_completions.size(), static_cast<std::size_t>(sends)) << "lost or duplicated deliveries";
  for (std::size_t i = 0; i < net.b().recv_completions.size(); ++i) EXPECT_EQ(net.b().recv_completions[i].context, i);
  EXPECT_EQ(*word, static_cast<uint64_t>(adds)) << "an atomic was applied twice or not at all";
  // Every READ fetched a prefix of sink[0, 8192), which nothing writes.
  EXPECT_TRUE(equal_bytes(sink, 0, readback, 0, longest_read));
  // Every WRITE to a slot wrote a prefix of src.
  for (int slot = 0; slot < 4; ++slot) EXPECT_TRUE(equal_bytes(sink, 8192 + slot * 4096, src, 0, longest_write[slot]));
  // The last use of each receive buffer holds exactly its SEND.
  for (int k = std::max(0, sends - 64); k < sends; ++k) {
    const auto [offset, length] = send_spans[k];
    EXPECT_EQ(net.b().recv_completions[k].byte_length, length);
    EXPECT_TRUE(equal_bytes(*recv_slots[k % 64], 0, src, offset, length)) << "send " << k;
  }
  EXPECT_GT(net.frames_lost, 0u);
  EXPECT_GT(net.frames_corrupted, 0u);
  EXPECT_GT(net.a().frames_rejected + net.b().frames_rejected, 0u) << "the ICRC caught the corruption";
  EXPECT_GT(net.a().qp.counters().retransmitted_packets, 0u);
  EXPECT_GT(net.b().qp.counters().duplicate_request, 0u);
}

TEST(RcTransport, RnrNakWaitsForAReceiveThenDelivers) {
  SimNetwork net(attrs(1024));
  Region& src = net.a().add_region(5000, kAll);
  Region& dst = net.b().add_region(5000, kAll);
  fill_pattern(src, 8);
  ASSERT_TRUE(net.a().post_send(wqe(WorkOp::kSend, src, 5000, 1)));
  // No receive posted: the responder RNR-NAKs until one is.
  net.run([&] { return net.a().qp.counters().rnr_nak_received >= 3; });
  EXPECT_GE(net.b().qp.counters().rnr_nak_sent, 3u);
  EXPECT_TRUE(net.a().send_completions.empty());
  net.b().post_receive(recv_wqe(dst, 5000, 1));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 1; }));
  EXPECT_EQ(net.a().send_completions[0].status, CompletionStatus::kSuccess);
  EXPECT_TRUE(equal_bytes(src, 0, dst, 0, 5000));
}

TEST(RcTransport, RnrRetryExhaustedFailsAndFlushes) {
  RcQpAttributes a = attrs(1024);
  a.rnr_retry = 2;
  SimNetwork net(a);
  Region& src = net.a().add_region(100, kAll);
  ASSERT_TRUE(net.a().post_send(wqe(WorkOp::kSend, src, 100, 1)));
  ASSERT_TRUE(net.a().post_send(wqe(WorkOp::kSend, src, 100, 2)));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 2; }));
  EXPECT_EQ(net.a().send_completions[0].status, CompletionStatus::kRnrRetryExceeded);
  EXPECT_EQ(net.a().send_completions[1].status, CompletionStatus::kWorkRequestFlushed);
  EXPECT_EQ(net.a().qp.state(), QpState::kError);
  EXPECT_EQ(net.a().qp.counters().rnr_nak_received, 3u) << "the first NAK plus two retries";
}

TEST(RcTransport, RetryExhaustedOnADeadWire) {
  RcQpAttributes a = attrs(1024);
  a.retry_count = 3;
  SimNetwork net(a);
  net.faults.loss = 1.0;
  Region& src = net.a().add_region(100, kAll);
  ASSERT_TRUE(net.a().post_send(wqe(WorkOp::kRdmaWrite, src, 100, 1)));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 1; }));
  EXPECT_EQ(net.a().send_completions[0].status, CompletionStatus::kRetryExceeded);
  EXPECT_EQ(net.a().qp.counters().local_ack_timeout_err, 4u) << "one first timeout and three retries";
  EXPECT_EQ(net.a().qp.state(), QpState::kError);
  // Work posted after the error completes flushed.
  ASSERT_TRUE(net.a().post_send(wqe(WorkOp::kSend, src, 10, 2)));
  net.a().qp.send(8);
  ASSERT_EQ(net.a().send_completions.size(), 2u);
  EXPECT_EQ(net.a().send_completions[1].status, CompletionStatus::kWorkRequestFlushed);
}

TEST(RcTransport, RemoteAccessErrorFailsBothSides) {
  SimNetwork net(attrs(1024));
  Region& src = net.a().add_region(100, kAll);
  Region& dst = net.b().add_region(100, kAccessLocalWrite | kAccessRemoteRead);  // no remote write
  net.b().post_receive(recv_wqe(dst, 100, 9));
  SendWqe w = wqe(WorkOp::kRdmaWrite, src, 100, 1);
  w.remote_addr = dst.addr();
  w.rkey = RemoteToken{dst.key};
  ASSERT_TRUE(net.a().post_send(w));
  ASSERT_TRUE(net.a().post_send(wqe(WorkOp::kSend, src, 10, 2)));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 2; }));
  EXPECT_EQ(net.a().send_completions[0].status, CompletionStatus::kRemoteAccessError);
  EXPECT_EQ(net.a().send_completions[1].status, CompletionStatus::kWorkRequestFlushed);
  EXPECT_EQ(net.b().qp.state(), QpState::kError);
  ASSERT_EQ(net.b().recv_completions.size(), 1u);
  EXPECT_EQ(net.b().recv_completions[0].status, CompletionStatus::kWorkRequestFlushed);
}

TEST(RcTransport, OutOfRangeReadIsARemoteAccessError) {
  SimNetwork net(attrs(1024));
  Region& dst = net.a().add_region(4096, kAll);
  Region& src = net.b().add_region(1000, kAll);
  SendWqe r = wqe(WorkOp::kRdmaRead, dst, 4096, 1);
  r.remote_addr = src.addr();
  r.rkey = RemoteToken{src.key};
  ASSERT_TRUE(net.a().post_send(r));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 1; }));
  EXPECT_EQ(net.a().send_completions[0].status, CompletionStatus::kRemoteAccessError);
}

TEST(RcTransport, ReceiveBufferTooSmall) {
  SimNetwork net(attrs(1024));
  Region& src = net.a().add_region(2000, kAll);
  Region& dst = net.b().add_region(2000, kAll);
  net.b().post_receive(recv_wqe(dst, 1500, 3));
  ASSERT_TRUE(net.a().post_send(wqe(WorkOp::kSend, src, 2000, 1)));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 1; }));
  EXPECT_EQ(net.a().send_completions[0].status, CompletionStatus::kRemoteInvalidRequest);
  ASSERT_EQ(net.b().recv_completions.size(), 1u);
  EXPECT_EQ(net.b().recv_completions[0].status, CompletionStatus::kLocalLengthError);
  EXPECT_EQ(net.b().recv_completions[0].context, 3u);
}

TEST(RcTransport, BadLocalKeyIsALocalProtectionError) {
  SimNetwork net(attrs(1024));
  Region& src = net.a().add_region(100, kAll);
  Region& dst = net.b().add_region(100, kAll);
  SendWqe good = wqe(WorkOp::kRdmaWrite, src, 100, 1);
  good.remote_addr = dst.addr();
  good.rkey = RemoteToken{dst.key};
  SendWqe bad = good;
  bad.context = 2;
  bad.sge[0].lkey = LocalToken{0xDEAD};
  ASSERT_TRUE(net.a().post_send(good));
  ASSERT_TRUE(net.a().post_send(bad));
  ASSERT_TRUE(net.a().post_send(good));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 3; }));
  EXPECT_EQ(net.a().send_completions[0].status, CompletionStatus::kWorkRequestFlushed)
      << "posted before the failure but not yet acknowledged";
  EXPECT_EQ(net.a().send_completions[1].status, CompletionStatus::kLocalProtectionError);
  EXPECT_EQ(net.a().send_completions[2].status, CompletionStatus::kWorkRequestFlushed);
}

TEST(RcTransport, UnsignaledSuccessesAreSilentButFailuresComplete) {
  SimNetwork net(attrs(1024));
  Region& src = net.a().add_region(100, kAll);
  Region& dst = net.b().add_region(100, kAll);
  SendWqe w = wqe(WorkOp::kRdmaWrite, src, 100, 1, 0);
  w.remote_addr = dst.addr();
  w.rkey = RemoteToken{dst.key};
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(net.a().post_send(w));
  SendWqe last = w;
  last.context = 99;
  last.flags = kWqeSignaled;
  ASSERT_TRUE(net.a().post_send(last));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 1; }));
  EXPECT_EQ(net.a().send_completions[0].context, 99u);
  EXPECT_EQ(net.a().qp.send_queue_head(), 11u) << "silent WQEs retired too";
  SendWqe bad = w;
  bad.rkey = RemoteToken{0xBAD};
  bad.context = 7;
  ASSERT_TRUE(net.a().post_send(bad));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 2; }));
  EXPECT_EQ(net.a().send_completions[1].context, 7u);
  EXPECT_EQ(net.a().send_completions[1].status, CompletionStatus::kRemoteAccessError);
}

// Counts request packets of each kind on the wire from A.
int count_opcode(const SimNetwork& net, Opcode op) {
  int n = 0;
  for (const auto& f : net.wire_log) {
    const ParseResult r = parse_packet(f);
    n += r.ok() && r.packet.opcode() == op;
  }
  return n;
}

TEST(RcTransport, InitiatorDepthLimitsReadsInFlight) {
  RcQpAttributes a = attrs(1024);
  a.max_rd_atomic = 2;
  SimNetwork net(a);
  Region& dst = net.a().add_region(4096, kAll);
  Region& src = net.b().add_region(4096, kAll);
  for (int i = 0; i < 6; ++i) {
    SendWqe r = wqe(WorkOp::kRdmaRead, dst, 4096, i);
    r.remote_addr = src.addr();
    r.rkey = RemoteToken{src.key};
    ASSERT_TRUE(net.a().post_send(r));
  }
  EXPECT_EQ(net.a().qp.send(32), 2u) << "only max_rd_atomic READ requests leave at once";
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 6; }));
  EXPECT_EQ(count_opcode(net, Opcode::kRcRdmaReadRequest), 6);
}

TEST(RcTransport, ReadFenceHoldsTheNextRequestUntilReadsComplete) {
  SimNetwork net(attrs(1024));
  Region& local = net.a().add_region(4096, kAll);
  Region& remote = net.b().add_region(4096, kAll);
  SendWqe r = wqe(WorkOp::kRdmaRead, local, 4096, 1);
  r.remote_addr = remote.addr();
  r.rkey = RemoteToken{remote.key};
  SendWqe w = wqe(WorkOp::kRdmaWrite, local, 16, 2, kWqeSignaled | kWqeReadFence);
  w.remote_addr = remote.addr();
  w.rkey = RemoteToken{remote.key};
  ASSERT_TRUE(net.a().post_send(r));
  ASSERT_TRUE(net.a().post_send(w));
  EXPECT_EQ(net.a().qp.send(32), 1u) << "the fenced WRITE waits for the READ";
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 2; }));
  EXPECT_EQ(net.a().send_completions[1].status, CompletionStatus::kSuccess);
}

TEST(RcTransport, BackpressureDefersWithoutLosingWork) {
  SimNetwork net(attrs(1024));
  Region& src = net.a().add_region(8000, kAll);
  Region& dst = net.b().add_region(8000, kAll);
  fill_pattern(src, 9);
  SendWqe w = wqe(WorkOp::kRdmaWrite, src, 8000, 1);
  w.remote_addr = dst.addr();
  w.rkey = RemoteToken{dst.key};
  ASSERT_TRUE(net.a().post_send(w));
  net.a().fail_tx(3);
  EXPECT_EQ(net.a().qp.send(32), 0u);
  EXPECT_EQ(net.a().qp.counters().tx_backpressure, 1u);
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 1; }));
  EXPECT_TRUE(equal_bytes(src, 0, dst, 0, 8000));
}

// transmit(): a lone ACK waits one turn behind requests, and never two in a row; READ responses never wait.
TEST(RcTransport, ALoneAckWaitsOneTurnBehindRequestsAndReadResponsesNever) {
  SimNetwork net(attrs(1024));
  Region& a_buf = net.a().add_region(4096, kAll);
  Region& b_buf = net.b().add_region(4096, kAll);
  const auto opcodes = [](std::vector<std::vector<uint8_t>>& outbox) {
    std::vector<Opcode> ops;
    for (const auto& f : outbox) {
      const ParseResult r = parse_packet(f);
      EXPECT_TRUE(r.ok());
      ops.push_back(r.packet.opcode());
    }
    outbox.clear();
    return ops;
  };
  const auto write_to = [](const Region& from, const Region& to, uint64_t context) {
    SendWqe w = wqe(WorkOp::kRdmaWrite, from, 64, context);
    w.remote_addr = to.addr();
    w.rkey = RemoteToken{to.key};
    return w;
  };
  const auto b_turn = [&] {
    (void)net.b().qp.transmit(32);
    return opcodes(net.b().outbox);
  };
  const auto deliver_a_to_b = [&] {
    for (const auto& f : net.a().outbox) {
      const ParseResult r = parse_packet(f);
      ASSERT_TRUE(r.ok());
      net.b().qp.on_packet(r.packet);
    }
    net.a().outbox.clear();
  };
  // A's WRITE asks for an ACK; B answers with a WRITE of its own in the same turn: the WRITE goes alone.
  ASSERT_TRUE(net.a().post_send(write_to(a_buf, b_buf, 1)));
  ASSERT_EQ(net.a().qp.send(32), 1u);
  deliver_a_to_b();
  ASSERT_TRUE(net.b().qp.has_responses());
  ASSERT_TRUE(net.b().post_send(write_to(b_buf, a_buf, 2)));
  RcQp::Transmitted t = net.b().qp.transmit(32);
  EXPECT_EQ(t.requests, 1u);
  EXPECT_EQ(t.responses, 0u);
  EXPECT_EQ(opcodes(net.b().outbox), std::vector<Opcode>{Opcode::kRcRdmaWriteOnly});
  EXPECT_TRUE(net.b().qp.has_responses());  // the QP stays polled
  // The next turn sends it, requests or not.
  t = net.b().qp.transmit(32);
  EXPECT_EQ(t.responses, 1u);
  EXPECT_EQ(opcodes(net.b().outbox), std::vector<Opcode>{Opcode::kRcAcknowledge});
  EXPECT_FALSE(net.b().qp.has_responses());

  // Requests on every turn: held on the first, sent behind the requests on the second.
  ASSERT_TRUE(net.a().post_send(write_to(a_buf, b_buf, 3)));
  ASSERT_EQ(net.a().qp.send(32), 1u);
  deliver_a_to_b();
  ASSERT_TRUE(net.b().post_send(write_to(b_buf, a_buf, 4)));
  EXPECT_EQ(b_turn(), std::vector<Opcode>{Opcode::kRcRdmaWriteOnly});
  ASSERT_TRUE(net.b().post_send(write_to(b_buf, a_buf, 5)));
  EXPECT_EQ(b_turn(), (std::vector<Opcode>{Opcode::kRcRdmaWriteOnly, Opcode::kRcAcknowledge}));

  // A READ response goes out in the turn that sends requests.
  SendWqe read = wqe(WorkOp::kRdmaRead, a_buf, 64, 6);
  read.remote_addr = b_buf.addr();
  read.rkey = RemoteToken{b_buf.key};
  ASSERT_TRUE(net.a().post_send(read));
  ASSERT_EQ(net.a().qp.send(32), 1u);
  deliver_a_to_b();
  ASSERT_TRUE(net.b().post_send(write_to(b_buf, a_buf, 7)));
  EXPECT_EQ(b_turn(), (std::vector<Opcode>{Opcode::kRcRdmaWriteOnly, Opcode::kRcRdmaReadResponseOnly}));

  // Everything still completes.
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 3 && net.b().send_completions.size() == 4; }));
}

TEST(RcTransport, OneSequenceNakPerGap) {
  SimNetwork net(attrs(1024));
  constexpr uint32_t kLength = 64 * 1024;  // 64 packets
  Region& src = net.a().add_region(kLength, kAll);
  Region& dst = net.b().add_region(kLength, kAll);
  SendWqe w = wqe(WorkOp::kRdmaWrite, src, kLength, 1);
  w.remote_addr = dst.addr();
  w.rkey = RemoteToken{dst.key};
  ASSERT_TRUE(net.a().post_send(w));
  ASSERT_EQ(net.a().qp.send(64), 64u);
  auto frames = std::move(net.a().outbox);
  net.a().outbox.clear();
  frames.erase(frames.begin() + 3);  // lose one packet in the middle
  for (const auto& f : frames) {
    const ParseResult r = parse_packet(f);
    ASSERT_TRUE(r.ok());
    net.b().qp.on_packet(r.packet);
  }
  net.b().qp.respond(32);
  int naks = 0;
  for (const auto& f : net.b().outbox) {
    const ParseResult r = parse_packet(f);
    ASSERT_TRUE(r.ok());
    if (AethSyndrome(r.packet.ext<Aeth>(ExtHeader::kAeth).get(Aeth::syndrome)).kind() == AethKind::kNak) ++naks;
  }
  EXPECT_EQ(naks, 1);
  EXPECT_EQ(net.b().qp.counters().out_of_sequence, 60u);
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 1; }));
  EXPECT_TRUE(equal_bytes(src, 0, dst, 0, kLength));
}

// --- local operations (fast register, local invalidate): in SQ order, no PSN, run once ---

SendWqe local_op(WorkOp op, uint32_t token, uint64_t context, uint8_t flags = kWqeSignaled) {
  SendWqe w;
  w.context = context;
  w.op = op;
  w.flags = flags;
  w.memory.token = token;
  w.memory.access = kAll;
  return w;
}

Psn first_psn_of(const SimNetwork& net, Opcode op) {
  for (const auto& f : net.wire_log) {
    const ParseResult r = parse_packet(f);
    if (r.ok() && r.packet.opcode() == op) return r.packet.bth().get(Bth::psn);
  }
  return Psn{0xFFFFFF};
}

TEST(RcLocalOperations, CompleteInPostingOrderAndConsumeNoPsn) {
  SimNetwork net(attrs(1024));
  Region& src = net.a().add_region(4096, kAll);
  Region& frmr = net.a().add_region(4096, 0);
  frmr.remotely_invalidatable = true;
  frmr.valid = false;
  Region& dst = net.b().add_region(4096, kAll);
  net.b().post_receive(recv_wqe(dst, 4096, 50));
  SendWqe w = wqe(WorkOp::kRdmaWrite, src, 3000, 1);
  w.remote_addr = dst.addr();
  w.rkey = RemoteToken{dst.key};
  ASSERT_TRUE(net.a().post_send(w));
  const uint32_t new_token = frmr.key + 1;  // same slot, next key byte
  ASSERT_TRUE(net.a().post_send(local_op(WorkOp::kFastRegister, new_token, 2)));
  ASSERT_TRUE(net.a().post_send(wqe(WorkOp::kSend, src, 10, 3)));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 3; }));
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(net.a().send_completions[i].context, i + 1) << "completions leave in posting order";
    EXPECT_EQ(net.a().send_completions[i].status, CompletionStatus::kSuccess);
  }
  EXPECT_EQ(net.a().send_completions[1].op, WorkOp::kFastRegister);
  EXPECT_TRUE(frmr.valid);
  EXPECT_EQ(frmr.key, new_token);
  // The WRITE took PSNs first..first+2; the SEND follows at once: the local operation took none.
  EXPECT_EQ(first_psn_of(net, Opcode::kRcSendOnly), first_psn_of(net, Opcode::kRcRdmaWriteFirst) + 3);
  EXPECT_EQ(net.a().local_operations_executed, 1u);
}

TEST(RcLocalOperations, AloneItCompletesWithoutAnyPacket) {
  SimNetwork net(attrs(1024));
  Region& mr = net.a().add_region(64, kAll);
  mr.remotely_invalidatable = true;
  ASSERT_TRUE(net.a().post_send(local_op(WorkOp::kLocalInvalidate, mr.key, 9)));
  EXPECT_EQ(net.a().qp.send(32), 1u);
  ASSERT_EQ(net.a().send_completions.size(), 1u);
  EXPECT_EQ(net.a().send_completions[0].status, CompletionStatus::kSuccess);
  EXPECT_FALSE(mr.valid);
  EXPECT_TRUE(net.a().outbox.empty());
  EXPECT_EQ(net.a().qp.send_queue_head(), 1u);
}

TEST(RcLocalOperations, RunOnceAcrossGoBackN) {
  RcQpAttributes a = attrs(1024);
  a.retry_count = 7;
  SimNetwork net(a, 256, 5);
  net.faults.loss = 0.2;
  constexpr uint32_t kRegionSize = 64 * 1024;  // room for the eight 8 KiB WRITEs
  Region& src = net.a().add_region(kRegionSize, kAll);
  Region& dst = net.b().add_region(kRegionSize, kAll);
  std::vector<Region*> mrs;
  for (int i = 0; i < 8; ++i) {
    mrs.push_back(&net.a().add_region(64, kAll));
    mrs.back()->remotely_invalidatable = true;
  }
  uint64_t context = 0;
  for (int i = 0; i < 8; ++i) {
    SendWqe w = wqe(WorkOp::kRdmaWrite, src, 8 * 1024, context++);
    w.remote_addr = dst.addr(static_cast<std::size_t>(i) * 8 * 1024);
    w.rkey = RemoteToken{dst.key};
    ASSERT_TRUE(net.a().post_send(w));
    // Invalidating an already invalid key fails: running any of these twice would show.
    ASSERT_TRUE(
        net.a().post_send(local_op(WorkOp::kLocalInvalidate, mrs[static_cast<std::size_t>(i)]->key, context++)));
  }
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 16; }));
  EXPECT_GT(net.a().qp.counters().retransmitted_packets, 0u) << "the wire must have forced go-back-N";
  EXPECT_EQ(net.a().local_operations_executed, 8u);
  for (uint64_t i = 0; i < 16; ++i) {
    EXPECT_EQ(net.a().send_completions[i].context, i);
    EXPECT_EQ(net.a().send_completions[i].status, CompletionStatus::kSuccess) << i;
  }
}

TEST(RcLocalOperations, AFailureCompletesInOrderAndFlushesTheRest) {
  SimNetwork net(attrs(1024));
  Region& src = net.a().add_region(4096, kAll);
  Region& dst = net.b().add_region(4096, kAll);
  net.b().post_receive(recv_wqe(dst, 4096, 50));
  SendWqe w = wqe(WorkOp::kRdmaWrite, src, 3000, 1);
  w.remote_addr = dst.addr();
  w.rkey = RemoteToken{dst.key};
  ASSERT_TRUE(net.a().post_send(w));
  ASSERT_TRUE(net.a().post_send(local_op(WorkOp::kLocalInvalidate, 0x7700, 2, 0)));  // no such key; unsignaled
  ASSERT_TRUE(net.a().post_send(wqe(WorkOp::kSend, src, 10, 3)));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 3; }));
  EXPECT_EQ(net.a().send_completions[0].status, CompletionStatus::kSuccess) << "the WRITE before it finishes first";
  EXPECT_EQ(net.a().send_completions[1].status, CompletionStatus::kLocalQpOperationError)
      << "a failure completes even when unsignaled";
  EXPECT_EQ(net.a().send_completions[2].status, CompletionStatus::kWorkRequestFlushed);
  EXPECT_EQ(count_opcode(net, Opcode::kRcSendOnly), 0) << "nothing after the failure reaches the wire";
  EXPECT_EQ(net.a().qp.state(), QpState::kError);
}

TEST(RcLocalOperations, UnsignaledSuccessIsSilentAndFenceWaitsForReads) {
  SimNetwork net(attrs(1024));
  Region& local = net.a().add_region(4096, kAll);
  Region& remote = net.b().add_region(4096, kAll);
  Region& mr = net.a().add_region(64, kAll);
  mr.remotely_invalidatable = true;
  SendWqe r = wqe(WorkOp::kRdmaRead, local, 4096, 1);
  r.remote_addr = remote.addr();
  r.rkey = RemoteToken{remote.key};
  ASSERT_TRUE(net.a().post_send(r));
  ASSERT_TRUE(net.a().post_send(local_op(WorkOp::kLocalInvalidate, mr.key, 2, kWqeReadFence)));
  ASSERT_TRUE(net.a().post_send(local_op(WorkOp::kLocalInvalidate, 0x7700, 3, 0)));
  net.a().qp.send(32);
  EXPECT_EQ(net.a().local_operations_executed, 0u) << "the fenced operation waits for the READ";
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 2; }));
  EXPECT_EQ(net.a().send_completions[0].context, 1u);
  EXPECT_EQ(net.a().send_completions[1].context, 3u) << "the silent success left no completion";
  EXPECT_EQ(net.a().send_completions[1].status, CompletionStatus::kLocalQpOperationError);
}

}  // namespace
}  // namespace uroce::proto
