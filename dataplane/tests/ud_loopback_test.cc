// UD over real DPDK devices: datagrams between a UD QP on engine 0 (port a) and one
// on engine 1 (port b), and to the GSI QP (QPN 1, Q_Key 0x80010000) that connection
// management will use. The UdEnv here binds proto::UdQp to the engine directly (mbufs,
// a receive list, recorded completions); the production binding arrives with CM.
#include <gtest/gtest.h>

#include <deque>
#include <mutex>
#include <vector>

#include <rte_mbuf.h>

#include "dataplane/tests/loopback_fixture.h"
#include "proto/ud_qp.h"

namespace uroce::dataplane::testing {
namespace {

class EngineUdQp final : public proto::UdEnv {
 public:
  EngineUdQp(proto::Qpn qpn, proto::QKey qkey, PortIndex port) : qp(qpn, qkey, 1024, this), port_(port) {}

  static void on_packet(void* self, EngineContext& ctx, const proto::ParsedPacket& p, PortIndex, rte_mbuf* m) {
    auto& ud = *static_cast<EngineUdQp*>(self);
    ud.ctx_ = &ctx;
    ud.qp.on_packet(p);
    rte_pktmbuf_free(m);
  }
  proto::CompletionStatus send(EngineContext& ctx, const proto::SendWqe& w, const proto::UdAddress& to) {
    ctx_ = &ctx;
    return qp.send(w, to);
  }

  uint8_t* tx_begin(std::size_t length) override {
    tx_ = ctx_->alloc_mbuf();
    if (tx_ == nullptr) return nullptr;
    return reinterpret_cast<uint8_t*>(rte_pktmbuf_append(tx_, static_cast<uint16_t>(length)));
  }
  void tx_commit(std::size_t) override { ctx_->send(port_, tx_); }
  uint8_t* resolve_local(proto::LocalToken, uint64_t addr, uint32_t, uint32_t) override {
    return reinterpret_cast<uint8_t*>(addr);  // this test registers no memory: every buffer is valid
  }
  const proto::RecvWqe* pop_receive() override {
    std::lock_guard lock(mutex_);
    if (receives_.empty()) return nullptr;
    popped_ = receives_.front();
    receives_.pop_front();
    return &popped_;
  }
  void complete_send(const proto::Completion&) override {}
  void complete_receive(const proto::Completion& c, proto::Qpn source) override {
    std::lock_guard lock(mutex_);
    completions_.push_back({c, source});
  }

  void post_receive(std::vector<uint8_t>& buffer, uint64_t context) {
    std::lock_guard lock(mutex_);
    receives_.push_back(proto::RecvWqe{
        context, 1, {proto::Sge{reinterpret_cast<uint64_t>(buffer.data()), static_cast<uint32_t>(buffer.size()), {}}}});
  }
  std::vector<std::pair<proto::Completion, proto::Qpn>> completions() {
    std::lock_guard lock(mutex_);
    return completions_;
  }

  proto::UdQp qp;

 private:
  PortIndex port_;
  EngineContext* ctx_ = nullptr;
  rte_mbuf* tx_ = nullptr;
  std::mutex mutex_;  // test-only: the test thread posts receives while the engine pops them
  std::deque<proto::RecvWqe> receives_;
  proto::RecvWqe popped_{};
  std::vector<std::pair<proto::Completion, proto::Qpn>> completions_;
};

proto::UdAddress address(const Dataplane& dp, PortIndex from, PortIndex to, proto::Qpn qpn, proto::QKey qkey) {
  proto::PacketSpec s = roce_spec(dp, from, to, qpn, proto::Opcode::kUdSendOnly, 0);
  proto::UdAddress a;
  a.headers.init(s);
  a.remote_qpn = qpn;
  a.remote_qkey = qkey;
  return a;
}

TEST(UdLoopback, DatagramsReachTheirQpAcrossEnginesAndTheGsiQp) {
  auto started = Dataplane::start(loopback_config());
  ASSERT_TRUE(started.ok()) << started.error();
  Dataplane& dp = *started.value();
  const proto::Qpn b_qpn = make_qpn(1, 7);
  EngineUdQp a(make_qpn(0, 5), proto::QKey{0x11111111}, kPortA);
  EngineUdQp b(b_qpn, proto::QKey{0x22222222}, kPortB);
  EngineUdQp gsi(proto::kGsiQpn, proto::kGsiQKey, kPortA);
  // The peer's GSI QP, sending a CM MAD from QP1 to QP1 (its Q_Key 0x80010000 is "controlled":
  // only a QP that owns it can send it).
  EngineUdQp peer_gsi(proto::kGsiQpn, proto::kGsiQKey, kPortB);
  ASSERT_TRUE(dp.engine(0).register_qp(a.qp.qpn(), QpEndpoint{&EngineUdQp::on_packet, &a}).ok());
  ASSERT_TRUE(dp.engine(1).register_qp(b_qpn, QpEndpoint{&EngineUdQp::on_packet, &b}).ok());
  ASSERT_TRUE(dp.engine(0).register_qp(proto::kGsiQpn, QpEndpoint{&EngineUdQp::on_packet, &gsi}).ok());

  std::vector<std::vector<uint8_t>> buffers(6, std::vector<uint8_t>(1100, 0));
  for (int i = 0; i < 3; ++i) b.post_receive(buffers[i], i);
  gsi.post_receive(buffers[3], 3);
  std::vector<uint8_t> payload(1000);
  for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i);
  proto::SendWqe w;
  w.op = proto::WorkOp::kSend;
  w.num_sge = 1;
  w.length = 1000;
  w.sge[0] = {reinterpret_cast<uint64_t>(payload.data()), 1000, {}};
  const auto to_b = address(dp, kPortA, kPortB, b_qpn, proto::QKey{0x22222222});
  const auto to_b_wrong_key = address(dp, kPortA, kPortB, b_qpn, proto::QKey{0x33333333});
  const auto to_gsi = address(dp, kPortB, kPortA, proto::kGsiQpn, proto::kGsiQKey);
  ASSERT_TRUE(dp.engine(0)
                  .call([&](EngineContext& ctx) {
                    EXPECT_EQ(a.send(ctx, w, to_b), proto::CompletionStatus::kSuccess);
                    EXPECT_EQ(a.send(ctx, w, to_b_wrong_key), proto::CompletionStatus::kSuccess);
                    proto::SendWqe imm = w;
                    imm.op = proto::WorkOp::kSendWithImmediate;
                    imm.immediate = 77;
                    EXPECT_EQ(a.send(ctx, imm, to_b), proto::CompletionStatus::kSuccess);
                  })
                  .ok());
  ASSERT_TRUE(dp.engine(1)
                  .call([&](EngineContext& ctx) {
                    EXPECT_EQ(peer_gsi.send(ctx, w, to_gsi), proto::CompletionStatus::kSuccess);
                  })
                  .ok());
  const bool arrived = eventually([&] { return b.completions().size() == 2 && gsi.completions().size() == 1; },
                                  std::chrono::seconds(10));
  if (!arrived) {
    for (EngineId e = 0; e < 2; ++e) {
      for (const auto& [name, value] : counter_values(dp.engine(e).counters())) {
        if (value != 0) std::printf("engine %u %s=%llu\n", e, name.c_str(), static_cast<unsigned long long>(value));
      }
    }
    std::printf("b: rx %llu qkey %llu no_receive %llu; gsi rx %llu qkey %llu\n",
                static_cast<unsigned long long>(b.qp.counters().rx_datagrams),
                static_cast<unsigned long long>(b.qp.counters().rx_qkey_mismatch),
                static_cast<unsigned long long>(b.qp.counters().rx_no_receive),
                static_cast<unsigned long long>(gsi.qp.counters().rx_datagrams),
                static_cast<unsigned long long>(gsi.qp.counters().rx_qkey_mismatch));
  }
  ASSERT_TRUE(arrived);
  const auto got = b.completions();
  EXPECT_EQ(got[0].second, a.qp.qpn()) << "DETH SrcQP names the sender";
  EXPECT_EQ(got[0].first.byte_length, proto::kUdGrhSize + 1000);
  EXPECT_EQ(std::memcmp(buffers[0].data() + proto::kUdGrhSize, payload.data(), 1000), 0);
  EXPECT_EQ(got[1].first.immediate, 77u);
  EXPECT_EQ(b.qp.counters().rx_qkey_mismatch, 1u) << "the datagram with the wrong Q_Key was dropped";
  EXPECT_EQ(gsi.completions()[0].second, proto::kGsiQpn);
  (void)dp.engine(0).unregister_qp(a.qp.qpn());
  (void)dp.engine(1).unregister_qp(b_qpn);
  (void)dp.engine(0).unregister_qp(proto::kGsiQpn);
  dp.stop();
}

}  // namespace
}  // namespace uroce::dataplane::testing
