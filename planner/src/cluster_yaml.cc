#include "rpcjob/planner/cluster_yaml.h"

#include <yaml-cpp/yaml.h>

#include <set>

#include "rpcjob/api/quantity.h"

namespace rpcjob::planner {
namespace {

class NodeReader {
 public:
  explicit NodeReader(std::vector<api::FieldError>& errors) : errors_(errors) {}

  void error(const std::string& path, const YAML::Node& at, const std::string& message) {
    const int line = at.IsDefined() && at.Mark().line >= 0 ? at.Mark().line + 1 : 0;
    errors_.push_back({path, line, message});
  }

  bool isMap(const YAML::Node& node, const std::string& path) {
    if (node.IsMap()) return true;
    error(path, node, "expected a mapping");
    return false;
  }

  std::string string(const YAML::Node& node, const std::string& path) {
    if (node.IsScalar()) return node.Scalar();
    error(path, node, "expected a string");
    return "";
  }

  int64_t count(const YAML::Node& node, const std::string& path) {
    try {
      if (node.IsScalar() && node.Tag() != "!") {
        const auto v = node.as<int64_t>();
        if (v >= 0) return v;
      }
    } catch (const YAML::Exception&) {
    }
    error(path, node, "expected a whole number >= 0");
    return 0;
  }

  bool flag(const YAML::Node& node, const std::string& path) {
    try {
      if (node.IsScalar() && node.Tag() != "!") return node.as<bool>();
    } catch (const YAML::Exception&) {
    }
    error(path, node, "expected true or false");
    return false;
  }

  // cpu -> millicores, memory -> bytes.
  int64_t quantity(const YAML::Node& node, const std::string& path, bool milli) {
    const auto q = node.IsScalar() ? api::parseQuantity(node.Scalar()) : std::nullopt;
    if (!q || q->milli < 0) {
      error(path, node, "expected a quantity >= 0 (e.g. 8, 500m, 64Gi)");
      return 0;
    }
    return milli ? q->milli : q->value();
  }

  void keys(const YAML::Node& map, const std::string& path, const std::set<std::string>& known) {
    for (const auto& kv : map) {
      if (!known.count(kv.first.Scalar())) {
        error(path.empty() ? kv.first.Scalar() : path + "." + kv.first.Scalar(), kv.first,
              "unknown field");
      }
    }
  }

  Resources resources(const YAML::Node& node, const std::string& path) {
    Resources r;
    if (!isMap(node, path)) return r;
    keys(node, path, {"gpus", "cpu", "memory", "rdmaHca"});
    if (node["gpus"]) r.gpus = count(node["gpus"], path + ".gpus");
    if (node["cpu"]) r.cpuMilli = quantity(node["cpu"], path + ".cpu", true);
    if (node["memory"]) r.memoryBytes = quantity(node["memory"], path + ".memory", false);
    if (node["rdmaHca"]) r.rdma = count(node["rdmaHca"], path + ".rdmaHca");
    return r;
  }

 private:
  std::vector<api::FieldError>& errors_;
};

Node readNode(NodeReader& r, const YAML::Node& node, const std::string& path, ClusterView& view) {
  Node n;
  if (!r.isMap(node, path)) return n;
  r.keys(node, path,
         {"name", "gpus", "cpu", "memory", "rdma", "nvlink", "rdmaHca", "labels", "taints", "ready",
          "unschedulable", "used"});
  if (node["name"]) {
    n.name = r.string(node["name"], path + ".name");
  } else {
    r.error(path + ".name", node, "required");
  }
  n.allocatable.cpuMilli = api::parseQuantity(kDefaultNodeCpu)->milli;
  n.allocatable.memoryBytes = api::parseQuantity(kDefaultNodeMemory)->value();
  if (node["gpus"]) n.allocatable.gpus = r.count(node["gpus"], path + ".gpus");
  if (node["cpu"]) n.allocatable.cpuMilli = r.quantity(node["cpu"], path + ".cpu", true);
  if (node["memory"]) {
    n.allocatable.memoryBytes = r.quantity(node["memory"], path + ".memory", false);
  }
  if (node["rdmaHca"]) n.allocatable.rdma = r.count(node["rdmaHca"], path + ".rdmaHca");
  if (const auto labels = node["labels"]; labels && r.isMap(labels, path + ".labels")) {
    for (const auto& kv : labels) {
      n.labels[kv.first.Scalar()] = r.string(kv.second, path + ".labels." + kv.first.Scalar());
    }
  }
  if (node["rdma"] && r.flag(node["rdma"], path + ".rdma")) n.labels[kRdmaLabel] = "true";
  if (node["nvlink"] && r.flag(node["nvlink"], path + ".nvlink")) n.labels[kNvlinkLabel] = "true";
  if (const auto taints = node["taints"]) {
    if (!taints.IsSequence()) r.error(path + ".taints", taints, "expected a list");
    for (std::size_t i = 0; taints.IsSequence() && i < taints.size(); ++i) {
      const std::string at = path + ".taints[" + std::to_string(i) + "]";
      if (!r.isMap(taints[i], at)) continue;
      r.keys(taints[i], at, {"key", "value", "effect"});
      Taint t;
      if (taints[i]["key"]) t.key = r.string(taints[i]["key"], at + ".key");
      if (taints[i]["value"]) t.value = r.string(taints[i]["value"], at + ".value");
      t.effect = taints[i]["effect"] ? r.string(taints[i]["effect"], at + ".effect") : "";
      if (t.effect != "NoSchedule" && t.effect != "PreferNoSchedule" && t.effect != "NoExecute") {
        r.error(at + ".effect", taints[i], "must be NoSchedule, PreferNoSchedule or NoExecute");
      }
      n.taints.push_back(t);
    }
  }
  if (node["ready"]) n.ready = r.flag(node["ready"], path + ".ready");
  if (node["unschedulable"])
    n.unschedulable = r.flag(node["unschedulable"], path + ".unschedulable");
  if (node["used"]) view.used[n.name] = r.resources(node["used"], path + ".used");
  return n;
}

}  // namespace

ClusterParseResult parseClusterYaml(const std::string& text) {
  ClusterParseResult result;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    result.errors.push_back({"", e.mark.line + 1, "not valid YAML: " + e.msg});
    return result;
  }
  NodeReader r(result.errors);
  if (!r.isMap(root, "")) return result;
  r.keys(root, "", {"nodes"});
  const YAML::Node nodes = root["nodes"];
  if (!nodes || !nodes.IsSequence()) {
    r.error("nodes", nodes ? nodes : root, "required: a list of nodes");
    return result;
  }
  std::set<std::string> names;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const std::string path = "nodes[" + std::to_string(i) + "]";
    Node n = readNode(r, nodes[i], path, result.cluster);
    if (!n.name.empty() && !names.insert(n.name).second) {
      r.error(path + ".name", nodes[i]["name"], "duplicate node name '" + n.name + "'");
    }
    result.cluster.nodes.push_back(std::move(n));
  }
  return result;
}

}  // namespace rpcjob::planner
