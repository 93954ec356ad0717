// The out-of-band exchange two-process tests and benchmarks use in place of
// perftest's TCP socket: small files in a directory both processes know.
#pragma once

#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

namespace uroce::dataplane::testing {

// Writes `text` to `path` atomically (rename): a reader never sees half a file.
inline void write_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  std::ofstream(tmp) << text;
  std::rename(tmp.c_str(), path.c_str());
}

// The contents of `path` once it exists, or nullopt after `timeout`.
inline std::optional<std::string> wait_file(const std::string& path,
                                            std::chrono::seconds timeout = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(path);
    if (in) {
      std::stringstream s;
      s << in.rdbuf();
      return s.str();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return std::nullopt;
}

}  // namespace uroce::dataplane::testing
