#include <yaml-cpp/yaml.h>

#include <regex>
#include <stdexcept>

#include "rpcjob/operator/object.h"

namespace rpcjob::kube {
namespace {

void emit(const YAML::Node& n, std::string& out) {
  switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      out += "null";
      return;
    case YAML::NodeType::Sequence: {
      out += '[';
      bool first = true;
      for (const auto& item : n) {
        if (!first) out += ',';
        first = false;
        emit(item, out);
      }
      out += ']';
      return;
    }
    case YAML::NodeType::Map: {
      out += '{';
      bool first = true;
      for (const auto& kv : n) {
        if (!first) out += ',';
        first = false;
        out += jsonQuote(kv.first.as<std::string>());
        out += ':';
        emit(kv.second, out);
      }
      out += '}';
      return;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = n.Scalar();
      if (n.Tag() != "!") {  // plain (unquoted): YAML 1.2 core schema types
        static const std::regex kInt("[-+]?[0-9]+");
        static const std::regex kFloat("[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?");
        if (s == "null" || s == "~" || s == "Null" || s == "NULL") {
          out += "null";
          return;
        }
        if (s == "true" || s == "True" || s == "TRUE" || s == "false" || s == "False" ||
            s == "FALSE") {
          out += (s[0] == 't' || s[0] == 'T') ? "true" : "false";
          return;
        }
        if (std::regex_match(s, kInt) || std::regex_match(s, kFloat)) {
          out += s[0] == '+' ? s.substr(1) : s;
          return;
        }
      }
      out += jsonQuote(s);
      return;
    }
  }
}

}  // namespace

std::string yamlToJson(const std::string& yaml) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument(std::string("not YAML: ") + e.what());
  }
  std::string out;
  emit(root, out);
  return out;
}

}  // namespace rpcjob::kube
