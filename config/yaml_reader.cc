// The non-template parts of yaml_reader.h.
#include "config/yaml_reader.h"

#include <cctype>
#include <charconv>
#include <system_error>

namespace uroce::config::detail {

std::string join_key(const std::string& parent, std::string_view name) {
  return parent.empty() ? std::string(name) : parent + "." + std::string(name);
}

std::string index_key(const std::string& parent, std::size_t i) { return parent + "[" + std::to_string(i) + "]"; }

std::string describe_node(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a map";
  return "'" + node.Scalar() + "'";
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      const bool same =
          std::tolower(static_cast<unsigned char>(a[i - 1])) == std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::optional<ParsedInteger> parse_integer(std::string_view text) {
  ParsedInteger out;
  if (!text.empty() && (text.front() == '-' || text.front() == '+')) {
    out.negative = text.front() == '-';
    text.remove_prefix(1);
  }
  int base = 10;
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X')) {
    base = 16;
    text.remove_prefix(2);
  }
  if (text.empty()) return std::nullopt;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out.magnitude, base);
  if (end != text.data() + text.size()) {
    // from_chars stops at the end of the digits even on overflow, so trailing junk is always "not a number".
    return std::nullopt;
  }
  if (ec == std::errc::result_out_of_range) {
    out.overflow = true;
  } else if (ec != std::errc()) {
    return std::nullopt;
  }
  return out;
}

}  // namespace uroce::config::detail
