// The responder's fused ICRC check (ParseOptions::defer_payload_icrc): a WRITE payload is copied into
// registered memory and its ICRC checked in one pass, and a packet whose ICRC does not match leaves no effect:
// the expected PSN, the WRITE cursor, completions and ACKs stay as they were, and the retransmission places the
// right bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "proto/tests/rc_sim_requests.h"

namespace uroce::proto {
namespace {

using testing::Region;
using testing::SimNetwork;

constexpr uint32_t kAll = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;

void fill(Region& r, uint32_t seed) {
  for (std::size_t i = 0; i < r.bytes.size(); ++i) r.bytes[i] = static_cast<uint8_t>(i * 131 + seed * 7 + (i >> 8));
}

SendWqe write(const Region& src, std::size_t offset, uint32_t length, const Region& dst, uint64_t context) {
  SendWqe w;
  w.context = context;
  w.op = WorkOp::kRdmaWrite;
  w.flags = kWqeSignaled;
  w.num_sge = 1;
  w.length = length;
  w.sge[0] = {src.addr(offset), length, LocalToken{src.key}};
  w.remote_addr = dst.addr(offset);
  w.rkey = RemoteToken{dst.key};
  return w;
}

// An RC WRITE request frame from A to B with opcode `op`?
bool is_write(const std::vector<uint8_t>& f, Opcode op) {
  const ParseResult r = parse_packet(std::span<const uint8_t>(f), ParseOptions{.verify_icrc = false});
  return r.ok() && r.packet.opcode() == op;
}

class DeferredIcrc : public ::testing::Test {
 protected:
  DeferredIcrc() : net(testing::sim_attrs(1024)) {
    net.parse_options.defer_payload_icrc = true;
    fill(src, 1);
  }
  SimNetwork net;
  Region& src = net.a().add_region(16384, kAll);
  Region& dst = net.b().add_region(16384, kAll, 0xEE);
};

TEST_F(DeferredIcrc, ABadMiddlePacketIsDroppedWithoutEffectAndTheRetransmissionPlacesIt) {
  bool corrupted = false;
  net.tamper = [&](std::vector<uint8_t>& f, bool a_to_b) {
    if (!a_to_b || corrupted || !is_write(f, Opcode::kRcRdmaWriteMiddle)) return;
    corrupted = true;
    f[f.size() - 100] ^= 0x10;  // a payload byte: the parser accepts the frame, only the ICRC can tell
  };
  ASSERT_TRUE(net.a().post_send(write(src, 0, 4096, dst, 1)));  // FIRST, MIDDLE, MIDDLE, LAST
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 1; }));
  ASSERT_TRUE(corrupted);
  EXPECT_EQ(net.a().send_completions[0].status, CompletionStatus::kSuccess);
  EXPECT_EQ(net.b().qp.counters().rx_icrc_errors, 1u);
  EXPECT_EQ(net.b().qp.counters().rx_write_requests, 1u);
  EXPECT_GT(net.a().qp.counters().retransmitted_packets, 0u);
  EXPECT_EQ(std::memcmp(dst.bytes.data(), src.bytes.data(), 4096), 0);
  EXPECT_EQ(dst.bytes[4096], 0xEE);
}

TEST_F(DeferredIcrc, ABadOnlyPacketWithAKnownKeyIsDroppedWithoutEffect) {
  // The first WRITE teaches B that A holds dst's key (its ICRC is checked before anything is placed); the
  // second one's ONLY packet is then placed while its ICRC is checked, and is corrupted.
  int only_packets = 0;
  net.tamper = [&](std::vector<uint8_t>& f, bool a_to_b) {
    if (a_to_b && is_write(f, Opcode::kRcRdmaWriteOnly) && ++only_packets == 2) f[f.size() - 9] ^= 0x01;
  };
  ASSERT_TRUE(net.a().post_send(write(src, 0, 1024, dst, 1)));
  ASSERT_TRUE(net.a().post_send(write(src, 1024, 1024, dst, 2)));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 2; }));
  EXPECT_GE(only_packets, 3) << "the corrupted ONLY packet was sent again";
  EXPECT_EQ(net.a().send_completions[1].status, CompletionStatus::kSuccess);
  EXPECT_EQ(net.b().qp.counters().rx_icrc_errors, 1u);
  EXPECT_EQ(net.b().qp.counters().rx_write_requests, 2u);
  EXPECT_EQ(std::memcmp(dst.bytes.data(), src.bytes.data(), 2048), 0);
}

TEST_F(DeferredIcrc, ABadHeaderNeverActsEvenWhenItLooksLikeAnError) {
  // A corrupted R_Key on a fresh WRITE would be a remote access error if acted on: the ICRC is checked first,
  // so the packet is dropped, the QP stays up and the retransmission succeeds.
  bool corrupted = false;
  net.tamper = [&](std::vector<uint8_t>& f, bool a_to_b) {
    if (!a_to_b || corrupted || !is_write(f, Opcode::kRcRdmaWriteFirst)) return;
    corrupted = true;
    const ParseResult r = parse_packet(std::span<const uint8_t>(f), ParseOptions{.verify_icrc = false});
    f[r.packet.bth_offset + Bth::kSize + Reth::rkey.kOffset] ^= 0x40;
  };
  ASSERT_TRUE(net.a().post_send(write(src, 0, 3000, dst, 1)));
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == 1; }));
  ASSERT_TRUE(corrupted);
  EXPECT_EQ(net.a().send_completions[0].status, CompletionStatus::kSuccess);
  EXPECT_EQ(net.b().qp.state(), QpState::kReadyToSend);
  EXPECT_EQ(net.b().qp.counters().resp_remote_access_error, 0u);
  EXPECT_EQ(net.b().qp.counters().rx_icrc_errors, 1u);
  EXPECT_EQ(std::memcmp(dst.bytes.data(), src.bytes.data(), 3000), 0);
}

TEST_F(DeferredIcrc, MixedWritesThroughCorruptionAndLossArriveIntact) {
  net.faults = {.loss = 0.01, .reorder = 0.01, .duplicate = 0.01, .corrupt = 0.02};
  net.keep_wire_log = false;
  uint64_t posted = 0;
  std::size_t offset = 0;
  std::vector<std::pair<std::size_t, uint32_t>> written;
  for (const uint32_t length : {256u, 1000u, 1024u, 1025u, 4096u, 5000u, 2048u, 300u}) {
    for (int i = 0; i < 8; ++i) {
      ASSERT_TRUE(net.a().post_send(write(src, offset, length, dst, ++posted)));
      written.emplace_back(offset, length);
      offset = (offset + length) % (16384 - 5000);
    }
  }
  ASSERT_TRUE(net.run([&] { return net.a().send_completions.size() == posted; }));
  for (const Completion& c : net.a().send_completions) EXPECT_EQ(c.status, CompletionStatus::kSuccess);
  // Each write copies src[offset, +length) to the same offset of dst, so overlapping ones agree.
  for (const auto& [at, length] : written)
    EXPECT_EQ(std::memcmp(dst.bytes.data() + at, src.bytes.data() + at, length), 0) << at << " +" << length;
  EXPECT_GT(net.frames_corrupted, 0u);
  EXPECT_GT(net.b().qp.counters().rx_icrc_errors, 0u) << "some corrupted WRITE was caught by the fused check";
}

}  // namespace
}  // namespace uroce::proto
