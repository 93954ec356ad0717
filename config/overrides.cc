// Command-line overrides (LoadOptions::overrides) and LoadOptions::only_port, applied to the YAML document before
// it is read, so an override is validated exactly like the file.
#include "config/sections.h"
#include "config/yaml_reader.h"

namespace uroce::config::detail {

namespace {

// The element of a list that a selector names: an index ("0"), or the value of its `name` key ("veth").
std::optional<std::size_t> find_element(const YAML::Node& list, const std::string& selector) {
  if (!list.IsSequence()) return std::nullopt;
  const std::optional<ParsedInteger> index = parse_integer(selector);
  for (std::size_t i = 0; i < list.size(); ++i) {
    const YAML::Node element = list[i];
    const bool match = index ? (!index->negative && index->magnitude == i)
                             : (element.IsMap() && element["name"] && element["name"].IsScalar() &&
                                element["name"].Scalar() == selector);
    if (match) return i;
  }
  return std::nullopt;
}

std::string quoted(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out.append(1, '\'').append(text).append(1, '\'');
  return out;
}

}  // namespace

// A YAML::Node is a handle, so `root` is const and still edited: `node` starts as another handle on its document.
std::optional<std::string> apply_override(const YAML::Node& root, const Override& o) {
  std::string_view rest = o.key;
  YAML::Node node;
  node.reset(root);
  if (rest.empty()) return "is empty: give a key like rdma.path_mtu or ports[0].device";
  while (!rest.empty()) {
    const std::size_t end = rest.find_first_of(".[");
    const std::string_view name = rest.substr(0, end);
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end);
    if (name.empty()) return "has an empty name before '" + std::string(rest.substr(0, 1)) + "'";
    if (node.IsDefined() && !node.IsNull() && !node.IsMap()) {
      return "cannot take '" + std::string(name) + "': what holds it is " + describe_node(node) + ", not a map";
    }
    node.reset(node[std::string(name)]);
    while (!rest.empty() && rest.front() == '[') {
      const std::size_t close = rest.find(']');
      if (close == std::string_view::npos) return "has a '[' without its ']'";
      const std::string selector(rest.substr(1, close - 1));
      rest.remove_prefix(close + 1);
      // quoted() rather than "'" + std::string(name): GCC 12 at -O3 reports a false -Wrestrict on a literal
      // prepended to a temporary string (GCC PR 105651).
      if (!node.IsSequence()) return quoted(name) + " is " + describe_node(node) + ", not a list";
      const std::optional<std::size_t> found = find_element(node, selector);
      if (!found) {
        return quoted(name) + " has no element " + (parse_integer(selector) ? "" : "named ") + quoted(selector) +
               " (it has " + std::to_string(node.size()) + ")";
      }
      node.reset(node[*found]);
    }
    if (!rest.empty()) {
      if (rest.front() != '.') return "expected '.' or '[' at '" + std::string(rest) + "'";
      rest.remove_prefix(1);
      if (rest.empty()) return "ends with '.'";
    }
  }
  node = YAML::Load(o.value);
  return std::nullopt;
}

std::optional<std::string> keep_only_port(YAML::Node root, const std::string& selector) {
  const std::optional<std::size_t> found = find_element(root["ports"], selector);
  if (!found) return "has no port " + std::string(parse_integer(selector) ? "" : "named ") + "'" + selector + "'";
  YAML::Node kept(YAML::NodeType::Sequence);
  kept.push_back(root["ports"][*found]);
  root["ports"] = kept;
  return std::nullopt;
}

}  // namespace uroce::config::detail
