// The machinery config.cc and its section files share to read YAML into typed structs: a Reader that collects
// errors (never throws) and remembers which keys failed, and field tables that parse, range-check and assign one
// key each, so unknown keys fall out of the table lookup. Internal to config/: config.h does not include it, and
// yaml-cpp stays private to this library.
#pragma once

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "config/config.h"

namespace uroce::config::detail {

constexpr unsigned kMaxSuggestionDistance = 2;
constexpr std::string_view kDocumentKey = "<document>";  // errors about the document as a whole

[[nodiscard]] std::string join_key(const std::string& parent, std::string_view name);
[[nodiscard]] std::string index_key(const std::string& parent, std::size_t i);
// What the user wrote, for "got ..." in messages.
[[nodiscard]] std::string describe_node(const YAML::Node& node);
// Levenshtein distance, ignoring case: how close an unknown key is to a known one.
[[nodiscard]] std::size_t edit_distance(std::string_view a, std::string_view b);

struct ParsedInteger {
  bool negative = false;
  bool overflow = false;  // magnitude does not fit 64 bits
  uint64_t magnitude = 0;
};

// A YAML integer: optional sign, then decimal digits or 0x hex digits.

// A YAML integer: optional sign, then decimal digits or 0x hex digits.
[[nodiscard]] std::optional<ParsedInteger> parse_integer(std::string_view text);

// Collects errors and remembers which keys failed, so the cross-key rules can skip values that are only defaults
// standing in for something the user got wrong (and would otherwise produce a second, misleading error).
class Reader {
 public:
  void error(const std::string& key, std::string message) {
    failed_.insert(key);
    errors_.push_back({key, std::move(message)});
  }
  [[nodiscard]] bool ok(const std::string& key) const { return !failed_.contains(key); }
  // No error at key or anywhere inside it (key.x, key[i]).
  [[nodiscard]] bool ok_under(const std::string& key) const {
    for (auto it = failed_.lower_bound(key); it != failed_.end() && it->starts_with(key); ++it) {
      if (it->size() == key.size() || (*it)[key.size()] == '.' || (*it)[key.size()] == '[') return false;
    }
    return true;
  }
  [[nodiscard]] std::vector<ConfigError> take_errors() { return std::move(errors_); }

  // Cross-key rules report a value the user may never have written; say so when it is the default.
  void mark_given(const std::string& key) { given_.insert(key); }
  [[nodiscard]] std::string seen(const std::string& key, uint64_t value) const {
    return std::to_string(value) + (given_.contains(key) ? "" : " (the default)");
  }
  [[nodiscard]] bool has_errors() const { return !errors_.empty(); }

  std::optional<uint64_t> integer(const YAML::Node& node, const std::string& key, uint64_t min, uint64_t max) {
    const auto parsed = node.IsScalar() ? parse_integer(node.Scalar()) : std::nullopt;
    if (!parsed) {
      error(key, "must be an integer, got " + describe_node(node));
      return std::nullopt;
    }
    const bool below = parsed->negative && parsed->magnitude != 0;
    if (below || parsed->overflow || parsed->magnitude < min || parsed->magnitude > max) {
      error(key, "must be between " + std::to_string(min) + " and " + std::to_string(max) + ", got " + node.Scalar());
      return std::nullopt;
    }
    return parsed->magnitude;
  }

  std::optional<double> probability(const YAML::Node& node, const std::string& key) {
    double value = 0;
    bool parsed = false;
    if (node.IsScalar()) {
      std::string_view text = node.Scalar();
      if (!text.empty() && text.front() == '+') text.remove_prefix(1);
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      parsed = !text.empty() && ec == std::errc() && end == text.data() + text.size();
    }
    if (!parsed) {
      error(key, "must be a number, got " + describe_node(node));
      return std::nullopt;
    }
    if (!(value >= 0 && value <= 1)) {  // written so that NaN fails too
      error(key, "must be between 0 and 1, got " + node.Scalar());
      return std::nullopt;
    }
    return value;
  }

  // YAML 1.2's core schema booleans (true/True/TRUE, false/False/FALSE).
  std::optional<bool> boolean(const YAML::Node& node, const std::string& key) {
    if (node.IsScalar()) {
      const std::string& t = node.Scalar();
      if (t == "true" || t == "True" || t == "TRUE") return true;
      if (t == "false" || t == "False" || t == "FALSE") return false;
    }
    error(key, "must be true or false, got " + describe_node(node));
    return std::nullopt;
  }

  std::optional<std::string> text(const YAML::Node& node, const std::string& key) {
    if (!node.IsScalar()) {
      error(key, "must be a string, got " + describe_node(node));
      return std::nullopt;
    }
    return node.Scalar();
  }

  template <class E, std::size_t N>
  std::optional<E> choice(const YAML::Node& node, const std::string& key,
                          const std::array<std::pair<std::string_view, E>, N>& choices) {
    if (node.IsScalar()) {
      for (const auto& [name, value] : choices) {
        if (node.Scalar() == name) return value;
      }
    }
    std::string names;
    for (const auto& [name, value] : choices) names.append(names.empty() ? "" : ", ").append(name);
    error(key, "must be one of " + names + ", got " + describe_node(node));
    return std::nullopt;
  }

  // A list of anything; null (a key with nothing after it) is an empty list.
  bool list(const YAML::Node& node, const std::string& key, std::string_view what) {
    if (node.IsSequence() || node.IsNull()) return true;
    error(key, "must be a list of " + std::string(what) + ", got " + describe_node(node));
    return false;
  }

 private:
  std::vector<ConfigError> errors_;
  std::set<std::string> failed_;
  std::set<std::string> given_;
};

// ---- Field tables -----------------------------------------------------------------------------------------------

template <class S>
struct Field {
  std::string_view name;
  void (*read)(Reader&, const YAML::Node&, const std::string& key, S&);
};

template <class M>
struct MemberTraits;
template <class S, class T>
struct MemberTraits<T S::*> {
  using Struct = S;
  using Type = T;
};

// An unsigned integer member with an inclusive range. The range is checked against the member's type at compile
// time, so no value can be silently truncated into a narrower field.
template <auto kMember, uint64_t kMin, uint64_t kMax>
constexpr auto integer() {
  using S = typename MemberTraits<decltype(kMember)>::Struct;
  using T = typename MemberTraits<decltype(kMember)>::Type;
  static_assert(std::is_unsigned_v<T> && kMin <= kMax && kMax <= std::numeric_limits<T>::max());
  return +[](Reader& r, const YAML::Node& node, const std::string& key, S& out) {
    if (const auto v = r.integer(node, key, kMin, kMax)) out.*kMember = static_cast<T>(*v);
  };
}

template <auto kMember>
constexpr auto probability() {
  using S = typename MemberTraits<decltype(kMember)>::Struct;
  return +[](Reader& r, const YAML::Node& node, const std::string& key, S& out) {
    if (const auto v = r.probability(node, key)) out.*kMember = *v;
  };
}

template <auto kMember>
constexpr auto boolean() {
  using S = typename MemberTraits<decltype(kMember)>::Struct;
  return +[](Reader& r, const YAML::Node& node, const std::string& key, S& out) {
    if (const auto v = r.boolean(node, key)) out.*kMember = *v;
  };
}

template <auto kMember>
constexpr auto text() {
  using S = typename MemberTraits<decltype(kMember)>::Struct;
  return +[](Reader& r, const YAML::Node& node, const std::string& key, S& out) {
    if (auto v = r.text(node, key)) out.*kMember = std::move(*v);
  };
}

// Reads a map through its field table. Null (a section with every key commented out) keeps all defaults.
template <class S, std::size_t N>
void read_map(Reader& r, const YAML::Node& node, const std::string& key, const std::array<Field<S>, N>& fields,
              S& out) {
  if (node.IsNull()) return;
  if (!node.IsMap()) {
    r.error(key.empty() ? std::string(kDocumentKey) : key, "must be a map of keys, got " + describe_node(node));
    return;
  }
  std::set<std::string> seen;
  for (const auto& entry : node) {
    if (!entry.first.IsScalar()) {
      r.error(key.empty() ? std::string(kDocumentKey) : key,
              "keys must be plain names, got " + describe_node(entry.first));
      continue;
    }
    const std::string& name = entry.first.Scalar();
    const std::string child = join_key(key, name);
    if (!seen.insert(name).second) {
      r.error(child, "duplicate key '" + name + "'");
      continue;
    }
    const auto field = std::find_if(fields.begin(), fields.end(), [&](const Field<S>& f) { return f.name == name; });
    if (field != fields.end()) {
      r.mark_given(child);
      field->read(r, entry.second, child, out);
      continue;
    }
    std::string message = "unknown key '" + name + "'";
    std::string_view best;
    std::size_t best_distance = kMaxSuggestionDistance + 1;
    for (const auto& f : fields) {
      const std::size_t d = edit_distance(name, f.name);
      if (d < best_distance) best = f.name, best_distance = d;
    }
    if (!best.empty()) message += "; did you mean '" + std::string(best) + "'?";
    r.error(child, std::move(message));
  }
}

}  // namespace uroce::config::detail
