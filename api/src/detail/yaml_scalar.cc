#include "detail/yaml_scalar.h"

#include <cstdio>
#include <regex>

namespace rpcjob::api::detail {
namespace {

bool isOneOf(const std::string& s, std::initializer_list<const char*> words) {
  for (const char* w : words) {
    if (s == w) return true;
  }
  return false;
}

}  // namespace

ScalarKind classify(const YAML::Node& node) {
  if (node.IsNull()) return ScalarKind::Null;
  if (node.Tag() == "!") return ScalarKind::String;  // quoted
  const std::string& s = node.Scalar();
  if (isOneOf(s, {"", "~", "null", "Null", "NULL"})) return ScalarKind::Null;
  if (isOneOf(
          s, {"true", "True", "TRUE", "false", "False", "FALSE", "yes", "Yes", "YES", "no", "No",
              "NO",   "on",   "On",   "ON",    "off",   "Off",   "OFF", "y",   "Y",   "n",  "N"})) {
    return ScalarKind::Bool;
  }
  static const std::regex kInt("[-+]?(0|[1-9][0-9]*)");
  static const std::regex kFloat(
      "[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?|[-+]?\\.(inf|Inf|INF)|\\.(nan|NaN|"
      "NAN)");
  if (std::regex_match(s, kInt)) return ScalarKind::Int;
  if (std::regex_match(s, kFloat)) return ScalarKind::Float;
  return ScalarKind::String;
}

bool boolValue(const std::string& text) {
  return isOneOf(text, {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", "y", "Y"});
}

const char* kindName(ScalarKind kind) {
  switch (kind) {
    case ScalarKind::Null:
      return "null";
    case ScalarKind::Bool:
      return "a boolean";
    case ScalarKind::Int:
      return "an integer";
    case ScalarKind::Float:
      return "a number";
    case ScalarKind::String:
      return "a string";
  }
  return "a value";
}

std::string jsonString(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
          out += buffer;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string toJson(const YAML::Node& node) {
  if (!node || node.IsNull()) return "null";
  if (node.IsSequence()) {
    std::string out = "[";
    for (std::size_t i = 0; i < node.size(); ++i) {
      if (i) out += ",";
      out += toJson(node[i]);
    }
    return out + "]";
  }
  if (node.IsMap()) {
    std::string out = "{";
    bool first = true;
    for (const auto& kv : node) {
      if (!first) out += ",";
      first = false;
      out += jsonString(kv.first.Scalar()) + ":" + toJson(kv.second);
    }
    return out + "}";
  }
  switch (classify(node)) {
    case ScalarKind::Null:
      return "null";
    case ScalarKind::Bool:
      return boolValue(node.Scalar()) ? "true" : "false";
    case ScalarKind::Int:
      return node.Scalar().front() == '+' ? node.Scalar().substr(1) : node.Scalar();
    case ScalarKind::Float: {
      // JSON has no .inf/.nan and no leading '.', '+' or trailing '.': keep those as strings.
      static const std::regex kJsonNumber("-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][-+]?[0-9]+)?");
      if (std::regex_match(node.Scalar(), kJsonNumber)) return node.Scalar();
      return jsonString(node.Scalar());
    }
    case ScalarKind::String:
      return jsonString(node.Scalar());
  }
  return "null";
}

}  // namespace rpcjob::api::detail

namespace rpcjob::api::detail {
namespace {

void emit(YAML::Emitter& out, const YAML::Node& node) {
  if (!node || node.IsNull()) {
    out << YAML::Null;
  } else if (node.IsSequence()) {
    out << YAML::BeginSeq;
    for (std::size_t i = 0; i < node.size(); ++i) emit(out, node[i]);
    out << YAML::EndSeq;
  } else if (node.IsMap()) {
    out << YAML::BeginMap;
    for (const auto& kv : node) {
      out << YAML::Key;
      emit(out, kv.first);
      out << YAML::Value;
      emit(out, kv.second);
    }
    out << YAML::EndMap;
  } else if (node.Tag() == "!") {
    // A string: quote it when its plain form would read as another kind.
    YAML::Node plain(node.Scalar());
    const bool ambiguous = classify(plain) != ScalarKind::String;
    if (ambiguous) out << YAML::DoubleQuoted;
    out << node.Scalar();
  } else {
    out << node.Scalar();
  }
}

}  // namespace

std::string toYamlText(const YAML::Node& node) {
  YAML::Emitter out;
  emit(out, node);
  return std::string(out.c_str()) + "\n";
}

}  // namespace rpcjob::api::detail
