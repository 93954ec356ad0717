// CQ notifications end to end (ndkpi.md §10.2, §10.3): the arm-merge table, arming with completions already
// queued, one callback per arm and none without one, solicited events, serialisation under load, and no
// callback after a close completes. "No callback" is checked deterministically: the peer's send completion
// proves our receive completion was appended (and the arm checked) before it, and UroceWaitForNotifier()
// proves every notification handed over by then has been delivered.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <tuple>

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "api/tests/api_players.h"

namespace uroce::ndk::testing {
namespace {

const char* arm_name(uint32_t type) {
  switch (type) {
    case NDK_CQ_NOTIFY_ANY:
      return "Any";
    case NDK_CQ_NOTIFY_ERRORS:
      return "Errors";
    default:
      return "Solicited";
  }
}

// ndkpi.md §10.2, "Second arm before the first fired", written out as the table, not computed.
uint32_t merged(uint32_t first, uint32_t second) {
  constexpr uint32_t A = NDK_CQ_NOTIFY_ANY, E = NDK_CQ_NOTIFY_ERRORS, S = NDK_CQ_NOTIFY_SOLICITED;
  const uint32_t table[3][3] = {
      //        2nd: ERRORS(0) ANY(1) SOLICITED(2)
      /* ERRORS */ {E, A, S},
      /* ANY    */ {A, A, A},
      /* SOLICITED */ {S, A, S},
  };
  return table[first][second];
}

class ArmMerge : public ApiTest, public ::testing::WithParamInterface<std::tuple<uint32_t, uint32_t>> {
 protected:
  // A sends one message to B (solicited or not) and waits for its own completion: by then B's receive
  // completion is in B's CQ and its arm check is done; then every notification handed over is delivered.
  void send_and_settle(Player& a, Player& b, bool solicited) {
    ASSERT_EQ(a.send(0, 32, 1, solicited ? NDK_OP_FLAG_SEND_AND_SOLICIT_EVENT : 0), STATUS_SUCCESS);
    ASSERT_EQ(a.result().Status, STATUS_SUCCESS);
    adapter().UroceWaitForNotifier();
    (void)b;
  }
};

TEST_P(ArmMerge, TheSecondArmMergesAsTheTableSays) {
  const auto [first, second] = GetParam();
  const uint32_t effective = merged(first, second);
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  for (std::size_t i = 0; i < 2; ++i) ASSERT_EQ(b->receive(4096 * i, 64, 10 + i), STATUS_SUCCESS);
  b->cq->NdkArmCq(first);
  b->cq->NdkArmCq(second);

  send_and_settle(*a, *b, false);  // an ordinary completion satisfies only ANY
  EXPECT_EQ(b->notifications.count.load(), effective == NDK_CQ_NOTIFY_ANY ? 1 : 0);
  send_and_settle(*a, *b, true);  // a solicited receive satisfies SOLICITED (ANY has fired already)
  EXPECT_EQ(b->notifications.count.load(), effective == NDK_CQ_NOTIFY_ERRORS ? 0 : 1)
      << "ERRORS is for CQ overrun only; ANY and SOLICITED fire exactly once";
  EXPECT_EQ(b->notifications.last_status.load(), effective == NDK_CQ_NOTIFY_ERRORS ? STATUS_PENDING : STATUS_SUCCESS);
  EXPECT_EQ(b->results(2).size(), 2u);
}

INSTANTIATE_TEST_SUITE_P(
    AllNineCells, ArmMerge,
    ::testing::Combine(::testing::Values(NDK_CQ_NOTIFY_ERRORS, NDK_CQ_NOTIFY_ANY, NDK_CQ_NOTIFY_SOLICITED),
                       ::testing::Values(NDK_CQ_NOTIFY_ERRORS, NDK_CQ_NOTIFY_ANY, NDK_CQ_NOTIFY_SOLICITED)),
    [](const auto& info) {
      return std::string(arm_name(std::get<0>(info.param))) + "Then" + arm_name(std::get<1>(info.param));
    });

class Notify : public ApiTest {};

// The CPUs the calling thread may run on, as a mask of the first 64.
uint64_t thread_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(pthread_getaffinity_np(pthread_self(), sizeof set, &set), 0);
  uint64_t mask = 0;
  for (unsigned cpu = 0; cpu < 64; ++cpu)
    if (CPU_ISSET(cpu, &set)) mask |= uint64_t{1} << cpu;
  return mask;
}

// Review row B8, seed 003: NdkCreateCq's Affinity names the processors the CQ's callbacks prefer. They run on a
// thread pinned to them (the test config's engines back off when idle, so their cores are not excluded), and a CQ
// without one calls back on an unpinned thread, even right after a pinned callback (TBB's threads move between
// arenas and are given their mask back when they leave one).
TEST_F(Notify, CallbacksRunOnTheProcessorsOfTheCqsAffinity) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair({.cq_affinity = false}, {});
  const GroupAffinity b_affinity = adapter().UroceEngineAffinity(1);
  ASSERT_NE(b_affinity.Mask, 0u);
  std::atomic<uint64_t> a_cpus{0}, b_cpus{0};
  a->notifications.on_notify = [&](NTSTATUS) { a_cpus.store(thread_cpus()); };
  b->notifications.on_notify = [&](NTSTATUS) { b_cpus.store(thread_cpus()); };
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(b->receive(0, 64, 1), STATUS_SUCCESS);
    ASSERT_EQ(a->receive(0, 64, 2), STATUS_SUCCESS);
    b->cq->NdkArmCq(NDK_CQ_NOTIFY_ANY);
    a->cq->NdkArmCq(NDK_CQ_NOTIFY_ANY);
    ASSERT_EQ(a->send(0, 32, 3), STATUS_SUCCESS);
    ASSERT_EQ(b->send(0, 32, 4), STATUS_SUCCESS);
    ASSERT_TRUE(eventually([&] { return a_cpus.load() != 0 && b_cpus.load() != 0; }));
    EXPECT_EQ(b_cpus.load(), b_affinity.Mask) << "round " << round;
    uint64_t unpinned = 0;
    for (const unsigned cpu : config::process_allowed_cpus())
      if (cpu < 64) unpinned |= uint64_t{1} << cpu;
    EXPECT_EQ(a_cpus.load(), unpinned) << "round " << round;
    EXPECT_EQ(a->results(2).size(), 2u);  // its send and its receive
    EXPECT_EQ(b->results(2).size(), 2u);
    a_cpus.store(0);
    b_cpus.store(0);
  }
  a->notifications.on_notify = nullptr;
  b->notifications.on_notify = nullptr;
}

// The notifier thread costs nothing when nothing is notified: after a quiet spell it blocks until a notification
// wakes it. It used to sleep in 50 us steps for ever, which took 21 ticks of CPU a second on a 2-vCPU Xeon, and
// added up to one step to the first callback. The first notification after the quiet spell still arrives.
TEST_F(Notify, TheNotifierBlocksWhenQuietAndTheFirstNotificationWakesIt) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  ASSERT_EQ(b->receive(0, 64, 1), STATUS_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // past the 100 ms after which it blocks
  const std::optional<uint64_t> before = thread_cpu_ticks("uroce-notify");
  ASSERT_TRUE(before.has_value()) << "no thread named uroce-notify";
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const double wall_ticks =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() * sysconf(_SC_CLK_TCK);
  const uint64_t used = thread_cpu_ticks("uroce-notify").value_or(0) - *before;
  // A blocked thread uses no CPU whatever the machine's speed; one that polls gets its share even next to a hog.
  EXPECT_LT(static_cast<double>(used), 0.03 * wall_ticks) << used << " ticks of CPU in " << wall_ticks << " ticks";
  b->cq->NdkArmCq(NDK_CQ_NOTIFY_ANY);
  ASSERT_EQ(a->send(0, 32, 2), STATUS_SUCCESS);
  ASSERT_TRUE(eventually([&] { return b->notifications.count.load() == 1; }));
  EXPECT_EQ(b->notifications.last_status.load(), STATUS_SUCCESS);
  EXPECT_EQ(a->results(1).size(), 1u);
  EXPECT_EQ(b->results(1).size(), 1u);
}

TEST_F(Notify, NoArmNoCallbackAndOneCallbackPerArm) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  traffic(*a, *b, 3, 64);
  adapter().UroceWaitForNotifier();
  EXPECT_EQ(b->notifications.count.load(), 0) << "never without an arm";
  b->cq->NdkArmCq(NDK_CQ_NOTIFY_ANY);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(b->receive(0, 64, i), STATUS_SUCCESS);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(a->send(0, 64, i), STATUS_SUCCESS);
  EXPECT_EQ(a->results(5).size(), 5u);
  adapter().UroceWaitForNotifier();
  EXPECT_EQ(b->notifications.count.load(), 1) << "five completions, one arm: one callback";
  EXPECT_EQ(b->results(5).size(), 5u);
}

TEST_F(Notify, ArmingWithCompletionsAlreadyQueued) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  ASSERT_EQ(b->receive(0, 64, 1), STATUS_SUCCESS);
  ASSERT_EQ(a->send(0, 64, 1), STATUS_SUCCESS);
  ASSERT_EQ(a->result().Status, STATUS_SUCCESS);  // B's unsolicited receive completion is queued now

  b->cq->NdkArmCq(NDK_CQ_NOTIFY_ERRORS);
  b->cq->NdkArmCq(NDK_CQ_NOTIFY_SOLICITED);
  adapter().UroceWaitForNotifier();
  EXPECT_EQ(b->notifications.count.load(), 0) << "nothing queued satisfies SOLICITED";
  b->cq->NdkArmCq(NDK_CQ_NOTIFY_ANY);  // merges to ANY: the queued completion arrived after any callback
  ASSERT_TRUE(eventually([&] { return b->notifications.count.load() == 1; })) << "fires at once";

  ASSERT_EQ(b->receive(0, 64, 2), STATUS_SUCCESS);
  ASSERT_EQ(a->send(0, 64, 2, NDK_OP_FLAG_SEND_AND_SOLICIT_EVENT), STATUS_SUCCESS);
  ASSERT_EQ(a->result().Status, STATUS_SUCCESS);
  b->cq->NdkArmCq(NDK_CQ_NOTIFY_SOLICITED);
  ASSERT_TRUE(eventually([&] { return b->notifications.count.load() == 2; })) << "a queued solicited receive";
  EXPECT_EQ(b->results(2).size(), 2u);
}

TEST_F(Notify, AnErrorCompletionSatisfiesSolicited) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  ASSERT_EQ(b->receive(0, 64, 1), STATUS_SUCCESS);
  b->cq->NdkArmCq(NDK_CQ_NOTIFY_SOLICITED);
  b->qp->NdkFlush();  // the receive completes with STATUS_CANCELLED
  ASSERT_TRUE(eventually([&] { return b->notifications.count.load() == 1; }));
  EXPECT_EQ(b->result().Status, STATUS_CANCELLED);
}

// NdkControlCqInterruptModeration by count (ndkpi.md §9.2): the one notification of an arm waits until that many
// completions are queued. Three completions (proved appended by the sender's completions) raise the arm's
// notification, which stays held; the fourth releases it, with all four queued.
TEST_F(Notify, ModerationByCountHoldsTheNotificationUntilThatManyCompletions) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  ASSERT_EQ(b->cq->NdkControlCqInterruptModeration(UINT32_MAX, 4), STATUS_SUCCESS);  // the count alone
  for (int i = 0; i < 4; ++i)
    ASSERT_EQ(b->receive(std::size_t{64} * static_cast<std::size_t>(i), 64, i), STATUS_SUCCESS);
  b->cq->NdkArmCq(NDK_CQ_NOTIFY_ANY);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(a->send(0, 64, i), STATUS_SUCCESS);
  ASSERT_EQ(a->results(3).size(), 3u);
  // Held: no callback however long we look (a fast or a slow machine only changes how much of the hold we see).
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(b->notifications.count.load(), 0) << "3 of 4 completions";
  ASSERT_EQ(a->send(0, 64, 3), STATUS_SUCCESS);
  ASSERT_TRUE(eventually([&] { return b->notifications.count.load() == 1; }));
  EXPECT_EQ(b->results(4).size(), 4u);
  // Off again: the next arm notifies for a single completion.
  ASSERT_EQ(b->cq->NdkControlCqInterruptModeration(0, 0), STATUS_SUCCESS);
  ASSERT_EQ(b->receive(0, 64, 9), STATUS_SUCCESS);
  b->cq->NdkArmCq(NDK_CQ_NOTIFY_ANY);
  ASSERT_EQ(a->send(0, 64, 9), STATUS_SUCCESS);
  ASSERT_TRUE(eventually([&] { return b->notifications.count.load() == 2; }));
  EXPECT_EQ(b->result().Status, STATUS_SUCCESS);
}

// By interval: one completion, and the callback no earlier than the interval after it was raised.
TEST_F(Notify, ModerationByIntervalDelaysTheNotification) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  constexpr uint32_t kIntervalUs = 100'000;
  ASSERT_EQ(b->cq->NdkControlCqInterruptModeration(kIntervalUs, UINT32_MAX), STATUS_SUCCESS);  // the timer alone
  ASSERT_EQ(b->receive(0, 64, 1), STATUS_SUCCESS);
  b->cq->NdkArmCq(NDK_CQ_NOTIFY_ANY);
  const auto sent = std::chrono::steady_clock::now();
  ASSERT_EQ(a->send(0, 64, 1), STATUS_SUCCESS);
  ASSERT_TRUE(eventually([&] { return b->notifications.count.load() == 1; }));
  EXPECT_GE(std::chrono::steady_clock::now() - sent, std::chrono::microseconds(kIntervalUs));
  EXPECT_EQ(b->result().Status, STATUS_SUCCESS);
}

// A CQ closed while its notification is held closes (the hold never outlives the close) and calls nothing.
TEST_F(Notify, AHeldNotificationDoesNotHoldUpTheClose) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  ASSERT_EQ(b->cq->NdkControlCqInterruptModeration(UINT32_MAX, 64), STATUS_SUCCESS);
  ASSERT_EQ(b->receive(0, 64, 1), STATUS_SUCCESS);
  b->cq->NdkArmCq(NDK_CQ_NOTIFY_ANY);
  ASSERT_EQ(a->send(0, 64, 1), STATUS_SUCCESS);
  ASSERT_EQ(a->result().Status, STATUS_SUCCESS);  // B's completion is queued and its notification raised
  ASSERT_EQ(b->qp->NdkCloseQp(nullptr, nullptr), STATUS_SUCCESS);
  b->qp = nullptr;
  std::atomic<bool> closed{false};
  const NTSTATUS s = b->cq->NdkCloseCq([](void* c) { static_cast<std::atomic<bool>*>(c)->store(true); }, &closed);
  b->cq = nullptr;
  if (s == STATUS_SUCCESS) closed = true;
  ASSERT_EQ(s == STATUS_SUCCESS || s == STATUS_PENDING, true) << NdkStatusName(s);
  ASSERT_TRUE(eventually([&] { return closed.load(); })) << "the close waits for the held notification's release";
  adapter().UroceWaitForNotifier();
  EXPECT_EQ(b->notifications.count.load(), 0) << "no callback for a closing CQ";
}

// Many QPs on both engines complete into one CQ per side (one slice per engine); each side's callback drains
// and re-arms from inside the callback. Every message must be seen (a lost wake-up would stall the count)
// and no two callbacks of one CQ may overlap.
TEST_F(Notify, CallbacksAreSerialisedPerCqUnderLoad) {
  constexpr int kPairs = 4;
  constexpr int kMessages = 400;  // per pair
  Cq* shared[2] = {};
  Notifications seen[2];
  std::atomic<int> received[2] = {0, 0};
  std::atomic<int> sent{0};  // side 0's send completions (one signalled send in three)
  for (int side = 0; side < 2; ++side) {
    ASSERT_EQ(
        adapter().NdkCreateCq(4096, &Notifications::callback, &seen[side], nullptr, nullptr, nullptr, &shared[side]),
        STATUS_SUCCESS);
    seen[side].on_notify = [&, side](NTSTATUS) {
      NdkResultEx r[64];
      while (uint32_t n = shared[side]->NdkGetCqResultsEx(r, 64)) {
        for (uint32_t i = 0; i < n; ++i) {
          EXPECT_EQ(r[i].Status, STATUS_SUCCESS) << "side " << side << " type " << r[i].Type << " context "
                                                 << r[i].RequestContext << " error " << r[i].ProviderErrorCode;
          if (r[i].Type == NdkOperationTypeReceive) received[side].fetch_add(1);
          if (r[i].Type == NdkOperationTypeSend) sent.fetch_add(1);
        }
      }
      shared[side]->NdkArmCq(NDK_CQ_NOTIFY_ANY);
    };
  }
  std::vector<std::pair<Player*, Player*>> pairs;
  for (int i = 0; i < kPairs; ++i) {
    PlayerOptions a, b;
    a.engine = static_cast<uint16_t>(i % 2);
    b.engine = static_cast<uint16_t>(1 - i % 2);
    a.receive_depth = b.receive_depth = 512;
    Player& pa = player(a);
    Player& pb = player(b);
    // Re-home both QPs onto the shared CQs (side 0 sends, side 1 receives).
    for (auto [p, side] : {std::pair{&pa, 0}, std::pair{&pb, 1}}) {
      ASSERT_EQ(p->qp->NdkCloseQp(nullptr, nullptr), STATUS_SUCCESS);
      ASSERT_EQ(p->pd->NdkCreateQp(shared[side], shared[side], p, 512, 512, 1, 1, 0, nullptr, nullptr, &p->qp),
                STATUS_SUCCESS);
    }
    connect(pa, pb);
    pairs.emplace_back(&pa, &pb);
  }
  for (int side = 0; side < 2; ++side) shared[side]->NdkArmCq(NDK_CQ_NOTIFY_ANY);
  for (auto [a, b] : pairs)
    for (int m = 0; m < kMessages; ++m) ASSERT_EQ(b->receive(0, 64, m), STATUS_SUCCESS);
  for (int m = 0; m < kMessages; ++m)
    for (auto [a, b] : pairs) ASSERT_EQ(a->send(0, 64, m, m % 3 == 0 ? 0 : NDK_OP_FLAG_SILENT_SUCCESS), STATUS_SUCCESS);
  // Both sides' completions, not only the receiver's: a send completes once its ACK is processed, which on a
  // starved CPU can come well after the receiver has all its messages, and closing the QPs before then would
  // flush the sends still unacknowledged (IBTA 10.8.3), which is correct, but not what this test checks.
  constexpr int kSignalledPerPair = (kMessages + 2) / 3;
  ASSERT_TRUE(eventually([&] {
    return received[1].load() == kPairs * kMessages && sent.load() == kPairs * kSignalledPerPair;
  })) << received[1].load()
      << " received, " << sent.load() << " sends completed";
  adapter().UroceWaitForNotifier();
  for (int side = 0; side < 2; ++side) {
    EXPECT_EQ(seen[side].overlaps.load(), 0);
    EXPECT_GE(seen[side].count.load(), 1);
  }
  for (auto [a, b] : pairs) {
    for (Player* p : {a, b}) {
      ASSERT_EQ(p->qp->NdkCloseQp(nullptr, nullptr), STATUS_SUCCESS);
      p->qp = nullptr;
    }
  }
  adapter().UroceWaitForNotifier();  // callbacks for the flushes are done before we change them
  for (int side = 0; side < 2; ++side) {
    seen[side].on_notify = nullptr;
    ASSERT_EQ(shared[side]->NdkCloseCq(nullptr, nullptr), STATUS_SUCCESS);
  }
}

// ndkpi.md §10.3: a CQ's close waits for its successors (QPs) and a running callback; after the close
// completes, no callback at all.
TEST_F(Notify, NoCallbackAfterACloseCompletes) {
  Player* a = nullptr;
  Player* b = nullptr;
  std::tie(a, b) = pair();
  std::atomic<bool> closed{false};
  std::atomic<int> late{0};
  Cq* const cq = b->cq;
  b->notifications.on_notify = [&, cq](NTSTATUS) {
    if (closed.load()) late.fetch_add(1);
    NdkResult r[64];
    while (cq->NdkGetCqResults(r, 64) != 0) {
    }
    cq->NdkArmCq(NDK_CQ_NOTIFY_ANY);
  };
  b->cq->NdkArmCq(NDK_CQ_NOTIFY_ANY);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(b->receive(0, 64, i), STATUS_SUCCESS);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(a->send(0, 64, i, NDK_OP_FLAG_SILENT_SUCCESS), STATUS_SUCCESS);

  const NTSTATUS s = cq->NdkCloseCq([](void* c) { static_cast<std::atomic<bool>*>(c)->store(true); }, &closed);
  EXPECT_EQ(s, STATUS_PENDING) << "B's QP still completes into it";
  EXPECT_FALSE(closed.load());
  b->cq = nullptr;                                                 // the consumer never uses a closed object again
  ASSERT_EQ(b->qp->NdkCloseQp(nullptr, nullptr), STATUS_SUCCESS);  // flushes, then the CQ close completes
  b->qp = nullptr;
  ASSERT_TRUE(eventually([&] { return closed.load(); }));
  adapter().UroceWaitForNotifier();
  EXPECT_EQ(late.load(), 0);
  EXPECT_EQ(b->notifications.overlaps.load(), 0);
}

TEST_F(Notify, AnObjectWithSuccessorsClosesWhenTheLastSuccessorDoes) {
  Pd* pd = nullptr;
  Mr* mr = nullptr;
  ASSERT_EQ(adapter().NdkCreatePd(nullptr, nullptr, &pd), STATUS_SUCCESS);
  ASSERT_EQ(pd->NdkCreateMr(false, nullptr, nullptr, &mr), STATUS_SUCCESS);
  Completion pd_closed;
  EXPECT_EQ(pd->NdkClosePd(&Completion::on_close, &pd_closed), STATUS_PENDING);
  EXPECT_FALSE(pd_closed.done.load());
  EXPECT_EQ(mr->NdkCloseMr(nullptr, nullptr), STATUS_SUCCESS);
  EXPECT_TRUE(pd_closed.done.load()) << "the MR's close released the PD, on this thread";
}

}  // namespace
}  // namespace uroce::ndk::testing
