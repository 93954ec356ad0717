// Bytes a peer sends into our memory check our L_Keys again per packet: a READ's responses, an atomic's ACK and a
// SEND's later packets land only in memory whose key is still valid. The peer chooses when they come, and the
// application may have deregistered or invalidated the memory since the work request began (hardware fails it
// with a local protection error). Before, a READ sink taken back while the READ was outstanding was written when
// the response came.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "proto/tests/rc_sim.h"

namespace uroce::proto {
namespace {

using testing::Region;
using testing::SimEndpoint;
using testing::SimNetwork;

RcQpAttributes attrs() {
  RcQpAttributes a;
  a.path_mtu = 1024;
  a.send_psn = Psn{0x200};
  a.receive_psn = Psn{0x900};
  a.ack_timeout = 10;
  return a;
}

ParsedPacket parsed(const std::vector<uint8_t>& frame) {
  const ParseResult r = parse_packet(std::span<const uint8_t>(frame));
  EXPECT_TRUE(r.ok());
  return r.packet;
}

std::vector<std::vector<uint8_t>> take(SimEndpoint& from) {
  std::vector<std::vector<uint8_t>> frames;
  frames.swap(from.outbox);
  return frames;
}

void deliver(SimEndpoint& to, const std::vector<uint8_t>& frame) { to.qp.on_packet(parsed(frame)); }

bool all_equal(const std::vector<uint8_t>& bytes, std::size_t from, std::size_t to, uint8_t value) {
  return std::all_of(bytes.begin() + static_cast<std::ptrdiff_t>(from), bytes.begin() + static_cast<std::ptrdiff_t>(to),
                     [value](uint8_t x) { return x == value; });
}

SendWqe one_sge(WorkOp op, const Region& local, uint32_t length, const Region& remote) {
  SendWqe w;
  w.context = 5;
  w.op = op;
  w.flags = kWqeSignaled;
  w.num_sge = 1;
  w.length = length;
  w.sge[0] = {local.addr(), length, LocalToken{local.key}};
  w.remote_addr = remote.addr();
  w.rkey = RemoteToken{remote.key};
  return w;
}

TEST(LocalKey, AReadResponseForASinkTakenBackIsALocalProtectionErrorAndWritesNothing) {
  SimNetwork net(attrs());
  SimEndpoint& a = net.a();
  SimEndpoint& b = net.b();
  Region& sink = a.add_region(4096, kAccessLocalWrite, 0x00);
  Region& source = b.add_region(4096, kAccessLocalWrite | kAccessRemoteRead, 0xAA);
  ASSERT_TRUE(a.post_send(one_sge(WorkOp::kRdmaRead, sink, 3072, source)));
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

TEST(LocalKey, AnAtomicAckForASinkTakenBackIsALocalProtectionError) {
  SimNetwork net(attrs());
  SimEndpoint& a = net.a();
  SimEndpoint& b = net.b();
  Region& sink = a.add_region(8, kAccessLocalWrite, 0x00);
  Region& target = b.add_region(8, kAccessLocalWrite | kAccessRemoteAtomic, 0x01);
  SendWqe w = one_sge(WorkOp::kFetchAdd, sink, 8, target);
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

TEST(LocalKey, ASendsLaterPacketsForAReceiveBufferTakenBackAreNakedAndNotPlaced) {
  SimNetwork net(attrs());
  SimEndpoint& a = net.a();
  SimEndpoint& b = net.b();
  Region& src = a.add_region(3072, kAccessLocalWrite, 0xEE);
  Region& buffer = b.add_region(4096, kAccessLocalWrite, 0x00);
  RecvWqe r;
  r.context = 9;
  r.num_sge = 1;
  r.sge[0] = {buffer.addr(), 4096, LocalToken{buffer.key}};
  b.post_receive(r);
  SendWqe w = one_sge(WorkOp::kSend, src, 3072, src);
  ASSERT_TRUE(a.post_send(w));
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
