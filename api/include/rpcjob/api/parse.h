#pragma once
// Reading an RpcJob manifest (YAML, or JSON as the API server sends it: yaml-cpp
// reads both). Strict: unknown fields and wrong types are errors, except inside
// metadata (the API server adds many fields there) and inside the opaque pod
// template (the API server validates pods). Absent fields get their defaults.
//
// The manifest is parsed and then validated (validate.h); every error is returned.

#include <string>
#include <vector>

#include "rpcjob/api/errors.h"
#include "rpcjob/api/types.h"

namespace rpcjob::api {

struct ParseResult {
  RpcJob job;                      // meaningful only when ok()
  std::vector<FieldError> errors;  // parse errors, then validation errors
  SourceMap lines;                 // field path -> line

  bool ok() const { return errors.empty(); }
};

// Parses and validates one RpcJob document.
ParseResult parseRpcJob(const std::string& text);

// Parses only (no validation): for tools that want to show parse errors apart.
ParseResult parseRpcJobUnvalidated(const std::string& text);

}  // namespace rpcjob::api
