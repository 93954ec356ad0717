#include "dataplane/timer_wheel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
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

// Random schedules, cancels and advances (steps from under a tick to several rotations) against a model that
// keeps each armed timer's expiry tick: every advance fires exactly the armed timers due by then. Run with a
// wheel of 8 slots (one bitmap word, partly used) and of 256 (four words), so that the skip over empty slots
// crosses word boundaries and the wheel's end.
void check_against_model(uint32_t slots, uint32_t seed) {
  Recorder r;
  TestWheel wheel(kShift, slots, 0);
  constexpr int kTimers = 64;
  std::vector<int> ids(kTimers);
  std::vector<std::unique_ptr<TestTimer>> timers;
  std::vector<uint64_t> due_tick(kTimers, 0);  // 0: not armed
  for (int i = 0; i < kTimers; ++i) {
    ids[i] = i;
    timers.push_back(std::make_unique<TestTimer>(record, &ids[i]));
  }
  std::mt19937 rng(seed);
  uint64_t now = 0;
  const uint64_t rotation = uint64_t{slots} << kShift;
  for (int step = 0; step < 20000; ++step) {
    const int t = static_cast<int>(rng() % kTimers);
    switch (rng() % 4) {
      case 0:
      case 1: {  // schedule up to three rotations ahead
        const uint64_t expiry = now + rng() % (3 * rotation);
        wheel.schedule_at(*timers[t], expiry);
        const uint64_t current_tick = now >> kShift;
        due_tick[t] = std::max((expiry + (1u << kShift) - 1) >> kShift, current_tick + 1);
        break;
      }
      case 2:
        wheel.cancel(*timers[t]);
        due_tick[t] = 0;
        break;
      default: {
        const uint64_t kind = rng() % 8;
        now += kind < 5 ? rng() % 24 : kind < 7 ? rng() % (2 * rotation) : 5 * rotation + rng() % rotation;
        r.fired.clear();
        const uint32_t fired = wheel.advance(now, r);
        std::vector<int> expected;
        for (int i = 0; i < kTimers; ++i) {
          if (due_tick[i] != 0 && due_tick[i] <= (now >> kShift)) {
            expected.push_back(i);
            due_tick[i] = 0;
          }
        }
        std::sort(r.fired.begin(), r.fired.end());
        ASSERT_EQ(r.fired, expected) << "step " << step << ", slots " << slots;
        ASSERT_EQ(fired, expected.size());
      }
    }
    const auto armed =
        static_cast<uint32_t>(std::count_if(due_tick.begin(), due_tick.end(), [](uint64_t d) { return d != 0; }));
    ASSERT_EQ(wheel.armed_count(), armed);
  }
  for (auto& timer : timers) wheel.cancel(*timer);
}

TEST(TimerWheel, FiresExactlyWhatIsDueAcrossRandomSchedulesCancelsAndAbsences) {
  check_against_model(8, 1);
  check_against_model(256, 2);
  check_against_model(4096, 3);
}

}  // namespace
}  // namespace uroce::dataplane
