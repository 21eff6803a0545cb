#pragma once
// Errors found in a manifest: each names the field path and, where known, the
// line, e.g. "spec.workers[1].replicas (line 12): must be >= 1, got -2".
// Parsing and validation return every error they find, not just the first.

#include <map>
#include <string>
#include <vector>

namespace rpcjob::api {

struct FieldError {
  std::string path;  // "spec.workers[1].replicas"
  int line = 0;      // 1-based; 0 when unknown
  std::string message;

  std::string toString() const;
};

// Where each field of a parsed manifest was, by path (1-based lines). Validation
// uses it to put lines on errors about values that parsed fine.
using SourceMap = std::map<std::string, int>;

// One error per line, in order.
std::string formatErrors(const std::vector<FieldError>& errors);

}  // namespace rpcjob::api
