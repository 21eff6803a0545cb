// The pod template is opaque to rpcjob (the API server validates pods), except for
// the parts placement depends on: nodeSelector, tolerations, required node
// affinity and the containers' requests. Those are read strictly; the rest is kept
// as JSON for the operator.

#include "detail/parse_parts.h"
#include "detail/yaml_scalar.h"

namespace rpcjob::api::detail {
namespace {

constexpr const char* kGpuResource = "nvidia.com/gpu";

Toleration readToleration(Reader& r, const YAML::Node& node, const std::string& path) {
  Toleration t;
  if (!r.expectMap(node, path)) return t;
  r.strictKeys(node, path, {"key", "operator", "value", "effect", "tolerationSeconds"});
  if (present(node["key"])) t.key = r.string(node["key"], path + ".key").value_or("");
  if (present(node["operator"])) {
    t.op = r.oneOf(node["operator"], path + ".operator", {"Equal", "Exists"}).value_or("Equal");
  }
  if (present(node["value"])) t.value = r.string(node["value"], path + ".value").value_or("");
  if (present(node["effect"])) {
    t.effect =
        r.oneOf(node["effect"], path + ".effect", {"NoSchedule", "PreferNoSchedule", "NoExecute"})
            .value_or("");
  }
  if (t.op == "Exists" && !t.value.empty()) {
    r.error(path + ".value", node["value"], "must be empty when operator is Exists");
  }
  if (t.key.empty() && t.op != "Exists") {
    r.error(path + ".operator", node, "an empty key requires operator Exists");
  }
  return t;
}

NodeSelectorRequirement readRequirement(Reader& r, const YAML::Node& node,
                                        const std::string& path) {
  NodeSelectorRequirement req;
  if (!r.expectMap(node, path)) return req;
  r.strictKeys(node, path, {"key", "operator", "values"});
  if (present(node["key"])) {
    req.key = r.string(node["key"], path + ".key").value_or("");
  } else {
    r.error(path + ".key", node, "required");
  }
  const auto op = present(node["operator"]) ? r.oneOf(node["operator"], path + ".operator",
                                                      {"In", "NotIn", "Exists", "DoesNotExist"})
                                            : std::nullopt;
  if (!present(node["operator"])) r.error(path + ".operator", node, "required");
  if (op == "NotIn") req.op = SelectorOperator::NotIn;
  if (op == "Exists") req.op = SelectorOperator::Exists;
  if (op == "DoesNotExist") req.op = SelectorOperator::DoesNotExist;
  if (present(node["values"])) req.values = r.stringList(node["values"], path + ".values");
  const bool takesValues = req.op == SelectorOperator::In || req.op == SelectorOperator::NotIn;
  if (op && takesValues && req.values.empty()) {
    r.error(path + ".values", node, std::string("operator ") + *op + " needs at least one value");
  }
  if (op && !takesValues && !req.values.empty()) {
    r.error(path + ".values", node["values"], std::string("operator ") + *op + " takes no values");
  }
  return req;
}

std::vector<NodeSelectorTerm> readRequiredAffinity(Reader& r, const YAML::Node& affinity,
                                                   const std::string& path) {
  std::vector<NodeSelectorTerm> terms;
  if (!r.expectMap(affinity, path)) return terms;
  const YAML::Node nodeAffinity = affinity["nodeAffinity"];
  if (!present(nodeAffinity) || !r.expectMap(nodeAffinity, path + ".nodeAffinity")) return terms;
  const std::string at = path + ".nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution";
  const YAML::Node required = nodeAffinity["requiredDuringSchedulingIgnoredDuringExecution"];
  if (!present(required) || !r.expectMap(required, at)) return terms;
  r.forEach(required["nodeSelectorTerms"], at + ".nodeSelectorTerms",
            [&](const YAML::Node& term, const std::string& termPath) {
              NodeSelectorTerm t;
              if (!r.expectMap(term, termPath)) return;
              // matchFields would pin by node name; rpcjob pins pods itself, and a
              // constraint the planner ignored would make its placement wrong.
              r.strictKeys(term, termPath, {"matchExpressions"});
              if (present(term["matchExpressions"])) {
                r.forEach(term["matchExpressions"], termPath + ".matchExpressions",
                          [&](const YAML::Node& e, const std::string& ePath) {
                            t.matchExpressions.push_back(readRequirement(r, e, ePath));
                          });
              }
              terms.push_back(std::move(t));
            });
  return terms;
}

Container readContainer(Reader& r, const YAML::Node& node, const std::string& path) {
  Container c;
  if (!r.expectMap(node, path)) return c;
  if (present(node["name"])) c.name = r.string(node["name"], path + ".name").value_or("");
  if (present(node["image"])) c.image = r.string(node["image"], path + ".image").value_or("");
  if (present(node["command"])) c.command = r.stringList(node["command"], path + ".command");
  if (present(node["args"])) c.args = r.stringList(node["args"], path + ".args");
  const YAML::Node resources = node["resources"];
  if (!present(resources) || !r.expectMap(resources, path + ".resources")) return c;
  for (const char* kind : {"requests", "limits"}) {
    const YAML::Node list = resources[kind];
    const std::string at = path + ".resources." + kind;
    if (!present(list) || !r.expectMap(list, at)) continue;
    for (const auto& kv : list) {
      const std::string name = kv.first.Scalar();
      const auto value = r.intOrString(kv.second, at + "." + name);
      if (name == kGpuResource) {
        r.error(at + "." + name, kv.first,
                "set spec.workers[].gpusPerWorker instead of the nvidia.com/gpu resource");
      }
      if (!value || std::string(kind) != "requests") continue;
      if (name == "cpu") c.cpuRequest = *value;
      if (name == "memory") c.memoryRequest = *value;
    }
    // A limit without a request is a request of the limit's size (Kubernetes rule).
    if (std::string(kind) == "limits") {
      if (c.cpuRequest.empty() && present(list["cpu"]) && list["cpu"].IsScalar()) {
        c.cpuRequest = list["cpu"].Scalar();
      }
      if (c.memoryRequest.empty() && present(list["memory"]) && list["memory"].IsScalar()) {
        c.memoryRequest = list["memory"].Scalar();
      }
    }
  }
  return c;
}

}  // namespace

PodTemplate readPodTemplate(Reader& r, const YAML::Node& node, const std::string& path) {
  PodTemplate t;
  if (!r.expectMap(node, path)) return t;
  t.json = toJson(node);
  r.strictKeys(node, path, {"metadata", "spec"});
  const YAML::Node spec = node["spec"];
  if (!present(spec) || !r.expectMap(spec, path + ".spec")) return t;
  const std::string at = path + ".spec";
  if (present(spec["nodeSelector"])) {
    t.nodeSelector = r.stringMap(spec["nodeSelector"], at + ".nodeSelector");
  }
  if (present(spec["tolerations"])) {
    r.forEach(spec["tolerations"], at + ".tolerations",
              [&](const YAML::Node& item, const std::string& p) {
                t.tolerations.push_back(readToleration(r, item, p));
              });
  }
  if (present(spec["affinity"])) {
    t.requiredNodeAffinity = readRequiredAffinity(r, spec["affinity"], at + ".affinity");
  }
  if (present(spec["containers"])) {
    r.forEach(spec["containers"], at + ".containers",
              [&](const YAML::Node& item, const std::string& p) {
                t.containers.push_back(readContainer(r, item, p));
              });
  }
  return t;
}

}  // namespace rpcjob::api::detail
