#include "apps/common/progress.h"

#include <cinttypes>
#include <utility>

#include <unistd.h>

#include "apps/common/tool_setup.h"

namespace uroce::apps {

const char* const kProgressOptionHelp =
    "      --progress SECONDS  a line on stderr every SECONDS with what is done and the rate (0: never; default:\n"
    "                          every 10 s when stderr is a terminal, else never)\n";

std::chrono::seconds default_progress_interval() {
  return isatty(STDERR_FILENO) != 0 ? std::chrono::seconds(10) : std::chrono::seconds(0);
}

std::optional<std::chrono::seconds> parse_progress_interval(const char* tool, const char* text) {
  const std::optional<uint64_t> seconds = parse_number(tool, "--progress", text, 0, 86400);
  if (!seconds) return std::nullopt;
  return std::chrono::seconds(*seconds);
}

ProgressReporter::ProgressReporter(const char* tool, std::chrono::seconds interval, std::string what,
                                   uint64_t bytes_per_unit, FILE* out, Clock::time_point start)
    : tool_(tool),
      interval_(interval),
      what_(std::move(what)),
      bytes_per_unit_(bytes_per_unit),
      out_(out),
      start_(start),
      last_line_(start) {}

void ProgressReporter::update(uint64_t done, uint64_t total, Clock::time_point now, std::string_view detail) {
  if (!due(now)) return;
  const double window = std::chrono::duration<double>(now - last_line_).count();
  const double rate = static_cast<double>(done - done_at_last_line_) / window;
  const auto elapsed = std::chrono::duration_cast<std::chrono::seconds>(now - start_).count();
  std::fprintf(out_, "%s: %lld s: %" PRIu64, tool_, static_cast<long long>(elapsed), done);
  if (total != 0) std::fprintf(out_, " of %" PRIu64, total);
  std::fprintf(out_, " %s", what_.c_str());
  if (total != 0) std::fprintf(out_, " (%.0f%%)", 100.0 * static_cast<double>(done) / static_cast<double>(total));
  std::fprintf(out_, ", %.0f/s", rate);
  if (bytes_per_unit_ != 0) std::fprintf(out_, ", %.2f Gb/s", rate * static_cast<double>(bytes_per_unit_) * 8 / 1e9);
  std::fprintf(out_, " over the last %.0f s%.*s\n", window, static_cast<int>(detail.size()), detail.data());
  std::fflush(out_);
  last_line_ = now;
  done_at_last_line_ = done;
}

}  // namespace uroce::apps
