// The responder checks the R_Key on every packet it places or sends, not only on the request's first: once a
// region is invalidated or deregistered its key grants nothing, and a peer that still holds a request in
// progress (a WRITE's MIDDLE and LAST packets, a READ it asks for again as a duplicate) must not reach the
// memory the application has taken back. Also: a RETH DMA length above the 2^31-byte maximum message is an
// invalid request.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "proto/tests/rc_sim_requests.h"

namespace uroce::proto {
namespace {

using namespace testing;  // NOLINT(google-build-using-namespace): the simulation's helpers

AethSyndrome syndrome_of(const std::vector<uint8_t>& frame) {
  return AethSyndrome{parsed(frame).ext<Aeth>(ExtHeader::kAeth).get(Aeth::syndrome)};
}

void reseal(std::vector<uint8_t>& f) {
  icrc_store(f.data() + f.size() - kIcrcSize,
             icrc_compute(f.data() + Eth::kSize, f.size() - Eth::kSize - kIcrcSize, IpVersion::kV4));
}

TEST(RemoteKey, WriteMiddleAndLastAfterAnInvalidationAreNakedAndNotPlaced) {
  SimNetwork net(sim_attrs());
  SimEndpoint& a = net.a();
  SimEndpoint& b = net.b();
  Region& src = a.add_region(4096, kAccessLocalWrite, 0xEE);
  Region& dst = b.add_region(4096, kAccessLocalWrite | kAccessRemoteWrite, 0x00);
  dst.remotely_invalidatable = true;
  ASSERT_TRUE(a.post_send(rdma_wqe(WorkOp::kRdmaWrite, src, 3072, dst, 7)));
  a.qp.send(32);
  const auto frames = take(a);
  ASSERT_EQ(frames.size(), 3u);  // FIRST, MIDDLE, LAST at PMTU 1024

  deliver(b, frames[0]);
  EXPECT_EQ(dst.bytes[0], 0xEE);  // the FIRST, checked against a valid key, lands
  ASSERT_TRUE(b.invalidate_remote(RemoteToken{dst.key}));
  deliver(b, frames[1]);
  deliver(b, frames[2]);
  b.qp.respond(32);

  EXPECT_TRUE(std::all_of(dst.bytes.begin() + 1024, dst.bytes.begin() + 3072, [](uint8_t x) { return x == 0; }));
  EXPECT_EQ(b.qp.counters().resp_remote_access_error, 1u);
  const auto replies = take(b);
  ASSERT_FALSE(replies.empty());
  const AethSyndrome s = syndrome_of(replies.back());
  EXPECT_EQ(s.kind(), AethKind::kNak);
  EXPECT_EQ(s.nak_code(), NakCode::kRemoteAccessError);
}

// A posts a READ of `length` bytes from B's region `exposed` (0xAA, invalidatable by a peer) into its `sink`.
class RemoteKeyRead : public ::testing::Test {
 protected:
  std::vector<std::vector<uint8_t>> post_read(uint32_t length) {
    EXPECT_TRUE(a.post_send(rdma_wqe(WorkOp::kRdmaRead, sink, length, exposed, 7)));
    a.qp.send(32);
    return take(a);
  }
  SimNetwork net{sim_attrs()};
  SimEndpoint& a = net.a();
  SimEndpoint& b = net.b();
  Region& sink = a.add_region(8192, kAccessLocalWrite);
  Region& exposed = [this]() -> Region& {
    Region& r = b.add_region(8192, kAccessLocalWrite | kAccessRemoteRead, 0xAA);
    r.remotely_invalidatable = true;
    return r;
  }();
};

TEST_F(RemoteKeyRead, ADuplicateReadAfterAnInvalidationSendsNoneOfTheRegionsBytes) {
  const auto request = post_read(2048);
  ASSERT_EQ(request.size(), 1u);
  ASSERT_TRUE(net.run([&] { return !a.send_completions.empty(); }));
  ASSERT_EQ(a.send_completions[0].status, CompletionStatus::kSuccess);
  EXPECT_EQ(sink.bytes[0], 0xAA);

  // B takes its buffer back (the key is invalidated) and reuses it; the peer asks for the same READ again.
  ASSERT_TRUE(b.invalidate_remote(RemoteToken{exposed.key}));
  std::memset(exposed.bytes.data(), 0x55, exposed.bytes.size());
  deliver(b, request[0]);
  b.qp.respond(32);
  const auto replay = take(b);
  EXPECT_EQ(b.qp.counters().duplicate_request, 1u);
  for (const auto& f : replay) {
    const ParsedPacket p = parsed(f);
    const auto payload = p.payload();
    EXPECT_TRUE(std::none_of(payload.begin(), payload.end(), [](uint8_t x) { return x == 0x55; }))
        << p.info->name << ": a READ response carried what the invalidated region holds now";
  }
}

TEST_F(RemoteKeyRead, AReadResponseStreamStopsSendingTheRegionOnceItsKeyIsInvalidated) {
  deliver(b, post_read(8192).at(0));
  ASSERT_TRUE(b.qp.respond(1) != 0);  // the first response packet, from the valid key
  ASSERT_TRUE(b.invalidate_remote(RemoteToken{exposed.key}));
  std::memset(exposed.bytes.data(), 0x55, exposed.bytes.size());
  b.qp.respond(32);
  const auto responses = take(b);
  ASSERT_EQ(responses.size(), 8u);
  EXPECT_EQ(parsed(responses[0]).payload()[0], 0xAA);
  for (std::size_t i = 1; i < responses.size(); ++i) {
    const auto payload = parsed(responses[i]).payload();
    EXPECT_TRUE(std::all_of(payload.begin(), payload.end(), [](uint8_t x) { return x == 0; })) << "packet " << i;
  }
}

TEST(RemoteKey, ARethDmaLengthAboveTheLargestMessageIsAnInvalidRequest) {
  for (const WorkOp op : {WorkOp::kRdmaRead, WorkOp::kRdmaWrite}) {
    SCOPED_TRACE(op == WorkOp::kRdmaRead ? "READ" : "WRITE");
    SimNetwork net(sim_attrs());
    SimEndpoint& a = net.a();
    SimEndpoint& b = net.b();
    Region& local = a.add_region(1024, kAccessLocalWrite, 0x11);
    Region& remote = b.add_region(1024, kAccessLocalWrite | kAccessRemoteRead | kAccessRemoteWrite, 0x22);
    // A WRITE ONLY of 1024 bytes claims 2^31 + 1024 in its RETH (a READ, 2^31 + 1): re-sealed, so only the
    // responder's rule can refuse it.
    ASSERT_TRUE(a.post_send(rdma_wqe(op, local, op == WorkOp::kRdmaRead ? 1 : 1024, remote, 7)));
    a.qp.send(32);
    auto frame = take(a).at(0);
    const ParsedPacket p = parsed(frame);
    const std::size_t reth = p.bth_offset + Bth::kSize + p.info->offset_of(ExtHeader::kReth);
    MutView<Reth>{frame.data() + reth}.set(Reth::dma_length,
                                           kMaxMessageLength + p.payload_length + (op == WorkOp::kRdmaRead ? 1u : 0u));
    reseal(frame);
    deliver(b, frame);
    b.qp.respond(32);
    EXPECT_EQ(b.qp.counters().resp_invalid_request, 1u);
    EXPECT_EQ(b.qp.counters().rx_read_requests + b.qp.counters().rx_write_requests, 0u);
    EXPECT_EQ(remote.bytes[0], 0x22);
    const auto replies = take(b);
    ASSERT_FALSE(replies.empty());
    EXPECT_EQ(syndrome_of(replies.back()).nak_code(), NakCode::kInvalidRequest);
  }
}

}  // namespace
}  // namespace uroce::proto
