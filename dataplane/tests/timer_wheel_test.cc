#include "dataplane/timer_wheel.h"

#include <gtest/gtest.h>

#include <vector>

namespace uroce::dataplane {
namespace {

// A context that records which timers fired, in order.
struct Recorder {
  std::vector<int> fired;
};
using TestTimer = Timer<Recorder>;
using TestWheel = TimerWheel<Recorder>;

void record(TestTimer& t, Recorder& r) { r.fired.push_back(*static_cast<int*>(t.owner())); }

constexpr unsigned kShift = 4;  // 16 cycles per tick
constexpr uint32_t kSlots = 8;  // one rotation = 128 cycles

TEST(TimerWheel, FiresAtOrAfterExpiryNeverBefore) {
  Recorder r;
  TestWheel wheel(kShift, kSlots, 1000);
  int id = 7;
  TestTimer t(record, &id);
  wheel.schedule_at(t, 1100);
  EXPECT_TRUE(t.armed());
  EXPECT_EQ(wheel.advance(1099, r), 0u);
  EXPECT_TRUE(r.fired.empty());
  EXPECT_EQ(wheel.advance(1100 + 15, r), 1u);  // expiry rounded up to the tick
  EXPECT_EQ(r.fired, std::vector<int>{7});
  EXPECT_FALSE(t.armed());
  EXPECT_EQ(wheel.armed_count(), 0u);
}

TEST(TimerWheel, CancelIsImmediateAndIdempotent) {
  Recorder r;
  TestWheel wheel(kShift, kSlots, 0);
  int id = 1;
  TestTimer t(record, &id);
  wheel.schedule_after(t, 50);
  wheel.cancel(t);
  wheel.cancel(t);
  EXPECT_FALSE(t.armed());
  EXPECT_EQ(wheel.advance(10'000, r), 0u);
}

TEST(TimerWheel, TimersBeyondOneRotationWaitForTheirTick) {
  Recorder r;
  TestWheel wheel(kShift, kSlots, 0);
  int near_id = 1, far_id = 2;
  TestTimer near_timer(record, &near_id);
  TestTimer far_timer(record, &far_id);
  wheel.schedule_at(near_timer, 32);
  wheel.schedule_at(far_timer, 32 + 3 * 128);  // same slot, three rotations later
  for (uint64_t now = 16; now < 32 + 3 * 128; now += 16) wheel.advance(now, r);
  EXPECT_EQ(r.fired, std::vector<int>{1});
  wheel.advance(32 + 3 * 128, r);
  EXPECT_EQ(r.fired, (std::vector<int>{1, 2}));
}

TEST(TimerWheel, LongAbsenceFiresEverythingDueInOneBoundedPass) {
  Recorder r;
  TestWheel wheel(kShift, kSlots, 0);
  std::vector<int> ids(20);
  std::vector<std::unique_ptr<TestTimer>> timers;
  for (int i = 0; i < 20; ++i) {
    ids[i] = i;
    timers.push_back(std::make_unique<TestTimer>(record, &ids[i]));
    wheel.schedule_at(*timers.back(), static_cast<uint64_t>(i) * 50);
  }
  EXPECT_EQ(wheel.advance(1'000'000, r), 20u);
  EXPECT_EQ(r.fired.size(), 20u);
  EXPECT_EQ(wheel.armed_count(), 0u);
}

TEST(TimerWheel, PastExpiryFiresOnTheNextTick) {
  Recorder r;
  TestWheel wheel(kShift, kSlots, 1600);
  int id = 3;
  TestTimer t(record, &id);
  wheel.schedule_at(t, 5);
  EXPECT_EQ(wheel.advance(1600 + 16, r), 1u);
}

// A callback that re-arms itself (a periodic timer) and cancels another due in the same pass.
struct Chain {
  TestWheel* wheel = nullptr;
  TestTimer* victim = nullptr;
  int runs = 0;
};
TEST(TimerWheel, CallbacksMayRescheduleThemselvesAndCancelOthers) {
  Recorder r;
  TestWheel wheel(kShift, kSlots, 0);
  Chain chain{&wheel, nullptr};
  int victim_id = 99;
  TestTimer victim(record, &victim_id);
  TestTimer periodic(
      [](TestTimer& t, Recorder&) {
        auto* c = static_cast<Chain*>(t.owner());
        ++c->runs;
        c->wheel->cancel(*c->victim);
        if (c->runs < 3) c->wheel->schedule_after(t, 16);
      },
      &chain);
  chain.victim = &victim;
  wheel.schedule_at(periodic, 16);
  wheel.schedule_at(victim, 16);
  for (uint64_t now = 16; now <= 200; now += 16) wheel.advance(now, r);
  EXPECT_EQ(chain.runs, 3);
  // The victim either fired before the periodic timer in the first pass, or was cancelled by it.
  EXPECT_LE(r.fired.size(), 1u);
  EXPECT_FALSE(victim.armed());
  EXPECT_FALSE(periodic.armed());
}

}  // namespace
}  // namespace uroce::dataplane
