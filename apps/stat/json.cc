#include "apps/stat/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace uroce::stat {

namespace {

constexpr int kMaxDepth = 16;  // telemetry answers nest two levels; anything deeper is not one

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  std::optional<Json> document() {
    auto value = parse_value(0);
    skip_space();
    if (!value || pos_ != text_.size()) return std::nullopt;
    return value;
  }

 private:
  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\n' || text_[pos_] == '\r' || text_[pos_] == '\t'))
      ++pos_;
  }
  bool take(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool take_word(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  std::optional<Json> parse_value(int depth) {
    if (depth > kMaxDepth) return std::nullopt;
    skip_space();
    if (pos_ >= text_.size()) return std::nullopt;
    const char c = text_[pos_];
    if (c == '{') return parse_object(depth);
    if (c == '[') return parse_array(depth);
    if (c == '"') {
      auto s = parse_string();
      if (!s) return std::nullopt;
      return Json(std::move(*s));
    }
    if (take_word("true")) return Json(true);
    if (take_word("false")) return Json(false);
    if (take_word("null")) return Json();
    return parse_number();
  }

  std::optional<Json> parse_object(int depth) {
    ++pos_;  // '{'
    Json::Object object;
    if (take('}')) return Json(std::move(object));
    do {
      skip_space();
      auto key = parse_string();
      if (!key || !take(':')) return std::nullopt;
      auto value = parse_value(depth + 1);
      if (!value) return std::nullopt;
      object.insert_or_assign(std::move(*key), std::move(*value));
    } while (take(','));
    if (!take('}')) return std::nullopt;
    return Json(std::move(object));
  }

  std::optional<Json> parse_array(int depth) {
    ++pos_;  // '['
    Json::Array array;
    if (take(']')) return Json(std::move(array));
    do {
      auto value = parse_value(depth + 1);
      if (!value) return std::nullopt;
      array.push_back(std::move(*value));
    } while (take(','));
    if (!take(']')) return std::nullopt;
    return Json(std::move(array));
  }

  // Strings as telemetry writes them: escapes for quote, backslash, slash and control characters. A \u escape
  // outside ASCII is kept as UTF-8.
  std::optional<std::string> parse_string() {
    if (pos_ >= text_.size() || text_[pos_] != '"') return std::nullopt;
    ++pos_;
    std::string out;
    while (pos_ < text_.size()) {
      const char c = text_[pos_++];
      if (c == '"') return out;
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= text_.size()) return std::nullopt;
      const char e = text_[pos_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out.push_back(e);
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          unsigned code = 0;
          if (pos_ + 4 > text_.size()) return std::nullopt;
          const auto [end, ec] = std::from_chars(text_.data() + pos_, text_.data() + pos_ + 4, code, 16);
          if (ec != std::errc() || end != text_.data() + pos_ + 4) return std::nullopt;
          pos_ += 4;
          if (code < 0x80) {
            out.push_back(static_cast<char>(code));
          } else if (code < 0x800) {
            out.push_back(static_cast<char>(0xC0 | (code >> 6)));
            out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
          } else {
            out.push_back(static_cast<char>(0xE0 | (code >> 12)));
            out.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
            out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
          }
          break;
        }
        default:
          return std::nullopt;
      }
    }
    return std::nullopt;
  }

  std::optional<Json> parse_number() {
    const std::size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isdigit(static_cast<unsigned char>(text_[pos_])) != 0 || text_[pos_] == '-' || text_[pos_] == '+' ||
            text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E'))
      ++pos_;
    const std::string_view token = text_.substr(start, pos_ - start);
    if (token.empty()) return std::nullopt;
    const char* first = token.data();
    const char* last = token.data() + token.size();
    if (token.find_first_of(".eE") == std::string_view::npos) {
      if (token.front() == '-') {
        int64_t value = 0;
        const auto [end, ec] = std::from_chars(first, last, value);
        if (ec == std::errc() && end == last) return Json(value);
      } else {
        uint64_t value = 0;
        const auto [end, ec] = std::from_chars(first, last, value);
        if (ec == std::errc() && end == last) return Json(value);
      }
    }
    double value = 0;
    const auto [end, ec] = std::from_chars(first, last, value);
    if (ec != std::errc() || end != last) return std::nullopt;
    return Json(value);
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

void dump_string(const std::string& s, std::string& out) {
  out.push_back('"');
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escape[8];
      std::snprintf(escape, sizeof(escape), "\\u%04x", static_cast<unsigned>(c));
      out.append(escape);
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

}  // namespace

std::optional<uint64_t> Json::unsigned_integer() const noexcept {
  if (const auto* v = std::get_if<uint64_t>(&value_)) return *v;
  if (const auto* v = std::get_if<int64_t>(&value_); v != nullptr && *v >= 0) return static_cast<uint64_t>(*v);
  return std::nullopt;
}

std::optional<double> Json::number() const noexcept {
  if (const auto* v = std::get_if<uint64_t>(&value_)) return static_cast<double>(*v);
  if (const auto* v = std::get_if<int64_t>(&value_)) return static_cast<double>(*v);
  if (const auto* v = std::get_if<double>(&value_)) return *v;
  return std::nullopt;
}

const Json* Json::find(const std::string& key) const noexcept {
  const Object* o = object();
  if (o == nullptr) return nullptr;
  const auto it = o->find(key);
  return it == o->end() ? nullptr : &it->second;
}

std::string Json::dump() const {
  std::string out;
  if (is_null()) {
    out = "null";
  } else if (const auto* b = std::get_if<bool>(&value_)) {
    out = *b ? "true" : "false";
  } else if (const auto* u = std::get_if<uint64_t>(&value_)) {
    out = std::to_string(*u);
  } else if (const auto* i = std::get_if<int64_t>(&value_)) {
    out = std::to_string(*i);
  } else if (const auto* d = std::get_if<double>(&value_)) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.6g", std::isfinite(*d) ? *d : 0.0);
    out = text;
  } else if (const auto* s = string()) {
    dump_string(*s, out);
  } else if (const auto* a = array()) {
    out.push_back('[');
    for (std::size_t n = 0; n < a->size(); ++n) out.append(n == 0 ? "" : ",").append((*a)[n].dump());
    out.push_back(']');
  } else if (const auto* o = object()) {
    out.push_back('{');
    bool first = true;
    for (const auto& [key, value] : *o) {
      if (!first) out.push_back(',');
      first = false;
      dump_string(key, out);
      out.push_back(':');
      out.append(value.dump());
    }
    out.push_back('}');
  }
  return out;
}

std::optional<Json> parse_json(std::string_view text) { return Parser(text).document(); }

}  // namespace uroce::stat
