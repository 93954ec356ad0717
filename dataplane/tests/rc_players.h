// rdma-core-style test players for the RC transport (STYLE.md §12): a Player is a
// QP with its queues, completion queues and one registered buffer; RcWorld starts a
// Dataplane and the RC transport and connects pairs of players.
#pragma once

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "dataplane/rc_transport.h"
#include "dataplane/tests/loopback_fixture.h"

namespace uroce::dataplane::testing {

inline void fill_pattern(std::vector<uint8_t>& b, std::size_t n, uint32_t seed = 1) {
  for (std::size_t i = 0; i < n && i < b.size(); ++i) {
    b[i] = static_cast<uint8_t>(i * 131 + std::size_t{seed} * 7 + (i >> 9));
  }
}

class Player {
 public:
  static constexpr std::size_t kBufferSize = 2u << 20;

  Player(RcTransport& transport, EngineId engine, PortIndex port, uint32_t pd)
      : buffer(kBufferSize + 64), transport_(transport), sq_(512), rq_(512), scq_(4096), rcq_(4096) {
    RcQueuePairSetup setup;
    setup.port = port;
    setup.pd = pd;
    setup.send_queue = &sq_;
    setup.receive_queue = &rq_;
    setup.send_cq = &scq_;
    setup.receive_cq = &rcq_;
    auto qp = transport.create_qp(engine, setup);
    if (!qp.ok()) {
      error = qp.error();
      return;
    }
    qp_ = qp.value();
    auto token = transport.register_memory(
        reinterpret_cast<uint64_t>(buffer.data()), buffer.size(),
        proto::kAccessLocalWrite | proto::kAccessRemoteWrite | proto::kAccessRemoteRead | proto::kAccessRemoteAtomic,
        pd);
    if (!token.ok()) {
      error = token.error();
      return;
    }
    token_ = token.value();
  }

  [[nodiscard]] RcQueuePair* qp() const { return qp_; }
  [[nodiscard]] std::size_t half() const { return kBufferSize / 2; }
  [[nodiscard]] uint64_t remote_addr(std::size_t offset) const {
    return reinterpret_cast<uint64_t>(buffer.data()) + offset;
  }
  [[nodiscard]] proto::RemoteToken rkey() const { return proto::RemoteToken{token_}; }
  // An 8-byte aligned word at the end of the buffer, for atomics.
  [[nodiscard]] uint64_t* word() {
    return reinterpret_cast<uint64_t*>((reinterpret_cast<uintptr_t>(buffer.data() + kBufferSize) + 7) & ~uintptr_t{7});
  }

  [[nodiscard]] proto::SendWqe send(proto::WorkOp op, std::size_t offset, uint32_t length, uint64_t context) const {
    proto::SendWqe w;
    w.context = context;
    w.op = op;
    w.flags = proto::kWqeSignaled;
    w.num_sge = 1;
    w.length = length;
    w.sge[0] = {reinterpret_cast<uint64_t>(buffer.data()) + offset, length, proto::LocalToken{token_}};
    return w;
  }

  // Writes the WQE into the SQ and rings the doorbell; waits while the SQ is full.
  void post(const proto::SendWqe& w, bool ring = true) {
    while (sq_.full()) std::this_thread::yield();
    const uint32_t tail = sq_.producer_tail();
    sq_.slot(tail) = w;
    sq_.publish_tail(tail + 1);
    if (ring) transport_.ring_doorbell(*qp_);
  }
  void post_receive(uint8_t* addr, uint32_t length, uint64_t context) {
    while (rq_.full()) std::this_thread::yield();
    proto::RecvWqe r;
    r.context = context;
    r.num_sge = addr != nullptr ? 1 : 0;
    r.sge[0] = {reinterpret_cast<uint64_t>(addr), length, proto::LocalToken{token_}};
    const uint32_t tail = rq_.producer_tail();
    rq_.slot(tail) = r;
    rq_.publish_tail(tail + 1);
  }

  std::optional<proto::Completion> poll(CompletionQueue& cq) {
    const CompletionEntry* e = cq.peek();
    if (e == nullptr) return std::nullopt;
    const proto::Completion c = e->completion;
    cq.pop();
    cq.publish_consumed();
    return c;
  }
  std::optional<proto::Completion> wait(CompletionQueue& cq, std::chrono::seconds timeout = std::chrono::seconds(60)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      if (auto c = poll(cq)) return c;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return std::nullopt;
  }
  std::optional<proto::Completion> wait_send_completion() { return wait(scq_); }
  // `count` signalled WRITEs of `length` bytes: WQE k from offset k x length of this buffer to the same offset of
  // `to`'s, with context k.
  void post_writes(const Player& to, uint32_t count, uint32_t length) {
    post_transfers(proto::WorkOp::kRdmaWrite, to, count, length);
  }
  // `count` signalled READs of `length` bytes: WQE k reads offset k x length of `from`'s buffer into the same offset
  // of this one, with context k.
  void post_reads(const Player& from, uint32_t count, uint32_t length) {
    post_transfers(proto::WorkOp::kRdmaRead, from, count, length);
  }
  // `count` signalled WRITEs or READs between offset k x length of this buffer and the same offset of `peer`'s.
  void post_transfers(proto::WorkOp op, const Player& peer, uint32_t count, uint32_t length) {
    for (uint32_t k = 0; k < count; ++k) {
      proto::SendWqe w = send(op, std::size_t{k} * length, length, k);
      w.remote_addr = peer.remote_addr(std::size_t{k} * length);
      w.rkey = peer.rkey();
      post(w);
    }
  }
  // The next `count` send completions, each a success.
  ::testing::AssertionResult wait_send_successes(uint32_t count) {
    for (uint32_t k = 0; k < count; ++k) {
      const auto done = wait_send_completion();
      if (!done) return ::testing::AssertionFailure() << "send completion " << k << " of " << count << " never came";
      if (done->status != proto::CompletionStatus::kSuccess) {
        return ::testing::AssertionFailure()
               << "send completion " << k << ": status " << static_cast<int>(done->status);
      }
    }
    return ::testing::AssertionSuccess();
  }
  std::optional<proto::Completion> wait_receive_completion() { return wait(rcq_); }
  std::optional<proto::Completion> poll_send() { return poll(scq_); }
  std::optional<proto::Completion> poll_receive() { return poll(rcq_); }

  void release() {
    if (qp_ != nullptr) (void)transport_.destroy_qp(qp_);
    if (token_ != 0) (void)transport_.deregister_memory(token_);
    qp_ = nullptr;
    token_ = 0;
  }

  std::string error;
  std::vector<uint8_t> buffer;

 private:
  RcTransport& transport_;
  SendQueue sq_;
  ReceiveQueue rq_;
  CompletionQueue scq_;
  CompletionQueue rcq_;
  RcQueuePair* qp_ = nullptr;
  uint32_t token_ = 0;
};

class RcWorld {
 public:
  // Ports get MTU 4200 so every PMTU up to 4096 fits (rxe's rule: MTU >= PMTU + 80).
  explicit RcWorld(config::Config config) {
    for (auto& p : config.ports) p.mtu = 4200;
    auto dp = Dataplane::start(config);
    if (!dp.ok()) {
      error_ = dp.error();
      return;
    }
    dataplane_ = std::move(dp.value());
    auto t = RcTransport::start(*dataplane_);
    if (!t.ok()) {
      error_ = t.error();
      return;
    }
    transport_ = std::move(t.value());
  }
  ~RcWorld() {
    // The QPs go first, on their engines, then the players' queues and buffers: a test that stops early (a
    // failed ASSERT) leaves traffic in flight, and engines kept executing it into freed memory.
    for (auto& p : players_) p->release();
    players_.clear();
    transport_.reset();
    if (dataplane_) dataplane_->stop();
  }

  [[nodiscard]] bool ok() const { return transport_ != nullptr; }
  [[nodiscard]] const std::string& error() const { return error_; }
  [[nodiscard]] Dataplane& dataplane() { return *dataplane_; }
  [[nodiscard]] RcTransport& transport() { return *transport_; }

  // A on engine `a_engine` / port a, B on the last engine / port b, connected both ways.
  std::pair<Player*, Player*> connected_pair(uint32_t mtu, proto::RcQpAttributes attrs = {}, EngineId a_engine = 0) {
    const EngineId last = static_cast<EngineId>(dataplane_->engine_count() - 1);
    players_.push_back(std::make_unique<Player>(*transport_, a_engine, kPortA, 1));
    Player* a = players_.back().get();
    players_.push_back(std::make_unique<Player>(*transport_, last, kPortB, 1));
    Player* b = players_.back().get();
    for (Player* p : {a, b}) {
      if (!p->error.empty()) {
        error_ = p->error;
        return {nullptr, nullptr};
      }
    }
    std::mt19937 rng(static_cast<uint32_t>(a->qp()->qpn().value()));
    const proto::Psn psn_a{static_cast<uint32_t>(rng())}, psn_b{static_cast<uint32_t>(rng())};
    attrs.path_mtu = mtu;
    for (auto [self, peer, self_psn, peer_psn, peer_port] :
         {std::tuple{a, b, psn_a, psn_b, kPortB}, std::tuple{b, a, psn_b, psn_a, kPortA}}) {
      RcPeer remote;
      remote.qpn = peer->qp()->qpn();
      remote.psn = peer_psn;
      remote.ip = dataplane_->config().ports[peer_port].addresses.front();
      remote.path_mtu = mtu;
      proto::RcQpAttributes at = attrs;
      at.send_psn = self_psn;
      const Status s = transport_->connect(*self->qp(), remote, at);
      if (!s.ok()) {
        error_ = s.message();
        return {nullptr, nullptr};
      }
    }
    return {a, b};
  }

  void destroy(Player* a, Player* b) {
    a->release();
    b->release();
  }

 private:
  std::unique_ptr<Dataplane> dataplane_;
  std::unique_ptr<RcTransport> transport_;
  std::vector<std::unique_ptr<Player>> players_;
  std::string error_;
};

}  // namespace uroce::dataplane::testing
