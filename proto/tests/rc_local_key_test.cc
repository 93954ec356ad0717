// Bytes a peer sends into our memory check our L_Keys again per packet: a READ's responses, an atomic's ACK and a
// SEND's later packets land only in memory whose key is still valid. The peer chooses when they come, and the
// application may have deregistered or invalidated the memory since the work request began (hardware fails it
// with a local protection error). Before, a READ sink taken back while the READ was outstanding was written when
// the response came.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "proto/tests/rc_sim_requests.h"

namespace uroce::proto {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace): the simulation's helpers

bool all_equal(const std::vector<uint8_t>& bytes, std::size_t from, std::size_t to, uint8_t value) {
  return std::all_of(bytes.begin() + static_cast<std::ptrdiff_t>(from), bytes.begin() + static_cast<std::ptrdiff_t>(to),
                     [value](uint8_t x) { return x == value; });
}

class LocalKey : public ::testing::Test {
 protected:
  SimNetwork net{sim_attrs()};
  SimEndpoint& a = net.a();
  SimEndpoint& b = net.b();
};

TEST_F(LocalKey, AReadResponseForASinkTakenBackIsALocalProtectionErrorAndWritesNothing) {
  Region& sink = a.add_region(4096, kAccessLocalWrite, 0x00);
  Region& source = b.add_region(4096, kAccessLocalWrite | kAccessRemoteRead, 0xAA);
  ASSERT_TRUE(a.post_send(rdma_wqe(WorkOp::kRdmaRead, sink, 3072, source, 5)));
  a.qp.send(32);
  deliver(b, take(a).at(0));
  b.qp.respond(1);  // the FIRST response: the sink is still registered
  auto responses = take(b);
  ASSERT_EQ(responses.size(), 1u);
  deliver(a, responses[0]);
  EXPECT_TRUE(all_equal(sink.bytes, 0, 1024, 0xAA));

  sink.valid = false;  // the application deregisters the sink and reuses the memory
  std::fill(sink.bytes.begin(), sink.bytes.end(), 0x55);
  b.qp.respond(32);  // MIDDLE and LAST, when the peer chooses
  responses = take(b);
  ASSERT_EQ(responses.size(), 2u);
  for (const auto& f : responses) deliver(a, f);
  EXPECT_TRUE(all_equal(sink.bytes, 0, sink.bytes.size(), 0x55)) << "a READ response wrote into memory taken back";
  ASSERT_EQ(a.send_completions.size(), 1u);
  EXPECT_EQ(a.send_completions[0].status, CompletionStatus::kLocalProtectionError);
  EXPECT_EQ(a.qp.state(), QpState::kError);
}

TEST_F(LocalKey, AnAtomicAckForASinkTakenBackIsALocalProtectionError) {
  Region& sink = a.add_region(8, kAccessLocalWrite, 0x00);
  Region& target = b.add_region(8, kAccessLocalWrite | kAccessRemoteAtomic, 0x01);
  SendWqe w = rdma_wqe(WorkOp::kFetchAdd, sink, 8, target, 5);
  w.compare_add = 1;
  ASSERT_TRUE(a.post_send(w));
  a.qp.send(32);
  deliver(b, take(a).at(0));
  b.qp.respond(32);
  const auto ack = take(b);
  ASSERT_EQ(ack.size(), 1u);
  sink.valid = false;
  std::fill(sink.bytes.begin(), sink.bytes.end(), 0x55);
  deliver(a, ack[0]);
  EXPECT_TRUE(all_equal(sink.bytes, 0, sink.bytes.size(), 0x55));
  ASSERT_EQ(a.send_completions.size(), 1u);
  EXPECT_EQ(a.send_completions[0].status, CompletionStatus::kLocalProtectionError);
}

TEST_F(LocalKey, ASendsLaterPacketsForAReceiveBufferTakenBackAreNakedAndNotPlaced) {
  Region& src = a.add_region(3072, kAccessLocalWrite, 0xEE);
  Region& buffer = b.add_region(4096, kAccessLocalWrite, 0x00);
  b.post_receive(recv_wqe(buffer, 4096, 9));
  ASSERT_TRUE(a.post_send(wqe(WorkOp::kSend, src, 3072, 5)));
  a.qp.send(32);
  const auto frames = take(a);
  ASSERT_EQ(frames.size(), 3u);  // FIRST, MIDDLE, LAST
  deliver(b, frames[0]);
  EXPECT_TRUE(all_equal(buffer.bytes, 0, 1024, 0xEE));
  buffer.valid = false;
  std::fill(buffer.bytes.begin(), buffer.bytes.end(), 0x55);
  deliver(b, frames[1]);
  deliver(b, frames[2]);
  b.qp.respond(32);
  EXPECT_TRUE(all_equal(buffer.bytes, 0, buffer.bytes.size(), 0x55)) << "a SEND wrote into memory taken back";
  ASSERT_FALSE(b.recv_completions.empty());
  EXPECT_EQ(b.recv_completions[0].status, CompletionStatus::kLocalProtectionError);
  const auto replies = take(b);
  ASSERT_FALSE(replies.empty());
  EXPECT_EQ(AethSyndrome{parsed(replies.back()).ext<Aeth>(ExtHeader::kAeth).get(Aeth::syndrome)}.nak_code(),
            NakCode::kRemoteOperationalError);
}

}  // namespace
}  // namespace uroce::proto
