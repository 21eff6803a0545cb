#pragma once
// A minimal JSON writer for typed values (the status and spec the operator sends to
// the API server). Keys keep the order they are written in.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "detail/yaml_scalar.h"

namespace rpcjob::api::detail {

class JsonObject {
 public:
  JsonObject& raw(const std::string& key, const std::string& json) {
    body_ += (body_.empty() ? "" : ",") + jsonString(key) + ":" + json;
    return *this;
  }
  JsonObject& str(const std::string& key, const std::string& value) {
    return raw(key, jsonString(value));
  }
  JsonObject& num(const std::string& key, int64_t value) { return raw(key, std::to_string(value)); }
  JsonObject& boolean(const std::string& key, bool value) {
    return raw(key, value ? "true" : "false");
  }
  std::string json() const { return "{" + body_ + "}"; }

 private:
  std::string body_;
};

inline std::string jsonArray(const std::vector<std::string>& jsonItems) {
  std::string out = "[";
  for (std::size_t i = 0; i < jsonItems.size(); ++i) out += (i ? "," : "") + jsonItems[i];
  return out + "]";
}

inline std::string jsonStrings(const std::vector<std::string>& values) {
  std::vector<std::string> items;
  for (const auto& v : values) items.push_back(jsonString(v));
  return jsonArray(items);
}

inline std::string jsonStringMap(const std::map<std::string, std::string>& values) {
  JsonObject o;
  for (const auto& [k, v] : values) o.str(k, v);
  return o.json();
}

}  // namespace rpcjob::api::detail
