#pragma once
// How a YAML scalar reads as JSON would: the API server speaks JSON, and a plain
// YAML scalar such as `true` or `8` is a boolean or a number there, never a string.
// Quoted scalars are always strings. Booleans follow YAML 1.1 as kubectl's YAML
// reader does (yes/no/on/off are booleans), so `rdma: yes` is caught as a
// non-string just as the API server would catch it.

#include <yaml-cpp/yaml.h>

#include <string>

namespace rpcjob::api::detail {

enum class ScalarKind { Null, Bool, Int, Float, String };

ScalarKind classify(const YAML::Node& scalar);
bool boolValue(const std::string& text);  // for a scalar classified Bool
const char* kindName(ScalarKind kind);    // "a boolean", "an integer", ...

// JSON text for a YAML subtree (maps, lists, scalars by their kind).
std::string toJson(const YAML::Node& node);
// A JSON string literal, quoted and escaped.
std::string jsonString(const std::string& s);

}  // namespace rpcjob::api::detail

namespace rpcjob::api::detail {

// Block-style YAML for a tree read from JSON or YAML; strings that would read back
// as something else (e.g. "true", "8") are quoted.
std::string toYamlText(const YAML::Node& node);

}  // namespace rpcjob::api::detail
