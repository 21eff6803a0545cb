#include "rpcjob/api/serialize.h"

#include <yaml-cpp/yaml.h>

#include "detail/json_writer.h"
#include "detail/yaml_scalar.h"

namespace rpcjob::api {
namespace {

using detail::jsonArray;
using detail::JsonObject;
using detail::jsonStringMap;
using detail::jsonStrings;

std::string conditionJson(const Condition& c) {
  JsonObject o;
  o.str("type", c.type).str("status", c.status);
  if (!c.reason.empty()) o.str("reason", c.reason);
  if (!c.message.empty()) o.str("message", c.message);
  if (!c.lastTransitionTime.empty()) o.str("lastTransitionTime", c.lastTransitionTime);
  if (c.observedGeneration) o.num("observedGeneration", c.observedGeneration);
  return o.json();
}

std::string workerJson(const WorkerStatus& w) {
  JsonObject o;
  o.str("name", w.name).num("rank", w.rank);
  if (!w.group.empty()) o.str("group", w.group);
  if (!w.pod.empty()) o.str("pod", w.pod);
  if (!w.node.empty()) o.str("node", w.node);
  std::vector<std::string> gpus;
  for (int g : w.gpus) gpus.push_back(std::to_string(g));
  o.raw("gpus", jsonArray(gpus));
  if (!w.address.empty()) o.str("address", w.address);
  JsonObject channels;
  for (const auto& [peer, list] : w.channels) channels.raw(peer, jsonStrings(list));
  o.raw("channels", channels.json());
  JsonObject maps;
  for (const auto& [peer, map] : w.deviceMaps) maps.raw(peer, jsonStringMap(map));
  o.raw("deviceMaps", maps.json());
  if (!w.phase.empty()) o.str("phase", w.phase);
  o.num("restarts", w.restarts);
  return o.json();
}

std::string groupJson(const WorkerGroup& g) {
  return JsonObject()
      .str("name", g.name)
      .num("replicas", g.replicas)
      .num("gpusPerWorker", g.gpusPerWorker)
      .raw("template", g.podTemplate.json)
      .json();
}

std::string deviceMapsJson(const DeviceMaps& d) {
  std::vector<std::string> maps;
  for (const auto& m : d.maps) {
    maps.push_back(JsonObject()
                       .str("from", m.from)
                       .str("to", m.to)
                       .raw("devices", jsonStringMap(m.devices))
                       .json());
  }
  return JsonObject().str("mode", toString(d.mode)).raw("maps", jsonArray(maps)).json();
}

std::string runPolicyJson(const RunPolicy& p) {
  JsonObject o;
  o.num("backoffLimit", p.backoffLimit);
  if (p.activeDeadlineSeconds) o.num("activeDeadlineSeconds", *p.activeDeadlineSeconds);
  if (p.ttlSecondsAfterFinished) o.num("ttlSecondsAfterFinished", *p.ttlSecondsAfterFinished);
  o.boolean("suspend", p.suspend).str("cleanPodPolicy", toString(p.cleanPodPolicy));
  return o.json();
}

}  // namespace

std::string statusToJson(const RpcJobStatus& s) {
  JsonObject o;
  if (!s.phase.empty()) o.str("phase", s.phase);
  std::vector<std::string> conditions;
  for (const auto& c : s.conditions) conditions.push_back(conditionJson(c));
  o.raw("conditions", jsonArray(conditions));
  o.num("observedGeneration", s.observedGeneration)
      .num("workerCount", s.workerCount)
      .num("readyWorkers", s.readyWorkers)
      .num("restarts", s.restarts);
  if (s.schedulerRejections > 0) o.num("schedulerRejections", s.schedulerRejections);
  if (!s.rejectedNodes.empty()) o.raw("rejectedNodes", jsonStrings(s.rejectedNodes));
  std::vector<std::string> workers;
  for (const auto& w : s.workers) workers.push_back(workerJson(w));
  o.raw("workers", jsonArray(workers));
  if (!s.startTime.empty()) o.str("startTime", s.startTime);
  if (!s.completionTime.empty()) o.str("completionTime", s.completionTime);
  return o.json();
}

std::string specToJson(const RpcJobSpec& spec) {
  std::vector<std::string> groups;
  for (const auto& g : spec.workers) groups.push_back(groupJson(g));
  JsonObject placement;
  placement.str("policy", toString(spec.placement.policy));
  // "1" is written as the integer the CRD's int-or-string field also accepts.
  if (spec.placement.workersPerPod == WorkersPerPod::One) {
    placement.num("workersPerPod", 1);
  } else {
    placement.str("workersPerPod", "Auto");
  }
  placement.num("workersPerGpu", spec.placement.workersPerGpu);
  return JsonObject()
      .raw("workers", jsonArray(groups))
      .raw("placement", placement.json())
      .raw("deviceMaps", deviceMapsJson(spec.deviceMaps))
      .raw("transports", jsonStrings(spec.transports))
      .raw("channels", jsonStrings(spec.channels))
      .raw("runPolicy", runPolicyJson(spec.runPolicy))
      .raw("metrics", JsonObject()
                          .num("port", spec.metrics.port)
                          .boolean("perPeerLabels", spec.metrics.perPeerLabels)
                          .json())
      .json();
}

std::string toYaml(const RpcJob& job) {
  JsonObject metadata;
  metadata.str("name", job.metadata.name);
  if (!job.metadata.namespaceName.empty()) metadata.str("namespace", job.metadata.namespaceName);
  if (!job.metadata.uid.empty()) metadata.str("uid", job.metadata.uid);
  if (job.metadata.generation) metadata.num("generation", job.metadata.generation);
  if (!job.metadata.labels.empty()) metadata.raw("labels", jsonStringMap(job.metadata.labels));
  JsonObject o;
  o.str("apiVersion", kApiVersion).str("kind", kKind).raw("metadata", metadata.json());
  o.raw("spec", specToJson(job.spec));
  if (job.status) o.raw("status", statusToJson(*job.status));
  return detail::toYamlText(YAML::Load(o.json()));
}

}  // namespace rpcjob::api
