// The status the operator writes. Read strictly like the spec, so that a status
// written by a newer operator with fields this one does not know is reported, not
// silently dropped on the next write.

#include "detail/parse_parts.h"

namespace rpcjob::api::detail {
namespace {

std::string optionalString(Reader& r, const YAML::Node& map, const char* key,
                           const std::string& path) {
  if (!present(map[key])) return "";
  return r.string(map[key], path + "." + key).value_or("");
}

int optionalInt(Reader& r, const YAML::Node& map, const char* key, const std::string& path) {
  if (!present(map[key])) return 0;
  return r.smallInteger(map[key], path + "." + key).value_or(0);
}

Condition readCondition(Reader& r, const YAML::Node& node, const std::string& path) {
  Condition c;
  if (!r.expectMap(node, path)) return c;
  r.strictKeys(node, path,
               {"type", "status", "reason", "message", "lastTransitionTime", "observedGeneration"});
  c.type = optionalString(r, node, "type", path);
  c.status = optionalString(r, node, "status", path);
  c.reason = optionalString(r, node, "reason", path);
  c.message = optionalString(r, node, "message", path);
  c.lastTransitionTime = optionalString(r, node, "lastTransitionTime", path);
  if (present(node["observedGeneration"])) {
    c.observedGeneration =
        r.integer(node["observedGeneration"], path + ".observedGeneration").value_or(0);
  }
  return c;
}

WorkerStatus readWorker(Reader& r, const YAML::Node& node, const std::string& path) {
  WorkerStatus w;
  if (!r.expectMap(node, path)) return w;
  r.strictKeys(node, path,
               {"name", "rank", "group", "pod", "node", "gpus", "address", "channels", "deviceMaps",
                "phase", "restarts"});
  w.name = optionalString(r, node, "name", path);
  w.rank = present(node["rank"]) ? r.smallInteger(node["rank"], path + ".rank").value_or(-1) : -1;
  w.group = optionalString(r, node, "group", path);
  w.pod = optionalString(r, node, "pod", path);
  w.node = optionalString(r, node, "node", path);
  w.address = optionalString(r, node, "address", path);
  w.phase = optionalString(r, node, "phase", path);
  w.restarts = optionalInt(r, node, "restarts", path);
  if (present(node["gpus"])) {
    r.forEach(node["gpus"], path + ".gpus", [&](const YAML::Node& g, const std::string& p) {
      if (auto v = r.smallInteger(g, p)) w.gpus.push_back(*v);
    });
  }
  if (present(node["channels"]) && r.expectMap(node["channels"], path + ".channels")) {
    for (const auto& kv : node["channels"]) {
      const std::string peer = kv.first.Scalar();
      w.channels[peer] = r.stringList(kv.second, path + ".channels." + peer);
    }
  }
  if (present(node["deviceMaps"]) && r.expectMap(node["deviceMaps"], path + ".deviceMaps")) {
    for (const auto& kv : node["deviceMaps"]) {
      const std::string peer = kv.first.Scalar();
      w.deviceMaps[peer] = r.stringMap(kv.second, path + ".deviceMaps." + peer);
    }
  }
  return w;
}

}  // namespace

RpcJobStatus readStatus(Reader& r, const YAML::Node& node, const std::string& path) {
  RpcJobStatus s;
  if (!r.expectMap(node, path)) return s;
  r.strictKeys(
      node, path,
      {"phase", "conditions", "observedGeneration", "workerCount", "readyWorkers", "restarts",
       "schedulerRejections", "rejectedNodes", "workers", "startTime", "completionTime"});
  s.phase = optionalString(r, node, "phase", path);
  if (present(node["conditions"])) {
    r.forEach(node["conditions"], path + ".conditions",
              [&](const YAML::Node& c, const std::string& p) {
                s.conditions.push_back(readCondition(r, c, p));
              });
  }
  if (present(node["observedGeneration"])) {
    s.observedGeneration =
        r.integer(node["observedGeneration"], path + ".observedGeneration").value_or(0);
  }
  s.workerCount = optionalInt(r, node, "workerCount", path);
  s.readyWorkers = optionalInt(r, node, "readyWorkers", path);
  s.restarts = optionalInt(r, node, "restarts", path);
  s.schedulerRejections = optionalInt(r, node, "schedulerRejections", path);
  if (present(node["rejectedNodes"])) {
    s.rejectedNodes = r.stringList(node["rejectedNodes"], path + ".rejectedNodes");
  }
  if (present(node["workers"])) {
    r.forEach(node["workers"], path + ".workers", [&](const YAML::Node& w, const std::string& p) {
      s.workers.push_back(readWorker(r, w, p));
    });
  }
  s.startTime = optionalString(r, node, "startTime", path);
  s.completionTime = optionalString(r, node, "completionTime", path);
  return s;
}

}  // namespace rpcjob::api::detail
