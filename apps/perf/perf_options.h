// uroce-perf's command line: perftest's test options (names, defaults and the dependencies perftest forces
// between them) and uroce's own.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "api/ndk.h"
#include "apps/perf/perf_report.h"

namespace uroce::apps::perf {

inline constexpr const char* kTool = "uroce-perf";
inline constexpr uint64_t kMaxSize = 8u << 20;  // perftest's largest message, and the top of -a
inline constexpr uint32_t kMaxQps = 64;

struct Mode {
  std::string_view name;
  Verb verb;
  TestKind kind;
};
inline constexpr Mode kModes[] = {
    {"write_bw", Verb::kWrite, TestKind::kBandwidth}, {"read_bw", Verb::kRead, TestKind::kBandwidth},
    {"send_bw", Verb::kSend, TestKind::kBandwidth},   {"write_lat", Verb::kWrite, TestKind::kLatency},
    {"read_lat", Verb::kRead, TestKind::kLatency},    {"send_lat", Verb::kSend, TestKind::kLatency},
};

struct Options {
  bool help = false;  // -h: print the usage, run nothing
  Mode mode = kModes[0];
  std::optional<std::string> host;
  bool in_process = false;
  uint64_t size = 0;  // 0: perftest's default for the mode
  uint64_t iters = 0;
  uint32_t duration = 0;  // -D seconds; 0: a count of iterations
  uint32_t qps = 1;
  uint32_t mtu = 0;  // 0: the configuration's rdma.path_mtu
  bool all_sizes = false;
  bool gbits = false;
  std::optional<uint32_t> gid_index;
  uint16_t tcp_port = 18515;
  uint32_t tx_depth = 0, rx_depth = 0, cq_mod = 0;
  bool cq_mod_given = false;
  uint32_t out_reads = 0;  // 0: the adapter's inbound READ limit
  uint8_t qp_timeout = 14;
  bool no_peak = false;
  bool verify = false;
  uint32_t timeout = 0;  // seconds; 0: wait forever, as perftest does
  bool rdma_cm = false;  // -R: connect through the connection manager, exchanging over an RDMA connection too
  std::chrono::seconds progress{0};  // the client's progress line on stderr (apps/common/progress.h); 0: none

  [[nodiscard]] bool bw() const { return mode.kind == TestKind::kBandwidth; }
  [[nodiscard]] bool client() const { return host.has_value(); }
};

void usage(FILE* out);

// "uroce-perf: <message>" on stderr; returns false.
[[gnu::format(printf, 1, 2)]] bool complain(const char* format, ...);

// Fails loudly: an NTSTATUS from a call the tool cannot do without.
bool ok(ndk::NTSTATUS s, const char* what);

// The options after argv[0]; nothing (with the reason on stderr) when they are not usable.
[[nodiscard]] std::optional<Options> parse(int argc, char** argv);

}  // namespace uroce::apps::perf
