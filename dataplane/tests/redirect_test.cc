// Steering: every packet arrives on engine 0's queue (the sender uses queue 0, as a PMD without BTH steering
// would), and packets for engine 1's QPs reach engine 1 through its redirect ring.
#include <gtest/gtest.h>

#include <atomic>
#include <string>

#include <rte_lcore.h>

#include "dataplane/eal.h"
#include "loopback_fixture.h"

namespace uroce::dataplane::testing {
namespace {

using proto::Opcode;

class RedirectTest : public LoopbackTest {};

TEST_F(RedirectTest, PacketsForAnotherEnginesQpAreRedirectedAndDeliveredInOrder) {
  Dataplane& dp = start(loopback_config());
  RecordingEndpoint on_engine0;
  RecordingEndpoint on_engine1;
  const proto::Qpn qp0 = make_qpn(0, 7);
  const proto::Qpn qp1 = make_qpn(1, 7);
  ASSERT_TRUE(dp.engine(0).register_qp(qp0, on_engine0.endpoint()).ok());
  ASSERT_TRUE(dp.engine(1).register_qp(qp1, on_engine1.endpoint()).ok());

  constexpr uint64_t kPackets = 2000;
  const uint8_t payload[64] = {1, 2, 3};
  FrameGenerator traffic(kPortA, kPackets, [&](uint64_t i, std::span<uint8_t> out) {
    const proto::Qpn qpn = i % 2 == 0 ? qp0 : qp1;
    return proto::build_packet(
        roce_spec(dp, kPortA, kPortB, qpn, Opcode::kRcSendOnly, static_cast<uint32_t>(i / 2), payload), out);
  });
  run_generator(dp.engine(0), traffic);
  ASSERT_TRUE(eventually([&] { return on_engine0.count() + on_engine1.count() == kPackets; }))
      << on_engine0.count() << " + " << on_engine1.count();

  for (const auto& [endpoint, engine] : {std::pair{&on_engine0, 0}, std::pair{&on_engine1, 1}}) {
    const auto packets = endpoint->packets();
    ASSERT_EQ(packets.size(), kPackets / 2);
    for (std::size_t i = 0; i < packets.size(); ++i) {
      EXPECT_EQ(packets[i].engine, engine);
      EXPECT_EQ(packets[i].lcore, engine_lcore(static_cast<EngineId>(engine)));
      EXPECT_EQ(packets[i].psn, i) << "reordered on engine " << engine;  // SPSC rings keep order
      EXPECT_EQ(packets[i].port, kPortB);
    }
  }
  EXPECT_EQ(counter(0, "redirect_enqueued"), kPackets / 2);
  EXPECT_EQ(counter(1, "redirect_received"), kPackets / 2);
  EXPECT_EQ(counter(0, "redirect_ring_full"), 0u);
  EXPECT_EQ(counter(0, "rx_packets"), kPackets);  // all arrived on engine 0's queue
  EXPECT_EQ(counter(1, "rx_packets"), 0u);
  EXPECT_EQ(counter(0, "rx_delivered"), kPackets / 2);
  EXPECT_EQ(counter(1, "rx_delivered"), kPackets / 2);
  EXPECT_EQ(counter(0, "tx_packets"), kPackets);
  EXPECT_EQ(dp.port_counter_values(kPortA)[2].second, kPackets);  // tx_packets of port a
}

TEST_F(RedirectTest, GsiBelongsToEngineZeroAndUnknownQpsAreCounted) {
  Dataplane& dp = start(loopback_config());
  RecordingEndpoint gsi;
  ASSERT_TRUE(dp.engine(0).register_qp(proto::kGsiQpn, gsi.endpoint()).ok());
  const proto::Qpn targets[] = {
      proto::kGsiQpn, make_qpn(1, 200),  // engine 1, nothing registered: counted there after the redirect
      make_qpn(5, 1),                    // no engine 5: counted on the receiving engine
      make_qpn(0, 256 + 1),              // the GSI's slot of the 256 (qpn.h) in another generation: not QPN 1
  };
  FrameGenerator traffic(kPortA, 4, [&](uint64_t i, std::span<uint8_t> out) {
    return proto::build_packet(roce_spec(dp, kPortA, kPortB, targets[i], Opcode::kRcSendOnly, 0), out);
  });
  run_generator(dp.engine(0), traffic);
  EXPECT_TRUE(eventually([&] { return counter(0, "rx_unknown_qp") == 2 && counter(1, "rx_unknown_qp") == 1; }));
  EXPECT_EQ(gsi.count(), 1u);
}

// Pollers run in the order they were added, except that those with after_others (the RC transport's) run after
// every other one, however pollers come and go; EngineContext::running_here() names the engine inside them.
TEST_F(RedirectTest, PollersRunInOrderWithAfterOthersLast) {
  Dataplane& dp = start(loopback_config());
  struct Recorder {
    char name;
    std::string* order;
    std::atomic<bool>* recording;
    std::atomic<bool> on_its_engine{true};
    static bool poll(void* self, EngineContext& ctx) {
      auto& r = *static_cast<Recorder*>(self);
      if (EngineContext::running_here() != &ctx) r.on_its_engine = false;
      if (r.recording->load()) r.order->push_back(r.name);
      return false;
    }
  };
  std::string order;  // written only on engine 0, read after the recording stops (Engine::call orders both)
  std::atomic<bool> recording{false};
  Recorder a{'a', &order, &recording}, last{'z', &order, &recording}, b{'b', &order, &recording},
      c{'c', &order, &recording};
  Engine& engine = dp.engine(0);
  ASSERT_TRUE(engine.add_poller(Poller{&Recorder::poll, &a}).ok());
  ASSERT_TRUE(engine.add_poller(Poller{.poll = &Recorder::poll, .self = &last, .after_others = true}).ok());
  ASSERT_TRUE(engine.add_poller(Poller{&Recorder::poll, &b}).ok());
  ASSERT_TRUE(engine.add_poller(Poller{&Recorder::poll, &c}).ok());
  ASSERT_TRUE(engine.remove_poller(&a).ok());  // from the front: the others keep their order
  auto run_iterations = [&] {
    ASSERT_TRUE(engine
                    .call([&](EngineContext&) {
                      order.clear();
                      recording = true;
                    })
                    .ok());
    ASSERT_TRUE(engine.call([&](EngineContext&) { recording = false; }).ok());
  };
  // Whole loop iterations ran between the two commands (commands run at the start of an iteration), each
  // calling the pollers once in the same order.
  auto each_iteration_ran = [&](const std::string& pattern) {
    if (order.empty() || order.size() % pattern.size() != 0) return false;
    for (std::size_t i = 0; i < order.size(); i += pattern.size())
      if (order.compare(i, pattern.size(), pattern) != 0) return false;
    return true;
  };
  run_iterations();
  EXPECT_TRUE(each_iteration_ran("bcz")) << order;
  ASSERT_TRUE(engine.add_poller(Poller{&Recorder::poll, &a}).ok());
  run_iterations();
  EXPECT_TRUE(each_iteration_ran("bcaz")) << order;
  for (Recorder* r : {&b, &c, &a, &last}) {
    EXPECT_TRUE(r->on_its_engine) << r->name;
    ASSERT_TRUE(engine.remove_poller(r).ok());
  }
  EXPECT_EQ(EngineContext::running_here(), nullptr) << "the test's thread is no engine";
}

TEST_F(RedirectTest, RegistrationIsCheckedOnTheControlPath) {
  Dataplane& dp = start(loopback_config());
  RecordingEndpoint endpoint;
  EXPECT_FALSE(dp.engine(0).register_qp(make_qpn(1, 3), endpoint.endpoint()).ok());  // engine 1's QPN
  EXPECT_FALSE(dp.engine(1).register_qp(make_qpn(1, 3), QpEndpoint{}).ok());         // no handler
  ASSERT_TRUE(dp.engine(1).register_qp(make_qpn(1, 3), endpoint.endpoint()).ok());
  EXPECT_FALSE(dp.engine(1).register_qp(make_qpn(1, 3), endpoint.endpoint()).ok());  // taken
  // A table of 256 slots (qpn.h): local index 256 + 3 is slot 3 in its next generation.
  EXPECT_FALSE(dp.engine(1).register_qp(make_qpn(1, 256 + 3), endpoint.endpoint()).ok());  // the slot is taken
  EXPECT_FALSE(dp.engine(1).unregister_qp(make_qpn(1, 256 + 3)).ok());  // not the number registered there
  ASSERT_TRUE(dp.engine(1).unregister_qp(make_qpn(1, 3)).ok());
  EXPECT_FALSE(dp.engine(1).unregister_qp(make_qpn(1, 3)).ok());  // not registered any more
  EXPECT_TRUE(dp.engine(1).register_qp(make_qpn(1, 256 + 3), endpoint.endpoint()).ok());
  EXPECT_FALSE(dp.engine(0).remove_poller(&endpoint).ok());

  // Engines never block on commands, not even to another engine.
  Status from_engine;
  ASSERT_TRUE(dp.engine(0).call([&](EngineContext&) { from_engine = dp.engine(1).call([](EngineContext&) {}); }).ok());
  EXPECT_FALSE(from_engine.ok());

  // Only one Dataplane at a time, and a stopped engine refuses commands.
  EXPECT_FALSE(Dataplane::start(loopback_config()).ok());
  dp.stop();
  EXPECT_FALSE(dp.engine(0).register_qp(make_qpn(0, 9), endpoint.endpoint()).ok());
  auto again = Dataplane::start(loopback_config());
  EXPECT_TRUE(again.ok()) << again.error();
}

TEST_F(RedirectTest, TimersFireOnTheOwningEngine) {
  Dataplane& dp = start(loopback_config());
  struct Probe {
    std::atomic<int> fired{0};
    std::atomic<unsigned> lcore{0};
  } probe;
  EngineTimer timer(
      [](EngineTimer& t, EngineContext&) {
        auto* p = static_cast<Probe*>(t.owner());
        p->lcore.store(rte_lcore_id(), std::memory_order_relaxed);
        p->fired.fetch_add(1, std::memory_order_release);
      },
      &probe);
  ASSERT_TRUE(
      dp.engine(1).call([&](EngineContext& ctx) { ctx.timers().schedule_after(timer, ctx.tsc_hz() / 1000); }).ok());
  EXPECT_TRUE(eventually([&] { return probe.fired.load(std::memory_order_acquire) == 1; }));
  EXPECT_EQ(probe.lcore.load(), engine_lcore(1));
  EXPECT_EQ(counter(1, "timers_fired"), 1u);
}

}  // namespace
}  // namespace uroce::dataplane::testing
