// The lock-free pieces without EAL, so ThreadSanitizer can watch them: the CQ's slices with their arm state
// (the arm-merge table and the append/arm handshake), the MPSC notification queue, the notifier's per-target
// serialisation, the SPSC work queues and the shared memory table's seqlocks. The stress tests run real
// threads against each other; a lost wake-up shows as a consumer that never hears of its completions.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "api/completion_slices.h"
#include "api/notification_queue.h"
#include "api/notifier.h"
#include "dataplane/memory_table.h"
#include "dataplane/work_queues.h"

namespace uroce::ndk::detail {
namespace {

using dataplane::ArmLevel;
using proto::Completion;
using proto::CompletionStatus;

struct CountingNotifier final : dataplane::EventNotifier {
  std::atomic<int> count{0};
  void notify(void*) noexcept override { count.fetch_add(1, std::memory_order_acq_rel); }
};

Completion completion(uint64_t context, bool solicited = false, bool error = false) {
  Completion c;
  c.context = context;
  if (solicited) c.flags = proto::kCompletionSolicited;
  if (error) c.status = CompletionStatus::kRemoteAccessError;
  return c;
}

std::vector<uint64_t> consume_all(CompletionSlices& cq) {
  std::vector<uint64_t> seen;
  while (cq.consume(1000, [&](const dataplane::CompletionEntry& e) { seen.push_back(e.completion.context); }) != 0) {
  }
  return seen;
}

TEST(CompletionSlices, EachSliceStaysInOrderAndSlicesAreDrainedInTurn) {
  CompletionSlices cq(8, 2, nullptr, nullptr);
  EXPECT_EQ(cq.ring(0).capacity(), 8u);
  for (uint64_t i = 0; i < 4; ++i) {
    ASSERT_TRUE(cq.ring(0).push(completion(i), 1, false));
    ASSERT_TRUE(cq.ring(1).push(completion(100 + i), 2, false));
  }
  EXPECT_EQ(cq.queued(), 8u);
  std::vector<uint64_t> first;
  EXPECT_EQ(cq.consume(3, [&](const dataplane::CompletionEntry& e) { first.push_back(e.completion.context); }), 3u);
  EXPECT_EQ(first, (std::vector<uint64_t>{0, 1, 2}));
  std::vector<uint64_t> rest = consume_all(cq);
  EXPECT_EQ(rest.front(), 100u) << "the next call starts at the next slice";
  EXPECT_EQ(rest.size(), 5u);
}

// ndkpi.md §10.2, both arms before anything fires, for every kind of completion.
TEST(CompletionSlices, TheArmMergeTable) {
  constexpr ArmLevel E = ArmLevel::kErrors, A = ArmLevel::kAny, S = ArmLevel::kSolicited;
  const ArmLevel levels[3] = {E, A, S};
  const ArmLevel table[3][3] = {{E, A, S}, {A, A, A}, {S, A, S}};  // [first][second], as printed in §10.2
  for (int f = 0; f < 3; ++f) {
    for (int s = 0; s < 3; ++s) {
      const ArmLevel merged = table[f][s];
      // event 0: ordinary, 1: solicited receive, 2: error completion, 3: overrun
      for (int event = 0; event < 4; ++event) {
        CountingNotifier n;
        CompletionSlices cq(2, 1, &n, nullptr);
        cq.arm(levels[f]);
        cq.arm(levels[s]);
        EXPECT_EQ(cq.events().armed(), merged);
        if (event == 3) {
          for (int i = 0; i < 3; ++i) (void)cq.ring(0).push(completion(i), 1, false);  // the third overruns
        } else {
          ASSERT_TRUE(cq.ring(0).push(completion(1, event == 1, event == 2), 1, true));
        }
        const bool fires = event == 3 || (event == 0 ? merged == A : merged != E);
        EXPECT_EQ(n.count.load(), fires ? 1 : 0) << "arms " << f << "," << s << " event " << event;
        EXPECT_EQ(cq.events().armed(), fires ? ArmLevel::kNone : merged) << "a fired arm is cleared";
      }
    }
  }
}

TEST(CompletionSlices, ArmingWithCompletionsQueuedFiresAtOnceIfOneMatches) {
  CountingNotifier n;
  CompletionSlices cq(8, 2, &n, nullptr);
  ASSERT_TRUE(cq.ring(1).push(completion(1), 1, true));
  cq.arm(ArmLevel::kErrors);
  cq.arm(ArmLevel::kSolicited);
  EXPECT_EQ(n.count.load(), 0) << "an ordinary completion does not satisfy SOLICITED";
  ASSERT_TRUE(cq.ring(0).push(completion(2, true), 1, true));  // satisfies the pending SOLICITED arm
  EXPECT_EQ(n.count.load(), 1);
  cq.arm(ArmLevel::kSolicited);  // the solicited one is still queued
  EXPECT_EQ(n.count.load(), 2);
  cq.arm(ArmLevel::kAny);
  EXPECT_EQ(n.count.load(), 3);
  (void)consume_all(cq);
  cq.arm(ArmLevel::kAny);
  EXPECT_EQ(n.count.load(), 3) << "nothing queued: wait for the next completion";
  ASSERT_TRUE(cq.ring(1).push(completion(3), 1, false));
  EXPECT_EQ(n.count.load(), 4);
  ASSERT_TRUE(cq.ring(1).push(completion(4), 1, false));
  EXPECT_EQ(n.count.load(), 4) << "one notification per arm";
}

// The engine's way (push_deferring_events): the handshake waits for publish_events(), once for everything appended
// since, at the weakest level any of it needs.
TEST(CompletionSlices, AnEngineOwesTheArmHandshakeUntilItPublishesAtTheWeakestLevelOwed) {
  using Deferred = dataplane::CompletionQueue::Deferred;
  CountingNotifier n;
  CompletionSlices cq(8, 1, &n, nullptr);
  dataplane::CompletionQueue& ring = cq.ring(0);
  cq.arm(ArmLevel::kSolicited);
  EXPECT_EQ(ring.push_deferring_events(completion(1), 1, true, 0), Deferred::kFirstOwed);
  EXPECT_EQ(ring.push_deferring_events(completion(2, false, true), 1, false, 0), Deferred::kAppended);
  EXPECT_EQ(n.count.load(), 0) << "nothing fires before the engine publishes";
  ring.publish_events();
  EXPECT_EQ(n.count.load(), 1) << "the error among what was owed satisfies SOLICITED";
  ring.publish_events();
  EXPECT_EQ(n.count.load(), 1) << "nothing owed any more";
  EXPECT_EQ(consume_all(cq), (std::vector<uint64_t>{1, 2}));

  cq.arm(ArmLevel::kSolicited);
  EXPECT_EQ(ring.push_deferring_events(completion(3), 1, true, 0), Deferred::kFirstOwed);
  ring.publish_events();
  EXPECT_EQ(n.count.load(), 1) << "an ordinary completion does not satisfy SOLICITED";
  cq.arm(ArmLevel::kAny);  // it is still queued: fires at once, as with push()
  EXPECT_EQ(n.count.load(), 2);
  (void)consume_all(cq);

  // An arm between the append and the publish: the entry is visible, so the arm fires at once; the publish then
  // finds the arm already cleared and fires nothing more (one notification per arm).
  EXPECT_EQ(ring.push_deferring_events(completion(4), 1, true, 0), Deferred::kFirstOwed);
  cq.arm(ArmLevel::kAny);
  EXPECT_EQ(n.count.load(), 3);
  ring.publish_events();
  EXPECT_EQ(n.count.load(), 3);
}

TEST(CompletionSlices, AnOverrunFailsTheCqAndKeepsWhatWasQueued) {
  CountingNotifier n;
  CompletionSlices cq(2, 1, &n, nullptr);
  ASSERT_TRUE(cq.ring(0).push(completion(1), 1, false));
  ASSERT_TRUE(cq.ring(0).push(completion(2), 1, false));
  EXPECT_FALSE(cq.ring(0).push(completion(3), 1, false));
  EXPECT_TRUE(cq.failed());
  EXPECT_EQ(n.count.load(), 0) << "not armed";
  cq.arm(ArmLevel::kErrors);
  EXPECT_EQ(n.count.load(), 1) << "an overrun satisfies every arm, even one made later";
  EXPECT_EQ(consume_all(cq), (std::vector<uint64_t>{1, 2}));
  EXPECT_FALSE(cq.ring(0).push(completion(4), 1, false)) << "a failed CQ takes nothing more";
  EXPECT_TRUE(consume_all(cq).empty());
}

// A resize's new ring is read only once the old one is sealed (its producers switched) and drained: before the
// seal the old ring may still take entries older than the new ring's.
TEST(CompletionSlices, AResizeDrainsTheOldRingsFirstAndWaitsForTheirSeal) {
  CompletionSlices cq(4, 1, nullptr, nullptr);
  dataplane::CompletionQueue* old = &cq.ring(0);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(old->push(completion(i), 1, false));
  EXPECT_EQ(consume_all(cq), (std::vector<uint64_t>{0, 1, 2}));
  ASSERT_TRUE(old->push(completion(3), 1, false));
  auto switched = std::make_shared<std::atomic<bool>>(false);
  auto rings = cq.make_rings(64);
  dataplane::CompletionQueue* fresh = rings[0].get();
  std::vector<CompletionSlices::Seal> seals(1);
  seals[0] = {switched.get(), switched};
  cq.replace_rings(std::move(rings), std::move(seals));
  EXPECT_EQ(&cq.ring(0), fresh) << "new QPs go to the newest ring at once";
  ASSERT_TRUE(fresh->push(completion(5), 1, false));  // one producer switched already...
  ASSERT_TRUE(old->push(completion(4), 1, false));    // ...another had not
  EXPECT_EQ(cq.queued(), 3u);
  EXPECT_EQ(consume_all(cq), (std::vector<uint64_t>{3, 4})) << "the new ring waits for the old one's seal";
  ASSERT_TRUE(old->push(completion(6), 1, false));  // still before the switch
  switched->store(true, std::memory_order_release);
  EXPECT_EQ(consume_all(cq), (std::vector<uint64_t>{6, 5}));
  ASSERT_TRUE(fresh->push(completion(7), 1, false));
  EXPECT_EQ(consume_all(cq), (std::vector<uint64_t>{7}));
  EXPECT_EQ(cq.queued(), 0u);
}

// Resizes from a control thread while two producers append and the consumer polls, none of them pausing
// (ndkpi.md §9.2: a resize never needs the consumer quiesced). Each producer switches to the newest ring at
// random moments, as an engine does between two loop iterations, and seals the one it left. Every completion
// arrives once, in order per producer.
TEST(CompletionSlicesStress, ResizesWhileProducersAppendAndTheConsumerPolls) {
  constexpr uint64_t kPerProducer = 12000;  // fewer than a ring holds: a full ring is an overrun, fatal by design
  constexpr unsigned kResizes = 200;
  CompletionSlices cq(1u << 15, 2, nullptr, nullptr);
  std::mutex attach;  // CqImpl's attach mutex: resizes and ring() lookups
  struct Switch {
    std::atomic<bool> done{false};
    dataplane::CompletionQueue* to = nullptr;
  };
  std::vector<std::shared_ptr<Switch>> switches[2];  // [slice], in resize order; guarded by `attach`
  std::atomic<bool> resizing{true};
  std::vector<std::thread> threads;
  for (unsigned slice = 0; slice < 2; ++slice) {
    threads.emplace_back([&, slice] {
      dataplane::CompletionQueue* ring = nullptr;
      {
        const std::lock_guard lock(attach);
        ring = &cq.ring(slice);
      }
      std::size_t next_switch = 0;
      std::minstd_rand random(slice + 1);
      for (uint64_t i = 0; i < kPerProducer; ++i) {
        if (random() % 64 == 0) {  // between two "loop iterations": take the switches queued so far
          const std::lock_guard lock(attach);
          for (; next_switch < switches[slice].size(); ++next_switch) {
            ring = switches[slice][next_switch]->to;
            switches[slice][next_switch]->done.store(true, std::memory_order_release);
          }
        }
        EXPECT_TRUE(ring->push(completion(i), 1, false, slice));
        if (i % 1024 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));  // resizes land mid-stream
      }
      // Resizes after the last append switch nobody; seal them so the consumer can move on.
      while (resizing.load()) {
        const std::lock_guard lock(attach);
        for (; next_switch < switches[slice].size(); ++next_switch)
          switches[slice][next_switch]->done.store(true, std::memory_order_release);
      }
      const std::lock_guard lock(attach);
      for (; next_switch < switches[slice].size(); ++next_switch)
        switches[slice][next_switch]->done.store(true, std::memory_order_release);
    });
  }
  threads.emplace_back([&] {
    for (unsigned r = 0; r < kResizes; ++r) {
      {
        const std::lock_guard lock(attach);
        auto rings = cq.make_rings(r % 2 == 0 ? 1u << 15 : 1u << 14);
        std::vector<CompletionSlices::Seal> seals(2);
        for (unsigned s = 0; s < 2; ++s) {
          auto sw = std::make_shared<Switch>();
          sw->to = rings[s].get();
          seals[s] = {&sw->done, sw};
          switches[s].push_back(sw);
        }
        cq.replace_rings(std::move(rings), std::move(seals));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    resizing.store(false);
  });
  uint64_t next[2] = {0, 0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (next[0] + next[1] < 2 * kPerProducer) {
    (void)cq.consume(256, [&](const dataplane::CompletionEntry& e) {
      EXPECT_EQ(e.completion.context, next[e.qp_context]) << "slice " << e.qp_context;
      ++next[e.qp_context];
    });
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "stuck after " << next[0] + next[1];
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(cq.queued(), 0u);
}

// Two engines append to their slices while the consumer polls, and when it finds nothing arms ANY and waits
// for the notification. If the append/arm handshake ever lost a wake-up, the consumer would wait forever.
// Producers append with push(), or the engine's way (push_deferring_events, published every 8 appends and after
// the last, as an engine does at the end of each loop iteration).
void expect_no_lost_completion_or_wake_up(bool deferred) {
  constexpr uint32_t kPerProducer = 60000;
  CountingNotifier n;
  CompletionSlices cq(1u << 17, 2, &n, nullptr);  // never full: an overrun is fatal by design
  std::atomic<bool> go{false};
  std::vector<std::thread> producers;
  for (unsigned slice = 0; slice < 2; ++slice) {
    producers.emplace_back([&, slice] {
      while (!go.load()) std::this_thread::yield();
      for (uint32_t i = 0; i < kPerProducer; ++i) {
        const Completion c = completion(i, i % 7 == 0, false);
        if (deferred) {
          EXPECT_NE(cq.ring(slice).push_deferring_events(c, 1, true, slice),
                    dataplane::CompletionQueue::Deferred::kRefused);
          if (i % 8 == 7 || i + 1 == kPerProducer) cq.ring(slice).publish_events();
        } else {
          EXPECT_TRUE(cq.ring(slice).push(c, 1, true, slice));
        }
        if (i % 4096 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));  // let the consumer sleep
      }
    });
  }
  go.store(true);
  uint64_t next[2] = {0, 0};
  int arms = 0;
  int waits_for_notification = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (next[0] + next[1] < 2ull * kPerProducer) {
    const uint32_t got = cq.consume(256, [&](const dataplane::CompletionEntry& e) {
      EXPECT_EQ(e.completion.context, next[e.qp_context]) << "slice " << e.qp_context;
      ++next[e.qp_context];
    });
    if (got != 0) continue;
    const int before = n.count.load();
    cq.arm(ArmLevel::kAny);
    ++arms;
    while (n.count.load() == before) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "lost wake-up after " << next[0] + next[1];
      std::this_thread::yield();
    }
    ++waits_for_notification;
  }
  for (auto& t : producers) t.join();
  EXPECT_LE(n.count.load(), arms) << "at most one notification per arm";
  EXPECT_GT(waits_for_notification, 0);
}

TEST(CompletionSlicesStress, NoCompletionIsLostAndNoWakeUpIsMissed) { expect_no_lost_completion_or_wake_up(false); }

TEST(CompletionSlicesStress, NoWakeUpIsMissedWhenTheEngineDefersTheHandshake) {
  expect_no_lost_completion_or_wake_up(true);
}

TEST(NotificationQueue, ManyProducersOneConsumerEachValueOnceInProducerOrder) {
  constexpr uint32_t kProducers = 4;
  constexpr uint32_t kEach = 50000;
  NotificationQueue<uint64_t> q(256);
  std::vector<std::thread> producers;
  for (uint32_t p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (uint32_t i = 0; i < kEach; ++i)
        while (!q.push(uint64_t{p} << 32 | i)) std::this_thread::yield();  // full: the consumer catches up
    });
  }
  std::vector<uint32_t> next(kProducers, 0);
  for (uint64_t total = 0; total < uint64_t{kProducers} * kEach;) {
    const auto v = q.pop();
    if (!v) continue;
    const auto p = static_cast<uint32_t>(*v >> 32);
    ASSERT_EQ(static_cast<uint32_t>(*v), next[p]) << "producer " << p;
    ++next[p];
    ++total;
  }
  for (auto& t : producers) t.join();
  EXPECT_FALSE(q.pop().has_value());
}

std::atomic<int> targets_running{0};  // deliveries in progress, over all targets
std::atomic<int> both_running{0};     // deliveries that started while another target's was running

struct SerialTarget final : Notifiable {
  std::atomic<int> running{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> delivered{0};
  std::atomic<int> references{0};
  void deliver_notification() noexcept override {
    if (running.fetch_add(1) != 0) overlaps.fetch_add(1);
    if (targets_running.fetch_add(1) != 0) both_running.fetch_add(1);
    std::this_thread::sleep_for(std::chrono::microseconds(20));  // long enough for the two targets to overlap
    delivered.fetch_add(1);
    targets_running.fetch_sub(1);
    running.fetch_sub(1);
  }
  void retain_for_delivery() noexcept override { references.fetch_add(1); }
  void release_after_delivery() noexcept override { references.fetch_sub(1); }
  void fail_fatally() noexcept override {}
  bool retain_if_alive() noexcept override {
    retain_for_delivery();
    return true;
  }
};

TEST(Notifier, DeliversEveryNotificationSerialisedPerTargetOffTheCallersThreads) {
  constexpr int kThreads = 4;
  constexpr int kEach = 1000;
  Notifier notifier(64);
  SerialTarget targets[2];
  std::vector<std::thread> threads;
  threads.reserve(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) notifier.notify(&targets[(t + i) % 2]);
    });
  }
  for (auto& t : threads) t.join();
  notifier.wait_idle();
  int total = 0;
  EXPECT_GT(both_running.load(), 0) << "the two targets' deliveries never overlapped: nothing was tested";
  for (SerialTarget& target : targets) {
    EXPECT_EQ(target.overlaps.load(), 0);
    EXPECT_EQ(target.running.load(), 0);
    total += target.delivered.load();
  }
  EXPECT_EQ(total, kThreads * kEach) << "one delivery per notify";
  std::atomic<bool> ran{false};
  notifier.run([&] { ran.store(true); });
  notifier.stop();
  EXPECT_TRUE(ran.load()) << "stop() waits for every task";
  for (SerialTarget& target : targets) EXPECT_EQ(target.references.load(), 0) << "every reference returned";
}

TEST(SendQueue, TheDoorbellPublishesTheWqeBytes) {
  constexpr uint32_t kCount = 200000;
  dataplane::SendQueue sq(64);
  std::thread engine([&] {
    uint32_t head = 0;
    while (head < kCount) {
      const uint32_t tail = sq.tail();
      for (; head != tail; ++head) {
        const proto::SendWqe& w = sq.slot(head);
        ASSERT_EQ(w.context, head);
        ASSERT_EQ(w.length, head * 3);
      }
      sq.publish_head(head);
    }
  });
  for (uint32_t i = 0; i < kCount; ++i) {
    while (sq.full()) std::this_thread::yield();
    proto::SendWqe& w = sq.slot(i);
    w.context = i;
    w.length = i * 3;
    sq.publish_tail(i + 1);
  }
  engine.join();
}

// Engines resolve a fast-register key while another engine registers and invalidates it and a control thread
// registers and deregisters another slot: a reader gets either nothing or a whole, current region.
TEST(MemoryTable, ReadersNeverSeeATornRegion) {
  dataplane::MemoryTable table(16);
  constexpr uint32_t kPd = 3;
  static uint8_t memory[2][4096];
  const auto a = reinterpret_cast<uint64_t>(memory[0]);
  const auto b = reinterpret_cast<uint64_t>(memory[1]);
  dataplane::MemoryRegion fr;
  fr.pd = kPd;
  fr.token = 1u << 8;
  fr.kind = dataplane::MemoryKind::kFastRegisterRegion;
  fr.valid = false;
  table.insert(fr);
  std::atomic<uint32_t> current{0};  // the token readers should try now
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    uint32_t token = fr.token;
    for (int i = 0; i < 20000; ++i) {
      token = (token & ~0xFFu) | ((token + 1) & 0xFFu);
      const bool even = i % 2 == 0;
      ASSERT_TRUE(table.fast_register(token, even ? a : b, even ? 4096 : 2048, proto::kAccessRemoteWrite, kPd));
      current.store(token);
      ASSERT_TRUE(table.invalidate_local(token, {kPd, 0}));
      ASSERT_FALSE(table.invalidate_local(token, {kPd, 0})) << "already invalid";
    }
    stop.store(true);
  });
  std::thread control([&] {
    dataplane::MemoryRegion r;
    r.addr = a;
    r.length = 4096;
    r.pd = kPd;
    r.access = proto::kAccessRemoteRead;
    for (uint32_t i = 0; !stop.load(); ++i) {
      r.token = 2u << 8 | (i & 0xFF);
      table.insert(r);
      EXPECT_NE(table.resolve(r.token, a, 64, proto::kAccessRemoteRead, {kPd, 0}), nullptr);
      table.erase(r.token);
    }
  });
  uint64_t hits = 0;
  std::vector<std::thread> readers;
  readers.reserve(2);
  std::atomic<uint64_t> total_hits{0};
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      uint64_t mine = 0;
      while (!stop.load()) {
        const uint32_t token = current.load();
        if (token == 0) continue;
        // Asking for 4096 bytes at b must always fail: b's registrations are 2048 bytes long.
        EXPECT_EQ(table.resolve(token, b, 4096, proto::kAccessRemoteWrite, {kPd, 0}), nullptr);
        if (uint8_t* p = table.resolve(token, a, 4096, proto::kAccessRemoteWrite, {kPd, 0})) {
          EXPECT_EQ(reinterpret_cast<uint64_t>(p), a);
          ++mine;
        }
        EXPECT_EQ(table.resolve(token, a, 64, proto::kAccessRemoteWrite, {kPd + 1, 0}), nullptr) << "other PD";
      }
      total_hits.fetch_add(mine);
    });
  }
  writer.join();
  control.join();
  for (auto& t : readers) t.join();
  hits = total_hits.load();
  RecordProperty("hits", static_cast<int>(hits));
}

}  // namespace
}  // namespace uroce::ndk::detail
