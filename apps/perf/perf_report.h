// The tables uroce-perf prints: perftest's layout (test description, the QP addresses of both sides, the
// bandwidth or latency result lines), so that the two sides of an interop run read the same way.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "apps/perf/perftest_exchange.h"

namespace uroce::apps::perf {

enum class Verb { kSend, kWrite, kRead };  // perftest's order: its tables name them Send, RDMA_Write, RDMA_Read
enum class TestKind { kBandwidth, kLatency };

struct TestDescription {
  Verb verb = Verb::kWrite;
  TestKind kind = TestKind::kBandwidth;
  bool client = true;
  std::string device;
  uint32_t qps = 1;
  uint32_t tx_depth = 0;
  uint32_t rx_depth = 0;
  uint32_t cq_moderation = 0;
  uint32_t mtu = 0;
  std::optional<uint32_t> gid_index;  // printed only when given (as perftest)
  uint32_t out_reads = 0;
  std::string exchange;  // "Ethernet" (perftest's name for its TCP exchange) or the in-process note
};

inline constexpr const char* kRule =
    "---------------------------------------------------------------------------------------\n";

void print_description(FILE* out, const TestDescription& d);
// " local address: ..." / " remote address: ..." and the GID line.
void print_dest(FILE* out, bool local, Verb verb, const PerftestDest& dest);
void print_bw_header(FILE* out, bool gbits);
void print_bw_line(FILE* out, const BwReport& report, bool gbits);

// perftest's bandwidth figures for a run: total bytes over the time from the first post to the last completion,
// and the peak as the best rate over any stretch of posts [i, j] that ends at a completion. bw in MB/s (2^20
// bytes) or Gb/s; msg_rate in Mpps.
struct BwTimes {
  std::vector<int64_t> posted_ns;                          // per message, in posting order (may be empty)
  std::vector<std::pair<uint64_t, int64_t>> completed_ns;  // (messages completed so far, when)
  int64_t first_ns = 0, last_ns = 0;
};
[[nodiscard]] BwReport bw_report(uint64_t size, uint64_t messages, const BwTimes& times, bool gbits, bool peak);

void print_lat_header(FILE* out, bool duration);
// Latency from the post times of a ping-pong (or READ round trips): the gaps between consecutive posts, halved
// for ping-pongs (rtt_factor 2), sorted, the two largest dropped; min, max, median, average, stdev, 99% and 99.9%.
void print_lat_line(FILE* out, uint64_t size, const std::vector<int64_t>& posted_ns, int rtt_factor);
void print_lat_duration_line(FILE* out, uint64_t size, uint64_t iterations, double seconds, int rtt_factor);

}  // namespace uroce::apps::perf
