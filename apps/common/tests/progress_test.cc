#include "apps/common/progress.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace uroce::apps {
namespace {

using std::chrono::seconds;
using Clock = ProgressReporter::Clock;

// What a reporter wrote, read back from an in-memory FILE.
class Captured {
 public:
  Captured() : file_(open_memstream(&buffer_, &size_)) {}
  ~Captured() {
    std::fclose(file_);
    std::free(buffer_);
  }
  Captured(const Captured&) = delete;
  Captured& operator=(const Captured&) = delete;
  FILE* file() { return file_; }
  std::string text() {
    std::fflush(file_);
    return {buffer_, size_};
  }

 private:
  char* buffer_ = nullptr;
  std::size_t size_ = 0;
  FILE* file_;
};

TEST(Progress, ALineOnlyOnceAnIntervalHasPassed) {
  Captured out;
  const Clock::time_point start{};
  ProgressReporter progress("uroce-perf", seconds(10), "messages", 4096, out.file(), start);
  progress.update(100, 1000000, start + seconds(9));
  EXPECT_EQ(out.text(), "");
  // 250000 messages of 4096 bytes in 10 s: 25000/s, 0.82 Gb/s.
  progress.update(250000, 1000000, start + seconds(10));
  EXPECT_EQ(out.text(), "uroce-perf: 10 s: 250000 of 1000000 messages (25%), 25000/s, 0.82 Gb/s over the last 10 s\n");
  // The rate is the last interval's, not the run's.
  progress.update(260000, 1000000, start + seconds(15));
  progress.update(350000, 1000000, start + seconds(20));
  EXPECT_EQ(out.text().substr(out.text().find('\n') + 1),
            "uroce-perf: 20 s: 350000 of 1000000 messages (35%), 10000/s, 0.33 Gb/s over the last 10 s\n");
}

TEST(Progress, WithoutATotalOrBytes) {
  Captured out;
  const Clock::time_point start{};
  ProgressReporter progress("uroce-rping", seconds(5), "pings", 0, out.file(), start);
  progress.update(50, 0, start + seconds(5));
  EXPECT_EQ(out.text(), "uroce-rping: 5 s: 50 pings, 10/s over the last 5 s\n");
}

TEST(Progress, DetailFollowsTheRate) {
  Captured out;
  const Clock::time_point start{};
  ProgressReporter progress("uroce-nvmf-target", seconds(10), "commands", 0, out.file(), start);
  EXPECT_FALSE(progress.due(start + seconds(9)));
  EXPECT_TRUE(progress.due(start + seconds(10)));
  progress.update(700, 0, start + seconds(10), ", 2 queues open, 0 errors");
  EXPECT_EQ(out.text(), "uroce-nvmf-target: 10 s: 700 commands, 70/s over the last 10 s, 2 queues open, 0 errors\n");
  EXPECT_FALSE(progress.due(start + seconds(19)));
}

TEST(Progress, IntervalZeroNeverPrints) {
  Captured out;
  const Clock::time_point start{};
  ProgressReporter progress("uroce-perf", seconds(0), "messages", 64, out.file(), start);
  progress.update(1, 10, start + seconds(3600));
  EXPECT_EQ(out.text(), "");
}

TEST(Progress, OptionValue) {
  EXPECT_EQ(parse_progress_interval("t", "30"), seconds(30));
  EXPECT_EQ(parse_progress_interval("t", "0"), seconds(0));
  EXPECT_EQ(parse_progress_interval("t", "soon"), std::nullopt);
}

}  // namespace
}  // namespace uroce::apps
