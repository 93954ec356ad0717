// A client of DPDK's telemetry socket (the one dpdk-telemetry.py uses): /var/run/dpdk/<file-prefix>/dpdk_telemetry.v2,
// a SOCK_SEQPACKET unix socket that greets with {"version", "pid", "max_output_len"} and answers each command
// ("/uroce/engine,0") with one JSON object {"<command>": <data>}. No DPDK needed on this side.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace uroce::stat {

// nlohmann/json: objects are std::maps (keys sorted), and integers stay exact 64-bit values (number_unsigned),
// because counters pass 2^53.
using Json = nlohmann::json;

// One telemetry message as JSON, or nothing if the text is not JSON or nests deeper than a telemetry answer can
// (two levels; the limit keeps every later copy, compare and dump of the value shallow).
[[nodiscard]] std::optional<Json> parse_telemetry_json(std::string_view text);
// A non-negative integer (what counters are), exact, never through a double; or nothing.
[[nodiscard]] std::optional<uint64_t> unsigned_integer(const Json& value) noexcept;
// Compact JSON text, object keys sorted; bytes that are not UTF-8 become U+FFFD instead of throwing.
[[nodiscard]] std::string dump_json(const Json& value);

// The telemetry socket of the DPDK process with this --file-prefix.
[[nodiscard]] std::string telemetry_socket_path(const std::string& file_prefix);
// The file prefixes under /var/run/dpdk whose telemetry socket starts with `prefix_start` ("uroce"), sorted.
[[nodiscard]] std::vector<std::string> find_file_prefixes(const std::string& prefix_start);

class TelemetryClient {
 public:
  // Connects and reads the greeting; an error says what failed and what to check.
  // Every answer (the greeting and each query's) must come within `answer_timeout`: a process that accepts but
  // never answers (stopped, hung) is given up on with an error saying so.
  [[nodiscard]] static std::optional<TelemetryClient> connect(
      const std::string& socket_path, std::string& error,
      std::chrono::milliseconds answer_timeout = std::chrono::seconds(5));
  TelemetryClient(TelemetryClient&& other) noexcept;
  TelemetryClient& operator=(TelemetryClient&& other) noexcept;
  TelemetryClient(const TelemetryClient&) = delete;
  TelemetryClient& operator=(const TelemetryClient&) = delete;
  ~TelemetryClient();

  // Sends `command` ("/uroce/port,0") and returns its data: the value under the command's name in the answer
  // (null when the process answered null: no such object, or nothing published). Nothing if the connection failed.
  [[nodiscard]] std::optional<Json> query(const std::string& command, std::string& error);
  [[nodiscard]] long pid() const noexcept { return pid_; }

 private:
  explicit TelemetryClient(int fd) : fd_(fd) {}
  int fd_ = -1;
  long pid_ = 0;
  std::size_t max_output_len_ = 16384;
};

}  // namespace uroce::stat
