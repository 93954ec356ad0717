// The periodic one-line status of a long run, which every tool prints the same way (--progress SECONDS): how much
// is done, of how much, and the rate since the previous line. It goes to stderr, so that what a tool prints on
// stdout (perftest's tables, ibv_rc_pingpong's summary) stays exactly what scripts written for those tools parse.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

namespace uroce::apps {

// The --help line for --progress, spelled alike in every tool.
extern const char* const kProgressOptionHelp;

// --progress's value when the option is not given: every 10 s when stderr is a terminal (someone is watching),
// never otherwise (a log or a test's output).
[[nodiscard]] std::chrono::seconds default_progress_interval();

// "--progress SECONDS" (0: never); prints "<tool>: --progress: ..." and returns nothing when malformed.
[[nodiscard]] std::optional<std::chrono::seconds> parse_progress_interval(const char* tool, const char* text);

class ProgressReporter {
 public:
  using Clock = std::chrono::steady_clock;

  // `what` names the unit counted ("messages", "pings"); `bytes_per_unit` 0 leaves the bandwidth out.
  ProgressReporter(const char* tool, std::chrono::seconds interval, std::string what, uint64_t bytes_per_unit,
                   FILE* out = stderr, Clock::time_point start = Clock::now());

  // Call as often as convenient: one clock read (none when the interval is 0, so a run without progress lines
  // times exactly as before), and a line only once an interval has passed since the last.
  // total 0: the run has no fixed end (a duration, or until interrupted).
  void update(uint64_t done, uint64_t total) {
    if (interval_ != Clock::duration::zero()) update(done, total, Clock::now());
  }
  // detail: appended to the line, e.g. ", 2 queues open, 0 errors" (built only when due(now)).
  void update(uint64_t done, uint64_t total, Clock::time_point now, std::string_view detail = {});
  [[nodiscard]] bool due(Clock::time_point now) const {
    return interval_ != Clock::duration::zero() && now - last_line_ >= interval_;
  }

 private:
  const char* tool_;
  Clock::duration interval_;
  std::string what_;
  uint64_t bytes_per_unit_;
  FILE* out_;
  Clock::time_point start_, last_line_;
  uint64_t done_at_last_line_ = 0;
};

}  // namespace uroce::apps
