#include "rpcjob/api/parse.h"

#include "detail/parse_parts.h"
#include "rpcjob/api/schema.h"
#include "rpcjob/api/validate.h"

namespace rpcjob::api {
namespace {

using detail::present;
using detail::Reader;

const std::set<std::string>& keysOf(const std::string& path) {
  return objectFields().at(path);
}
const std::vector<std::string>& valuesOf(const std::string& path) {
  return enumFields().at(path);
}

// Metadata is read leniently: the API server adds many fields (managedFields,
// resourceVersion, ...) and owns their validation.
ObjectMeta readMetadata(Reader& r, const YAML::Node& node) {
  ObjectMeta m;
  if (!r.expectMap(node, "metadata")) return m;
  if (present(node["name"])) m.name = r.string(node["name"], "metadata.name").value_or("");
  if (present(node["namespace"])) {
    m.namespaceName = r.string(node["namespace"], "metadata.namespace").value_or("");
  }
  if (present(node["uid"])) m.uid = r.string(node["uid"], "metadata.uid").value_or("");
  if (present(node["generation"])) {
    m.generation = r.integer(node["generation"], "metadata.generation").value_or(0);
  }
  if (present(node["labels"])) m.labels = r.stringMap(node["labels"], "metadata.labels");
  return m;
}

WorkerGroup readGroup(Reader& r, const YAML::Node& node, const std::string& path) {
  WorkerGroup g;
  if (!r.expectMap(node, path)) return g;
  r.strictKeys(node, path, keysOf("spec.workers[]"));
  if (present(node["name"])) {
    g.name = r.string(node["name"], path + ".name").value_or("");
  } else {
    r.error(path + ".name", node, "required");
  }
  if (present(node["replicas"])) {
    g.replicas = r.smallInteger(node["replicas"], path + ".replicas").value_or(g.replicas);
  }
  if (present(node["gpusPerWorker"])) {
    g.gpusPerWorker =
        r.smallInteger(node["gpusPerWorker"], path + ".gpusPerWorker").value_or(g.gpusPerWorker);
  }
  if (present(node["template"])) {
    g.podTemplate = detail::readPodTemplate(r, node["template"], path + ".template");
  }
  return g;
}

Placement readPlacement(Reader& r, const YAML::Node& node) {
  Placement p;
  if (!r.expectMap(node, "spec.placement")) return p;
  r.strictKeys(node, "spec.placement", keysOf("spec.placement"));
  if (present(node["policy"])) {
    const auto policy =
        r.oneOf(node["policy"], "spec.placement.policy", valuesOf("spec.placement.policy"));
    if (policy == "Spread") p.policy = PlacementPolicy::Spread;
  }
  if (present(node["workersPerPod"])) {
    const auto perPod = r.oneOf(node["workersPerPod"], "spec.placement.workersPerPod",
                                valuesOf("spec.placement.workersPerPod"));
    if (perPod == "Auto") p.workersPerPod = WorkersPerPod::Auto;
  }
  if (present(node["workersPerGpu"])) {
    p.workersPerGpu = r.smallInteger(node["workersPerGpu"], "spec.placement.workersPerGpu")
                          .value_or(p.workersPerGpu);
  }
  return p;
}

DeviceMaps readDeviceMaps(Reader& r, const YAML::Node& node) {
  DeviceMaps d;
  if (!r.expectMap(node, "spec.deviceMaps")) return d;
  r.strictKeys(node, "spec.deviceMaps", keysOf("spec.deviceMaps"));
  if (present(node["mode"])) {
    const auto mode =
        r.oneOf(node["mode"], "spec.deviceMaps.mode", valuesOf("spec.deviceMaps.mode"));
    if (mode == "Explicit") d.mode = DeviceMapMode::Explicit;
  }
  if (present(node["maps"])) {
    r.forEach(node["maps"], "spec.deviceMaps.maps",
              [&](const YAML::Node& item, const std::string& path) {
                ExplicitDeviceMap m;
                if (!r.expectMap(item, path)) return;
                r.strictKeys(item, path, keysOf("spec.deviceMaps.maps[]"));
                for (const char* key : {"from", "to", "devices"}) {
                  if (!present(item[key])) r.error(path + "." + key, item, "required");
                }
                if (present(item["from"]))
                  m.from = r.string(item["from"], path + ".from").value_or("");
                if (present(item["to"])) m.to = r.string(item["to"], path + ".to").value_or("");
                if (present(item["devices"])) {
                  m.devices = r.stringMap(item["devices"], path + ".devices");
                }
                d.maps.push_back(std::move(m));
              });
  }
  return d;
}

RunPolicy readRunPolicy(Reader& r, const YAML::Node& node) {
  RunPolicy p;
  const std::string path = "spec.runPolicy";
  if (!r.expectMap(node, path)) return p;
  r.strictKeys(node, path, keysOf(path));
  if (present(node["backoffLimit"])) {
    p.backoffLimit =
        r.smallInteger(node["backoffLimit"], path + ".backoffLimit").value_or(p.backoffLimit);
  }
  if (present(node["activeDeadlineSeconds"])) {
    p.activeDeadlineSeconds =
        r.integer(node["activeDeadlineSeconds"], path + ".activeDeadlineSeconds");
  }
  if (present(node["ttlSecondsAfterFinished"])) {
    p.ttlSecondsAfterFinished =
        r.integer(node["ttlSecondsAfterFinished"], path + ".ttlSecondsAfterFinished");
  }
  if (present(node["suspend"])) {
    p.suspend = r.boolean(node["suspend"], path + ".suspend").value_or(p.suspend);
  }
  if (present(node["cleanPodPolicy"])) {
    const auto policy = r.oneOf(node["cleanPodPolicy"], path + ".cleanPodPolicy",
                                valuesOf(path + ".cleanPodPolicy"));
    if (policy == "None") p.cleanPodPolicy = CleanPodPolicy::None;
    if (policy == "All") p.cleanPodPolicy = CleanPodPolicy::All;
  }
  return p;
}

Metrics readMetrics(Reader& r, const YAML::Node& node) {
  Metrics m;
  if (!r.expectMap(node, "spec.metrics")) return m;
  r.strictKeys(node, "spec.metrics", keysOf("spec.metrics"));
  if (present(node["port"]))
    m.port = r.smallInteger(node["port"], "spec.metrics.port").value_or(m.port);
  if (present(node["perPeerLabels"])) {
    m.perPeerLabels =
        r.boolean(node["perPeerLabels"], "spec.metrics.perPeerLabels").value_or(m.perPeerLabels);
  }
  return m;
}

RpcJobSpec readSpec(Reader& r, const YAML::Node& node) {
  RpcJobSpec s;
  if (!r.expectMap(node, "spec")) return s;
  r.strictKeys(node, "spec", keysOf("spec"));
  if (present(node["workers"])) {
    r.forEach(node["workers"], "spec.workers", [&](const YAML::Node& item, const std::string& p) {
      s.workers.push_back(readGroup(r, item, p));
    });
  } else {
    r.error("spec.workers", node, "required: at least one worker group");
  }
  if (present(node["placement"])) s.placement = readPlacement(r, node["placement"]);
  if (present(node["deviceMaps"])) s.deviceMaps = readDeviceMaps(r, node["deviceMaps"]);
  if (present(node["transports"]))
    s.transports = r.stringList(node["transports"], "spec.transports");
  if (present(node["channels"])) s.channels = r.stringList(node["channels"], "spec.channels");
  if (present(node["runPolicy"])) s.runPolicy = readRunPolicy(r, node["runPolicy"]);
  if (present(node["metrics"])) s.metrics = readMetrics(r, node["metrics"]);
  return s;
}

}  // namespace

ParseResult parseRpcJobUnvalidated(const std::string& text) {
  ParseResult result;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    result.errors.push_back({"", e.mark.line + 1, "not valid YAML: " + e.msg});
    return result;
  }
  Reader r(result.errors, result.lines);
  if (!root.IsMap()) {
    result.errors.push_back({"", detail::lineOf(root), "expected an RpcJob mapping"});
    return result;
  }
  r.strictKeys(root, "", keysOf(""));
  if (!present(root["apiVersion"])) {
    r.error("apiVersion", root, std::string("required: ") + kApiVersion);
  } else if (auto v = r.string(root["apiVersion"], "apiVersion"); v && *v != kApiVersion) {
    r.error("apiVersion", root["apiVersion"],
            "unsupported version '" + *v + "', expected " + kApiVersion);
  }
  if (!present(root["kind"])) {
    r.error("kind", root, std::string("required: ") + kKind);
  } else if (auto k = r.string(root["kind"], "kind"); k && *k != kKind) {
    r.error("kind", root["kind"], "expected " + std::string(kKind) + ", got '" + *k + "'");
  }
  if (present(root["metadata"])) {
    result.job.metadata = readMetadata(r, root["metadata"]);
  } else {
    r.error("metadata", root, "required (with a name)");
  }
  if (present(root["spec"])) {
    result.job.spec = readSpec(r, root["spec"]);
  } else {
    r.error("spec", root, "required");
  }
  if (present(root["status"])) result.job.status = detail::readStatus(r, root["status"], "status");
  return result;
}

ParseResult parseRpcJob(const std::string& text) {
  ParseResult result = parseRpcJobUnvalidated(text);
  if (result.errors.size() == 1 && result.errors[0].path.empty()) return result;  // not YAML
  // Validate even after parse errors, so one run reports everything; but a field
  // that failed to parse is reported once, by the parser.
  const std::vector<FieldError> parseErrors = result.errors;
  for (auto& e : validateRpcJob(result.job, result.lines)) {
    bool repeated = false;
    for (const auto& p : parseErrors) {
      if (!p.path.empty() && e.path.compare(0, p.path.size(), p.path) == 0) repeated = true;
    }
    if (!repeated) result.errors.push_back(std::move(e));
  }
  return result;
}

}  // namespace rpcjob::api
