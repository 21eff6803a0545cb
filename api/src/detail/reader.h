#pragma once
// Strict, error-collecting reads of a YAML tree: each read records the field's
// line in the source map and, on a wrong type, an error naming path and line,
// then carries on so that one pass reports every problem.

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "rpcjob/api/errors.h"

namespace rpcjob::api::detail {

int lineOf(const YAML::Node& node);    // 1-based, 0 when unknown
bool present(const YAML::Node& node);  // defined and not null

class Reader {
 public:
  Reader(std::vector<FieldError>& errors, SourceMap& lines) : errors_(errors), lines_(lines) {}

  void error(const std::string& path, const YAML::Node& at, const std::string& message);
  void note(const std::string& path, const YAML::Node& at);

  // Type checks: record an error and return false when the node is of another kind.
  bool expectMap(const YAML::Node& node, const std::string& path);
  bool expectList(const YAML::Node& node, const std::string& path);
  // Every key of `map` must be in `known`.
  void strictKeys(const YAML::Node& map, const std::string& path,
                  const std::set<std::string>& known);

  std::optional<std::string> string(const YAML::Node& node, const std::string& path);
  std::optional<int64_t> integer(const YAML::Node& node, const std::string& path);
  std::optional<int> smallInteger(const YAML::Node& node, const std::string& path);
  std::optional<bool> boolean(const YAML::Node& node, const std::string& path);
  // A Kubernetes int-or-string (quantities, workersPerPod): the text either way.
  std::optional<std::string> intOrString(const YAML::Node& node, const std::string& path);
  // One of `allowed`, else an error listing them.
  std::optional<std::string> oneOf(const YAML::Node& node, const std::string& path,
                                   const std::vector<std::string>& allowed);

  std::vector<std::string> stringList(const YAML::Node& node, const std::string& path);
  std::map<std::string, std::string> stringMap(const YAML::Node& node, const std::string& path);
  // Calls f(item, "path[i]") for each item of a list.
  void forEach(const YAML::Node& list, const std::string& path,
               const std::function<void(const YAML::Node&, const std::string&)>& f);

 private:
  std::vector<FieldError>& errors_;
  SourceMap& lines_;
};

}  // namespace rpcjob::api::detail
