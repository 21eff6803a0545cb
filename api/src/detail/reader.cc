#include "detail/reader.h"

#include <limits>

#include "detail/yaml_scalar.h"

namespace rpcjob::api::detail {

int lineOf(const YAML::Node& node) {
  if (!node.IsDefined()) return 0;
  const int line = node.Mark().line;
  return line < 0 ? 0 : line + 1;
}

bool present(const YAML::Node& node) {
  return node.IsDefined() && !node.IsNull();
}

void Reader::error(const std::string& path, const YAML::Node& at, const std::string& message) {
  errors_.push_back({path, lineOf(at), message});
}

void Reader::note(const std::string& path, const YAML::Node& at) {
  const int line = lineOf(at);
  if (line > 0) lines_[path] = line;
}

bool Reader::expectMap(const YAML::Node& node, const std::string& path) {
  note(path, node);
  if (node.IsMap()) return true;
  error(path, node, "expected a mapping");
  return false;
}

bool Reader::expectList(const YAML::Node& node, const std::string& path) {
  note(path, node);
  if (node.IsSequence()) return true;
  error(path, node, "expected a list");
  return false;
}

void Reader::strictKeys(const YAML::Node& map, const std::string& path,
                        const std::set<std::string>& known) {
  for (const auto& kv : map) {
    const std::string key = kv.first.Scalar();
    if (known.count(key)) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    error(path.empty() ? key : path + "." + key, kv.first,
          "unknown field '" + key + "' (known: " + list + ")");
  }
}

std::optional<std::string> Reader::string(const YAML::Node& node, const std::string& path) {
  note(path, node);
  if (!node.IsScalar()) {
    error(path, node, "expected a string");
    return std::nullopt;
  }
  const ScalarKind kind = classify(node);
  if (kind != ScalarKind::String) {
    error(path, node,
          std::string("expected a string, got ") + kindName(kind) + " (quote it: \"" +
              node.Scalar() + "\")");
    return std::nullopt;
  }
  return node.Scalar();
}

std::optional<int64_t> Reader::integer(const YAML::Node& node, const std::string& path) {
  note(path, node);
  if (!node.IsScalar() || classify(node) != ScalarKind::Int) {
    error(path, node,
          "expected an integer" + (node.IsScalar() ? ", got '" + node.Scalar() + "'" : ""));
    return std::nullopt;
  }
  try {
    return node.as<int64_t>();
  } catch (const YAML::Exception&) {
    error(path, node, "integer out of range: " + node.Scalar());
    return std::nullopt;
  }
}

std::optional<int> Reader::smallInteger(const YAML::Node& node, const std::string& path) {
  const auto value = integer(node, path);
  if (!value) return std::nullopt;
  if (*value < std::numeric_limits<int>::min() || *value > std::numeric_limits<int>::max()) {
    error(path, node, "integer out of range: " + node.Scalar());
    return std::nullopt;
  }
  return static_cast<int>(*value);
}

std::optional<bool> Reader::boolean(const YAML::Node& node, const std::string& path) {
  note(path, node);
  if (!node.IsScalar() || classify(node) != ScalarKind::Bool) {
    error(path, node,
          "expected true or false" + (node.IsScalar() ? ", got '" + node.Scalar() + "'" : ""));
    return std::nullopt;
  }
  return boolValue(node.Scalar());
}

std::optional<std::string> Reader::intOrString(const YAML::Node& node, const std::string& path) {
  note(path, node);
  if (node.IsScalar()) {
    const ScalarKind kind = classify(node);
    if (kind == ScalarKind::String || kind == ScalarKind::Int || kind == ScalarKind::Float) {
      return node.Scalar();
    }
  }
  error(path, node, "expected an integer or a string");
  return std::nullopt;
}

std::optional<std::string> Reader::oneOf(const YAML::Node& node, const std::string& path,
                                         const std::vector<std::string>& allowed) {
  const auto value = intOrString(node, path);
  if (!value) return std::nullopt;
  for (const auto& a : allowed) {
    if (*value == a) return value;
  }
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  error(path, node, "must be one of " + list + ", got '" + *value + "'");
  return std::nullopt;
}

std::vector<std::string> Reader::stringList(const YAML::Node& node, const std::string& path) {
  std::vector<std::string> out;
  forEach(node, path, [&](const YAML::Node& item, const std::string& at) {
    if (auto s = string(item, at)) out.push_back(*s);
  });
  return out;
}

std::map<std::string, std::string> Reader::stringMap(const YAML::Node& node,
                                                     const std::string& path) {
  std::map<std::string, std::string> out;
  if (!expectMap(node, path)) return out;
  for (const auto& kv : node) {
    const std::string key = kv.first.Scalar();
    if (auto s = string(kv.second, path + "." + key)) out[key] = *s;
  }
  return out;
}

void Reader::forEach(const YAML::Node& list, const std::string& path,
                     const std::function<void(const YAML::Node&, const std::string&)>& f) {
  if (!expectList(list, path)) return;
  for (std::size_t i = 0; i < list.size(); ++i) f(list[i], path + "[" + std::to_string(i) + "]");
}

}  // namespace rpcjob::api::detail
