// What the config tests share: a document with one valid port, loading that must succeed, the source tree's
// config folder, and readable gtest output for error lists.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>

#include "config/config.h"

namespace uroce::config {

// NOLINTNEXTLINE(readability-identifier-naming): gtest looks for this name
inline void PrintTo(const ConfigError& e, std::ostream* os) { *os << "{" << e.key << ": " << e.message << "}"; }

namespace test_support {

// An error at `key` whose message contains `message`.
inline auto is_error(const std::string& key, const std::string& message) {
  return ::testing::AllOf(::testing::Field("key", &ConfigError::key, ::testing::Eq(key)),
                          ::testing::Field("message", &ConfigError::message, ::testing::HasSubstr(message)));
}

// A document with one valid port; `top` adds top-level sections, `port_extra` adds keys to the port's flow map.
inline std::string doc(std::string_view top, std::string_view port_extra = "") {
  std::string text(top);
  text += "\nports:\n  - {name: p0, device: net_null0, addresses: [198.18.0.1/24]";
  if (!port_extra.empty()) text.append(", ").append(port_extra);
  return text + "}\n";
}

// A document with one port of the given flow-map body, and nothing else.
inline std::string one_port(std::string_view body) { return "ports:\n  - {" + std::string(body) + "}\n"; }

inline Config load_valid(std::string_view text) {
  LoadResult result = load_config(text);
  EXPECT_THAT(result.errors, ::testing::IsEmpty()) << text;
  if (!result.config) return Config{};
  return *result.config;
}

// default.yaml and examples/ in the source tree (meson sets UROCE_CONFIG_DIR).
inline std::filesystem::path config_dir() {
  const char* dir = std::getenv("UROCE_CONFIG_DIR");  // NOLINT(concurrency-mt-unsafe): no thread sets it
  return dir != nullptr ? std::filesystem::path(dir) : std::filesystem::path("config");
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace test_support
}  // namespace uroce::config
