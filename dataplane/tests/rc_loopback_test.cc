// The RC transport end to end on real DPDK devices: two engines in one process,
// ports a and b joined by a net_ring link. Player A's QP lives on engine 0 and
// player B's on engine 1, while every packet arrives on RX queue 0 (the sender's
// queue index): so everything for B crosses the redirect ring, the path every PMD
// without BTH steering takes.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <rte_mbuf.h>

#include "dataplane/rc_transport.h"
#include "dataplane/tests/loopback_fixture.h"
#include "dataplane/tests/rc_players.h"

namespace uroce::dataplane::testing {
namespace {

using proto::CompletionStatus;
using proto::WorkOp;

struct SizeCase {
  uint32_t mtu;
  uint32_t size;
};

class RcLoopback : public ::testing::TestWithParam<SizeCase> {
 protected:
  static void SetUpTestSuite() { world = std::make_unique<RcWorld>(loopback_config()); }
  static void TearDownTestSuite() { world.reset(); }
  static std::unique_ptr<RcWorld> world;
};
std::unique_ptr<RcWorld> RcLoopback::world;

std::vector<SizeCase> size_cases() {
  std::vector<SizeCase> v;
  for (uint32_t mtu : {1024u, 4096u})
    for (uint32_t size : {0u, 1u, mtu - 1, mtu, mtu + 1, 1u << 20}) v.push_back({mtu, size});
  return v;
}

TEST_P(RcLoopback, EveryOperationDeliversEveryByte) {
  ASSERT_TRUE(world->ok()) << world->error();
  const auto [mtu, size] = GetParam();
  auto [a, b] = world->connected_pair(mtu);
  ASSERT_TRUE(a && b) << world->error();
  fill_pattern(a->buffer, size);

  // SEND
  b->post_receive(b->buffer.data(), size, 100);
  a->post(a->send(WorkOp::kSend, 0, size, 1));
  const auto sent = a->wait_send_completion();
  const auto received = b->wait_receive_completion();
  ASSERT_TRUE(sent && received);
  EXPECT_EQ(sent->status, CompletionStatus::kSuccess);
  EXPECT_EQ(received->status, CompletionStatus::kSuccess);
  EXPECT_EQ(received->byte_length, size);
  EXPECT_EQ(std::memcmp(a->buffer.data(), b->buffer.data(), size), 0);

  // WRITE with immediate, into the second half of B's buffer
  fill_pattern(a->buffer, size, 7);
  b->post_receive(nullptr, 0, 101);
  auto w = a->send(WorkOp::kRdmaWriteWithImmediate, 0, size, 2);
  w.remote_addr = b->remote_addr(b->half());
  w.rkey = b->rkey();
  w.immediate = 0x12345678;
  a->post(w);
  const auto write_done = a->wait_send_completion();
  const auto imm = b->wait_receive_completion();
  ASSERT_TRUE(write_done && imm);
  EXPECT_EQ(write_done->status, CompletionStatus::kSuccess);
  EXPECT_EQ(imm->immediate, 0x12345678u);
  EXPECT_EQ(imm->byte_length, size);
  EXPECT_EQ(std::memcmp(a->buffer.data(), b->buffer.data() + b->half(), size), 0);

  // READ it back into A's second half
  auto r = a->send(WorkOp::kRdmaRead, a->half(), size, 3);
  r.remote_addr = b->remote_addr(b->half());
  r.rkey = b->rkey();
  a->post(r);
  const auto read_done = a->wait_send_completion();
  ASSERT_TRUE(read_done);
  EXPECT_EQ(read_done->status, CompletionStatus::kSuccess);
  EXPECT_EQ(std::memcmp(a->buffer.data(), a->buffer.data() + a->half(), size), 0);
  world->destroy(a, b);
}

INSTANTIATE_TEST_SUITE_P(AroundThePmtu, RcLoopback, ::testing::ValuesIn(size_cases()), [](const auto& i) {
  return "mtu" + std::to_string(i.param.mtu) + "_size" + std::to_string(i.param.size);
});

// A destroyed QP's number is not handed out again during its time-wait (a peer's CM would call the new connection
// stale), but its slot serves again at once under the slot's next number (qpn.h): how many QPs an engine can hold
// bounds how many exist at a time, not how fast they come and go.
TEST(RcLoopbackOps, ADestroyedQpnWaitsOutItsTimeWaitButItsSlotServesAtOnce) {
  config::Config c = loopback_config();
  c.engine.max_qps_per_engine = 8;  // engine 1: slots 1..7 (slot 0 serves no QP)
  RcWorld world(c);
  ASSERT_TRUE(world.ok()) << world.error();
  std::vector<std::unique_ptr<Player>> players;
  std::set<uint32_t> numbers;
  for (int i = 0; i < 7; ++i) {
    players.push_back(std::make_unique<Player>(world.transport(), 1, kPortB, 1));
    ASSERT_TRUE(players.back()->error.empty()) << players.back()->error;
    numbers.insert(players.back()->qp()->qpn().value());
  }
  auto none = std::make_unique<Player>(world.transport(), 1, kPortB, 1);
  EXPECT_FALSE(none->error.empty()) << "an engine with every slot in use has none to give";
  none->release();
  // Far more QPs come and go than the table has slots, well within one time-wait (3 s).
  for (std::size_t round = 0; round < 100; ++round) {
    std::unique_ptr<Player>& p = players[round % players.size()];
    const proto::Qpn old = p->qp()->qpn();
    p->release();  // destroys the QP
    p = std::make_unique<Player>(world.transport(), 1, kPortB, 1);
    ASSERT_TRUE(p->error.empty()) << p->error;
    const proto::Qpn qpn = p->qp()->qpn();
    EXPECT_EQ(qp_slot_of(qpn, 8), qp_slot_of(old, 8)) << "the only free slot";
    EXPECT_TRUE(numbers.insert(qpn.value()).second) << "QPN " << qpn.value() << " served again in its time-wait";
  }
  for (auto& p : players) p->release();
}

// A QP whose requests wait for ACKs does nothing until a packet or its retransmission deadline: it leaves the
// engine's active list (so 10 000 such QPs cost the loop nothing) and its wake timer brings it back, so every
// retransmission still happens and the retries still run out. The peer's QP is gone, so nothing answers.
TEST(RcLoopbackOps, AQpWaitingForAcksLeavesTheActiveListAndItsDeadlineWakesIt) {
  RcWorld world(loopback_config());
  ASSERT_TRUE(world.ok()) << world.error();
  proto::RcQpAttributes attrs;
  attrs.ack_timeout = 10;  // ~4 ms
  attrs.retry_count = 3;
  auto [a, b] = world.connected_pair(1024, attrs);
  ASSERT_TRUE(a && b) << world.error();
  auto w = a->send(proto::WorkOp::kRdmaWrite, 0, 64, 1);
  w.remote_addr = b->remote_addr(0);
  w.rkey = b->rkey();
  b->release();
  a->post(w);
  // Sampled on the engine, between its iterations, while the WRITE waits: a QP polled only because it waits
  // would be on the list at every sample.
  unsigned off_the_list = 0, samples = 0;
  std::optional<proto::Completion> done;
  while (!(done = a->poll_send())) {
    const std::optional<std::size_t> active = world.transport().active_qps(0);
    ASSERT_TRUE(active);
    ++samples;
    if (*active == 0) ++off_the_list;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_LT(samples, 20'000u) << "the retransmission deadline never woke the QP";
  }
  EXPECT_EQ(done->status, proto::CompletionStatus::kRetryExceeded);
  const proto::RcCounters& counters = a->qp()->protocol().counters();
  EXPECT_EQ(counters.local_ack_timeout_err, 4u) << "one expiry per try: the first send and three retries";
  EXPECT_GT(off_the_list, samples / 2) << off_the_list << " of " << samples << " samples";
  world.destroy(a, b);
}

// QPs refused TX (a full backlog) wait in their port's queue, oldest first, and are polled again only once the
// port has room: nothing is lost, no QP starves until its retries run out, and every WRITE lands.
TEST(RcLoopbackOps, QpsRefusedTxWaitTheirTurnAndLoseNothing) {
  config::Config c = loopback_config();
  c.engine.tx_backlog = 4;  // fewer than one burst of one QP: refusals are certain
  RcWorld world(c);
  ASSERT_TRUE(world.ok()) << world.error();
  constexpr int kPairs = 8;
  constexpr uint32_t kWrites = 128;
  constexpr uint32_t kSize = 4096;  // four packets at PMTU 1024
  std::vector<std::pair<Player*, Player*>> pairs;
  for (int i = 0; i < kPairs; ++i) {
    pairs.push_back(world.connected_pair(1024));
    ASSERT_TRUE(pairs.back().first && pairs.back().second) << world.error();
  }
  for (auto& [a, b] : pairs) {
    fill_pattern(a->buffer, std::size_t{kSize} * kWrites, static_cast<uint32_t>(a->qp()->qpn().value()));
    a->post_writes(*b, kWrites, kSize);
  }
  for (auto& [a, b] : pairs) {
    ASSERT_TRUE(a->wait_send_successes(kWrites));
    EXPECT_EQ(std::memcmp(a->buffer.data(), b->buffer.data(), std::size_t{kSize} * kWrites), 0);
  }
  EXPECT_GT(world.dataplane().engine(0).counters().tx_backpressure.read(), 0u) << "the backlog never filled";
  for (auto& [a, b] : pairs) world.destroy(a, b);
}

// Exhaustion (issue #14): with engine 0's mempool empty, the QP holds its packets back (each try counted in
// mbuf_alloc_failures) and sends them once mbufs come back; nothing is lost and every byte lands.
TEST(RcLoopbackOps, AnEmptyMempoolHoldsPacketsBackAndLosesNothing) {
  RcWorld world(loopback_config());
  ASSERT_TRUE(world.ok()) << world.error();
  auto [a, b] = world.connected_pair(1024);
  ASSERT_TRUE(a && b) << world.error();
  Engine& engine = world.dataplane().engine(0);
  std::vector<rte_mbuf*> held;  // every mbuf engine 0 can hand out
  ASSERT_TRUE(engine
                  .call([&](EngineContext& ctx) {
                    while (rte_mbuf* m = ctx.alloc_mbuf()) held.push_back(m);
                  })
                  .ok());
  const uint64_t failures_before = engine.counters().mbuf_alloc_failures.read();
  constexpr uint32_t kSize = 64 * 1024;  // 64 packets each
  constexpr uint32_t kWrites = 8;
  fill_pattern(a->buffer, std::size_t{kSize} * kWrites, 9);
  a->post_writes(*b, kWrites, kSize);
  // The QP tries and finds the pool empty; then the mbufs come back.
  EXPECT_TRUE(eventually([&] { return engine.counters().mbuf_alloc_failures.read() > failures_before; }));
  EXPECT_FALSE(a->poll_send()) << "nothing can have been sent";
  ASSERT_TRUE(
      engine.call([&](EngineContext&) { rte_pktmbuf_free_bulk(held.data(), static_cast<unsigned>(held.size())); })
          .ok());
  ASSERT_TRUE(a->wait_send_successes(kWrites));
  EXPECT_EQ(std::memcmp(a->buffer.data(), b->buffer.data(), std::size_t{kSize} * kWrites), 0);
  world.destroy(a, b);
}

TEST(RcLoopbackOps, AtomicsAndRedirectCounters) {
  RcWorld world(loopback_config());
  ASSERT_TRUE(world.ok()) << world.error();
  auto [a, b] = world.connected_pair(1024);
  ASSERT_TRUE(a && b) << world.error();
  uint64_t* target = b->word();
  *target = 5;
  for (std::size_t i = 0; i < 10; ++i) {
    auto add = a->send(WorkOp::kFetchAdd, 8 * i, 8, 10 + i);
    add.remote_addr = reinterpret_cast<uint64_t>(target);
    add.rkey = b->rkey();
    add.compare_add = 3;
    a->post(add);
  }
  auto cas = a->send(WorkOp::kCompareSwap, 128, 8, 30);
  cas.remote_addr = reinterpret_cast<uint64_t>(target);
  cas.rkey = b->rkey();
  cas.compare_add = 35;
  cas.swap = 99;
  a->post(cas);
  for (int i = 0; i < 11; ++i) {
    const auto c = a->wait_send_completion();
    ASSERT_TRUE(c);
    EXPECT_EQ(c->status, CompletionStatus::kSuccess);
  }
  for (std::size_t i = 0; i < 10; ++i) {
    uint64_t original;
    std::memcpy(&original, a->buffer.data() + 8 * i, 8);
    EXPECT_EQ(original, 5u + 3u * i);
  }
  uint64_t swapped;
  std::memcpy(&swapped, a->buffer.data() + 128, 8);
  EXPECT_EQ(swapped, 35u);
  EXPECT_EQ(*target, 99u);
  // B's QP is on engine 1 but its packets arrive on engine 0's queue: redirected.
  EXPECT_GT(world.dataplane().engine(0).counters().redirect_enqueued.read(), 0u);
  world.destroy(a, b);
}

TEST(RcLoopbackOps, RemoteAccessErrorCompletesWithTheRightStatus) {
  RcWorld world(loopback_config());
  ASSERT_TRUE(world.ok()) << world.error();
  auto [a, b] = world.connected_pair(1024);
  ASSERT_TRUE(a && b) << world.error();
  auto w = a->send(WorkOp::kRdmaWrite, 0, 64, 1);
  w.remote_addr = b->remote_addr(0);
  w.rkey = proto::RemoteToken{b->rkey().value() ^ 0x100};  // someone else's key
  a->post(w);
  a->post(a->send(WorkOp::kSend, 0, 8, 2));
  const auto first = a->wait_send_completion();
  const auto second = a->wait_send_completion();
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->status, CompletionStatus::kRemoteAccessError);
  EXPECT_EQ(second->status, CompletionStatus::kWorkRequestFlushed);
  world.destroy(a, b);
}

// Holds an engine inside one loop iteration, as an engine in the middle of placing or reading a packet is: a command
// that reads the memory table (as a resolve would) and waits for release(). Released, and waited for, at the latest
// when it goes out of scope.
class EngineHold {
 public:
  explicit EngineHold(Engine& engine) {
    command_.run = [](void* arg, EngineContext& ctx) {
      auto& self = *static_cast<EngineHold*>(arg);
      ctx.begin_memory_access();
      self.running_.store(true);
      while (!self.released_.load(std::memory_order_acquire)) std::this_thread::yield();
    };
    command_.arg = this;
    posted_ = engine.post(command_).ok();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (posted_ && !running_.load() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  ~EngineHold() {
    release();
    while (posted_ && !Engine::done(command_)) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  EngineHold(const EngineHold&) = delete;
  EngineHold& operator=(const EngineHold&) = delete;
  [[nodiscard]] bool holding() const { return running_.load() && !released_.load(); }
  void release() { released_.store(true, std::memory_order_release); }

 private:
  EngineCommand command_;
  bool posted_ = false;
  std::atomic<bool> running_{false};
  std::atomic<bool> released_{false};
};

// ndkpi.md §10.3 and §10.6: a close cancels pending work, and every post that returned success completes. The QP's
// destruction drops the doorbells still queued for it, so the destruction itself flushes: a receive posted to a QP
// that was never connected, and work posted to a QP already in the error state, complete flushed although no
// doorbell for them reached the engine. (Before, both were lost: the close only moved a QP out of Reset or RTS.)
TEST(RcLoopbackOps, ADestroyedQpCompletesEveryPostFlushedWithoutADoorbell) {
  RcWorld world(loopback_config());
  ASSERT_TRUE(world.ok()) << world.error();
  Player never_connected(world.transport(), 0, kPortA, 1);
  ASSERT_TRUE(never_connected.error.empty()) << never_connected.error;
  never_connected.post_receive(never_connected.buffer.data(), 64, 7);  // no doorbell
  never_connected.release();
  const auto receive = never_connected.poll_receive();
  ASSERT_TRUE(receive.has_value()) << "the receive of a QP destroyed in Reset never completed";
  EXPECT_EQ(receive->context, 7u);
  EXPECT_EQ(receive->status, CompletionStatus::kWorkRequestFlushed);

  const auto [a, b] = world.connected_pair(1024);
  ASSERT_TRUE(a && b) << world.error();
  world.transport().flush(*a->qp());
  a->post(a->send(WorkOp::kSend, 0, 64, 1));
  const auto first = a->wait_send_completion();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->status, CompletionStatus::kWorkRequestFlushed);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the engine has let the idle QP go
  a->post(a->send(WorkOp::kRdmaWrite, 0, 64, 2), false);       // no doorbell
  a->post_receive(a->buffer.data(), 64, 8);
  a->release();
  const auto send = a->poll_send();
  const auto after = a->poll_receive();
  ASSERT_TRUE(send.has_value()) << "a WRITE posted to a QP in the error state never completed";
  EXPECT_EQ(send->context, 2u);
  EXPECT_EQ(send->status, CompletionStatus::kWorkRequestFlushed);
  ASSERT_TRUE(after.has_value()) << "a receive posted to a QP in the error state never completed";
  EXPECT_EQ(after->context, 8u);
  EXPECT_EQ(after->status, CompletionStatus::kWorkRequestFlushed);
  world.destroy(a, b);
}

// NdkFlush may come while a connect is on its way (the CM exchange or an address lookup lies between the two). A
// flush the engine took first stays in force: the connected QP is in the error state, its work completes flushed.
// (Before, it went to RTS and sent, while every receive posted to it was flushed on each poll.)
TEST(RcLoopbackOps, AFlushTakenBeforeTheConnectLeavesTheQpInTheErrorState) {
  RcWorld world(loopback_config());
  ASSERT_TRUE(world.ok()) << world.error();
  const auto [a, b] = world.connected_pair(1024);
  ASSERT_TRUE(a && b) << world.error();
  Player late(world.transport(), 0, kPortA, 1);
  ASSERT_TRUE(late.error.empty()) << late.error;
  world.transport().flush(*late.qp());  // rings the doorbell: the engine polls the QP in Reset
  late.post_receive(late.buffer.data(), 64, 9);
  world.transport().ring_doorbell(*late.qp());
  const auto receive = late.wait_receive_completion();
  ASSERT_TRUE(receive.has_value());
  EXPECT_EQ(receive->status, CompletionStatus::kWorkRequestFlushed);
  RcPeer peer;
  peer.qpn = b->qp()->qpn();
  peer.psn = proto::Psn{1};
  peer.ip = world.dataplane().config().ports[kPortB].addresses.front();
  peer.path_mtu = 1024;
  proto::RcQpAttributes attrs;
  attrs.path_mtu = 1024;
  ASSERT_TRUE(world.transport().connect(*late.qp(), peer, attrs).ok());
  late.post(late.send(WorkOp::kRdmaWrite, 0, 64, 3));
  const auto sent = late.wait_send_completion();
  ASSERT_TRUE(sent.has_value());
  EXPECT_EQ(sent->status, CompletionStatus::kWorkRequestFlushed);
  late.release();
  world.destroy(a, b);
}

// An engine that is stopping still finishes the loop iteration its stop command runs in, QPs, completions and all.
// A command refused meanwhile ("not running") is what callers take as "the engine is inert" (a QP's destruction then
// frees its queues, a CQ resize frees the old ring): so the refusal waits until the engine has really stopped.
TEST(RcLoopbackOps, ACommandRefusedByAStoppingEngineReturnsOnlyOnceItStopped) {
  RcWorld world(loopback_config());
  ASSERT_TRUE(world.ok()) << world.error();
  Engine& engine = world.dataplane().engine(0);
  EngineHold hold(engine);
  ASSERT_TRUE(hold.holding());
  std::thread stopper([&] { (void)engine.stop(); });
  // The stop command is queued behind the hold, and the engine is stopping from then on.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::atomic<bool> refused{false};
  std::thread poster([&] {
    EXPECT_FALSE(engine.call([](EngineContext&) {}).ok());
    refused.store(true);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const bool refused_while_running = refused.load();
  hold.release();
  stopper.join();
  poster.join();
  EXPECT_FALSE(refused_while_running) << "refused while the engine still ran its loop";
}

// IBTA 10.6.7: once an invalidation completes, the memory is the consumer's again and the peer reaches it no more.
// A QP of the same PD on another engine may be placing a packet into that memory at that moment, through the key
// it resolved just before; the invalidation's completion waits until that engine has finished its packet. Here the
// other engine is held inside a loop iteration while a LOCAL_INV, and then a peer's Send with Invalidate, invalidate
// a region it wrote into: neither completes until it is let go. (Without the wait both completed at once.)
TEST(RcLoopbackOps, AnInvalidationCompletesOnlyWhenNoOtherEngineIsInsideAPacketForTheMemory) {
  RcWorld world(loopback_config());
  ASSERT_TRUE(world.ok()) << world.error();
  ASSERT_EQ(world.dataplane().engine_count(), 2);
  // Plain pointers, not structured bindings: the lambdas below capture them (clang before 16 cannot).
  const auto ab = world.connected_pair(1024);         // A on engine 0, B on engine 1; every player is in PD 1
  const auto cd = world.connected_pair(1024, {}, 1);  // both on engine 1
  Player* const a = ab.first;
  Player* const b = ab.second;
  Player* const c = cd.first;
  Player* const d = cd.second;
  ASSERT_TRUE(a && b && c && d) << world.error();
  const auto next_key = [](uint32_t token) { return (token & ~0xFFU) | ((token + 1) & 0xFFU); };
  auto reserved = world.transport().reserve_memory(MemoryKind::kFastRegisterRegion, 1);
  ASSERT_TRUE(reserved.ok()) << reserved.error();
  std::vector<uint8_t> memory(8192, 0);
  const auto region_addr = reinterpret_cast<uint64_t>(memory.data());
  uint32_t token = reserved.value();
  // A fast-registers the region for remote writes (on engine 0), and `writer` WRITEs 64 bytes into it, so that the
  // engine of `writer`'s peer resolves the key.
  const auto register_and_write_through = [&](Player* writer, uint64_t context) {
    token = next_key(token);
    proto::SendWqe fr;
    fr.context = context;
    fr.op = WorkOp::kFastRegister;
    fr.flags = proto::kWqeSignaled;
    fr.memory = {region_addr, memory.size(), token, 0, proto::kAccessLocalWrite | proto::kAccessRemoteWrite, 0};
    a->post(fr);
    ASSERT_TRUE(a->wait_send_successes(1));
    proto::SendWqe w = writer->send(WorkOp::kRdmaWrite, 0, 64, context + 1);
    w.remote_addr = region_addr;
    w.rkey = proto::RemoteToken{token};
    writer->post(w);
    ASSERT_TRUE(writer->wait_send_successes(1));
    ASSERT_EQ(std::memcmp(memory.data(), writer->buffer.data(), 64), 0);
  };
  const auto waits = [&](EngineId e) { return world.dataplane().engine(e).counters().invalidation_waits.read(); };

  // Posts with `post` while engine `held` is inside an iteration: `poll` finds nothing for 200 ms, and once the engine
  // is let go `wait` returns the completion.
  const auto completion_after_hold = [&](EngineId held, const auto& post, const auto& poll, const auto& wait) {
    EngineHold hold(world.dataplane().engine(held));
    EXPECT_TRUE(hold.holding());
    post();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_FALSE(poll()) << "the invalidation completed while engine " << held << " could still use the memory";
    hold.release();
    return wait();
  };

  // LOCAL_INV on engine 0 while engine 1, which placed A's WRITE, is held.
  register_and_write_through(a, 10);
  proto::SendWqe inv;
  inv.context = 20;
  inv.op = WorkOp::kLocalInvalidate;
  inv.flags = proto::kWqeSignaled;
  inv.memory.token = token;
  const auto done = completion_after_hold(
      1, [&] { a->post(inv); }, [&] { return a->poll_send(); }, [&] { return a->wait_send_completion(); });
  ASSERT_TRUE(done);
  EXPECT_EQ(done->status, CompletionStatus::kSuccess);
  EXPECT_EQ(done->context, 20U);
  EXPECT_EQ(waits(0), 1U);

  // A peer's Send with Invalidate, C -> D on engine 1, while engine 0, which placed B's WRITE, is held.
  register_and_write_through(b, 30);
  d->post_receive(d->buffer.data(), 64, 40);
  proto::SendWqe send = c->send(WorkOp::kSendWithInvalidate, 0, 8, 41);
  send.invalidate_rkey = proto::RemoteToken{token};
  const auto received = completion_after_hold(
      0, [&] { c->post(send); }, [&] { return d->poll_receive(); }, [&] { return d->wait_receive_completion(); });
  ASSERT_TRUE(received);
  EXPECT_EQ(received->status, CompletionStatus::kSuccess);
  EXPECT_EQ(received->op, WorkOp::kSendWithInvalidate);
  EXPECT_EQ(received->invalidated_rkey.value(), token);
  ASSERT_TRUE(c->wait_send_successes(1));
  EXPECT_EQ(waits(1), 1U);

  // The key is invalid for every engine now: B's WRITE through it fails.
  proto::SendWqe late = b->send(WorkOp::kRdmaWrite, 0, 64, 50);
  late.remote_addr = region_addr;
  late.rkey = proto::RemoteToken{token};
  b->post(late);
  const auto failed = b->wait_send_completion();
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->status, CompletionStatus::kRemoteAccessError);
  world.destroy(a, b);
  world.destroy(c, d);
  EXPECT_TRUE(world.transport().deregister_memory(token).ok());
}

}  // namespace
}  // namespace uroce::dataplane::testing
