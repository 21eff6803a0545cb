#include "rpcjob/operator/object.h"

#include <stdexcept>

#include "json_util.h"

namespace rpcjob::kube {
namespace detail {

std::optional<web::json::value> parseJson(std::string_view text, std::string* error) {
  std::error_code ec;
  web::json::value v = web::json::value::parse(std::string(text), ec);
  if (ec) {
    if (error) *error = ec.message();
    return std::nullopt;
  }
  return v;
}

std::string getString(const web::json::value& v, const char* key) {
  if (!v.is_object()) return {};
  const auto& obj = v.as_object();
  auto it = obj.find(key);
  if (it == obj.end()) return {};
  if (it->second.is_string()) return it->second.as_string();
  if (it->second.is_null()) return {};
  return it->second.serialize();
}

int64_t getInt(const web::json::value& v, const char* key) {
  if (!v.is_object()) return 0;
  const auto& obj = v.as_object();
  auto it = obj.find(key);
  if (it == obj.end() || !it->second.is_number()) return 0;
  return it->second.as_number().to_int64();
}

namespace {
std::map<std::string, std::string> stringMap(const web::json::value& v, const char* key) {
  std::map<std::string, std::string> out;
  if (!v.is_object() || !v.has_object_field(key)) return out;
  for (const auto& [k, val] : v.at(key).as_object()) {
    out[k] = val.is_string() ? val.as_string() : val.serialize();
  }
  return out;
}
}  // namespace

ObjectMeta parseMeta(const web::json::value& m) {
  ObjectMeta meta;
  if (!m.is_object()) return meta;
  meta.name = getString(m, "name");
  meta.namespace_ = getString(m, "namespace");
  meta.uid = getString(m, "uid");
  meta.resourceVersion = getString(m, "resourceVersion");
  meta.generation = getInt(m, "generation");
  meta.creationTimestamp = getString(m, "creationTimestamp");
  meta.deletionTimestamp = getString(m, "deletionTimestamp");
  meta.labels = stringMap(m, "labels");
  meta.annotations = stringMap(m, "annotations");
  if (m.has_array_field("ownerReferences")) {
    for (const auto& r : m.at("ownerReferences").as_array()) {
      OwnerReference ref;
      ref.apiVersion = getString(r, "apiVersion");
      ref.kind = getString(r, "kind");
      ref.name = getString(r, "name");
      ref.uid = getString(r, "uid");
      ref.controller = r.has_boolean_field("controller") && r.at("controller").as_bool();
      meta.ownerReferences.push_back(std::move(ref));
    }
  }
  if (m.has_array_field("finalizers")) {
    for (const auto& f : m.at("finalizers").as_array()) {
      if (f.is_string()) meta.finalizers.push_back(f.as_string());
    }
  }
  return meta;
}

Object objectFromJson(const web::json::value& v) {
  if (!v.is_object()) throw std::invalid_argument("not a JSON object");
  Object o;
  o.apiVersion = getString(v, "apiVersion");
  o.kind = getString(v, "kind");
  if (v.has_object_field("metadata")) o.metadata = parseMeta(v.at("metadata"));
  o.json = v.serialize();
  return o;
}

}  // namespace detail

const OwnerReference* ObjectMeta::controllerRef() const {
  for (const auto& r : ownerReferences) {
    if (r.controller) return &r;
  }
  return nullptr;
}

Object parseObject(std::string_view json) {
  std::string error;
  auto v = detail::parseJson(json, &error);
  if (!v) throw std::invalid_argument("not JSON: " + error);
  Object o = detail::objectFromJson(*v);
  o.json = std::string(json);
  return o;
}

std::optional<std::string> jsonString(std::string_view json, std::string_view pointer) {
  auto root = detail::parseJson(json);
  if (!root) return std::nullopt;
  const web::json::value* cur = &*root;
  size_t pos = 0;
  while (pos < pointer.size()) {
    if (pointer[pos] != '/') return std::nullopt;
    size_t end = pointer.find('/', pos + 1);
    if (end == std::string_view::npos) end = pointer.size();
    std::string token(pointer.substr(pos + 1, end - pos - 1));
    for (size_t i; (i = token.find("~1")) != std::string::npos;) token.replace(i, 2, "/");
    for (size_t i; (i = token.find("~0")) != std::string::npos;) token.replace(i, 2, "~");
    if (cur->is_object()) {
      const auto& obj = cur->as_object();
      auto it = obj.find(token);
      if (it == obj.end()) return std::nullopt;
      cur = &it->second;
    } else if (cur->is_array()) {
      char* endp = nullptr;
      unsigned long idx = std::strtoul(token.c_str(), &endp, 10);
      if (token.empty() || *endp != '\0' || idx >= cur->as_array().size()) return std::nullopt;
      cur = &cur->as_array().at(idx);
    } else {
      return std::nullopt;
    }
    pos = end;
  }
  if (cur->is_null()) return std::nullopt;
  if (cur->is_string()) return cur->as_string();
  return cur->serialize();
}

std::string jsonQuote(std::string_view s) {
  return web::json::value::string(std::string(s)).serialize();
}

}  // namespace rpcjob::kube
