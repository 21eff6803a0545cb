#pragma once
// Kubernetes objects as the operator sees them: the metadata parsed into fields,
// the whole object kept as the JSON text the server sent. Code that needs the
// spec or status parses `json` itself (it is valid YAML too, so the manifest
// model's yaml-cpp parser reads it) or picks single fields with jsonString().
// No JSON library type appears in this header.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rpcjob::kube {

struct OwnerReference {
  std::string apiVersion;
  std::string kind;
  std::string name;
  std::string uid;
  bool controller = false;
};

struct ObjectMeta {
  std::string name;
  std::string namespace_;
  std::string uid;
  std::string resourceVersion;
  int64_t generation = 0;
  std::string creationTimestamp;
  std::string deletionTimestamp;  // empty unless being deleted
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::vector<OwnerReference> ownerReferences;
  std::vector<std::string> finalizers;

  // The informer cache key: "namespace/name", or "name" for cluster objects.
  std::string key() const { return namespace_.empty() ? name : namespace_ + "/" + name; }
  // The owner reference with controller=true, if any.
  const OwnerReference* controllerRef() const;
};

struct Object {
  std::string apiVersion;
  std::string kind;
  ObjectMeta metadata;
  std::string json;  // the complete object
};
using ObjectPtr = std::shared_ptr<const Object>;

struct ObjectList {
  std::vector<Object> items;
  std::string resourceVersion;  // of the list: where a watch starts
};

// Parses one object. Throws std::invalid_argument on text that is not a JSON
// object.
Object parseObject(std::string_view json);

// The string (or number/bool, as text) at a JSON pointer ("/status/phase"), or
// nullopt when absent or the text is not JSON.
std::optional<std::string> jsonString(std::string_view json, std::string_view pointer);

// Quotes and escapes a string for JSON.
std::string jsonQuote(std::string_view s);

}  // namespace rpcjob::kube

namespace rpcjob::kube {

// Converts one YAML document to JSON text (for create/replace of manifests kept
// as YAML). Plain scalars that read as null, true/false, integers or floats
// become JSON literals; quoted scalars stay strings. Throws std::invalid_argument
// on text that is not YAML.
std::string yamlToJson(const std::string& yaml);

}  // namespace rpcjob::kube
