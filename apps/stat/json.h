// The little JSON uroce-stat needs: DPDK telemetry answers in JSON (objects of numbers, strings and arrays), and
// --json writes it. Integers are kept exact as 64-bit values, because counters pass 2^53.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace uroce::stat {

class Json {
 public:
  using Array = std::vector<Json>;
  using Object = std::map<std::string, Json>;

  Json() = default;                                        // null
  Json(bool value) : value_(value) {}                      // NOLINT(google-explicit-constructor)
  Json(uint64_t value) : value_(value) {}                  // NOLINT(google-explicit-constructor)
  Json(int64_t value) : value_(value) {}                   // NOLINT(google-explicit-constructor)
  Json(double value) : value_(value) {}                    // NOLINT(google-explicit-constructor)
  Json(std::string value) : value_(std::move(value)) {}    // NOLINT(google-explicit-constructor)
  Json(const char* value) : value_(std::string(value)) {}  // NOLINT(google-explicit-constructor)
  Json(Array value) : value_(std::move(value)) {}          // NOLINT(google-explicit-constructor)
  Json(Object value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)

  [[nodiscard]] bool is_null() const noexcept { return std::holds_alternative<std::monostate>(value_); }
  [[nodiscard]] const Object* object() const noexcept { return std::get_if<Object>(&value_); }
  [[nodiscard]] const Array* array() const noexcept { return std::get_if<Array>(&value_); }
  [[nodiscard]] const std::string* string() const noexcept { return std::get_if<std::string>(&value_); }
  // A non-negative integer (what counters are), or nothing.
  [[nodiscard]] std::optional<uint64_t> unsigned_integer() const noexcept;
  // Any number as a double, or nothing.
  [[nodiscard]] std::optional<double> number() const noexcept;
  // The member `key` of an object, or nullptr (also when this is not an object).
  [[nodiscard]] const Json* find(const std::string& key) const noexcept;

  // Compact JSON text, object keys in sorted order.
  [[nodiscard]] std::string dump() const;

 private:
  std::variant<std::monostate, bool, uint64_t, int64_t, double, std::string, Array, Object> value_;
};

// Parses one JSON document; nothing if the text is not JSON (or nests deeper than a telemetry answer can).
[[nodiscard]] std::optional<Json> parse_json(std::string_view text);

}  // namespace uroce::stat
