#include "rpcjob/operator/children.h"

#include <algorithm>

#include "json_util.h"
#include "rpcjob/assignment/environment.h"
#include "rpcjob/operator/job_security.h"

namespace rpcjob::op {
namespace {

using web::json::value;

value str(const std::string& s) {
  return value::string(s);
}

value ownerReferences(const JobRef& job) {
  value ref = value::object();
  ref["apiVersion"] = str(api::kApiVersion);
  ref["kind"] = str(api::kKind);
  ref["name"] = str(job.name);
  ref["uid"] = str(job.uid);
  ref["controller"] = value::boolean(true);
  ref["blockOwnerDeletion"] = value::boolean(true);
  value refs = value::array();
  refs[0] = ref;
  return refs;
}

value metadata(const JobRef& job, const std::string& name, value labels) {
  value m = value::object();
  m["name"] = str(name);
  m["namespace"] = str(job.ns);
  labels[kLabelInstance] = str(job.name);
  labels[kLabelManagedBy] = str(kManagedBy);
  labels[kLabelJobName] = str(job.name);
  m["labels"] = labels;
  m["ownerReferences"] = ownerReferences(job);
  return m;
}

value parseOr(const std::string& text, value fallback) {
  auto v = kube::detail::parseJson(text);
  return v && v->is_object() ? *v : fallback;
}

int portOf(const std::string& address) {
  auto colon = address.rfind(':');
  return colon == std::string::npos ? 0 : std::atoi(address.c_str() + colon + 1);
}

value& objectField(value& parent, const char* key) {
  if (!parent.has_object_field(key)) parent[key] = value::object();
  return parent[key];
}
value& arrayField(value& parent, const char* key) {
  if (!parent.has_array_field(key)) parent[key] = value::array();
  return parent[key];
}
void push(value& array, value item) {
  array[array.size()] = std::move(item);
}

void addMount(value& container, const std::string& volume, const std::string& path, bool readOnly) {
  value& mounts = arrayField(container, "volumeMounts");
  for (const auto& m : mounts.as_array()) {
    if (kube::detail::getString(m, "mountPath") == path) return;  // the template's own wins
  }
  value m = value::object();
  m["name"] = str(volume);
  m["mountPath"] = str(path);
  if (readOnly) m["readOnly"] = value::boolean(true);
  push(mounts, m);
}

// Makes `c` the container of worker `e` in a pod of `world` workers.
void makeWorkerContainer(value& c, const JobRef& job, const WorkerEntry& e, int world, int k,
                         const planner::PodPlan& pod, bool first) {
  const std::vector<std::pair<std::string, std::string>> env = {
      {kEnvWorkerName, e.name},
      {kEnvRank, std::to_string(e.rank)},
      {kEnvWorldSize, std::to_string(world)},
      {kEnvJobName, job.name},
      {kEnvNamespace, job.ns},
      {kEnvAssignmentPath, kAssignmentPath},
      {kEnvMetricsPort, std::to_string(e.metricsPort)},
      {kEnvSecretFile, kSecretPath},  // job_security.h
  };
  value newEnv = value::array();
  for (const auto& [name, val] : env) {
    value v = value::object();
    v["name"] = str(name);
    v["value"] = str(val);
    push(newEnv, v);
  }
  if (c.has_array_field("env")) {
    for (const auto& v : c.at("env").as_array()) {
      const std::string name = kube::detail::getString(v, "name");
      bool ours =
          std::any_of(env.begin(), env.end(), [&](const auto& p) { return p.first == name; });
      if (!ours) push(newEnv, v);
    }
  }
  c["env"] = newEnv;

  const std::string suffix = k == 0 ? "" : "-" + std::to_string(k);
  value& ports = arrayField(c, "ports");
  value rpc = value::object();
  rpc["name"] = str("rpc" + suffix);
  rpc["containerPort"] = value::number(portOf(e.address));
  rpc["protocol"] = str("TCP");
  push(ports, rpc);
  if (e.metricsPort > 0) {
    value m = value::object();
    m["name"] = str("metrics" + suffix);
    m["containerPort"] = value::number(e.metricsPort);
    m["protocol"] = str("TCP");
    push(ports, m);
  }

  value& resources = objectField(c, "resources");
  if (!e.gpus.empty()) {
    objectField(resources, "limits")[planner::kGpuResource] = str(std::to_string(e.gpus.size()));
  }
  if (first && pod.requests.rdma > 0) {
    objectField(resources, "limits")[planner::kRdmaResource] =
        str(std::to_string(pod.requests.rdma));
  }
  if (!pod.capabilities.empty()) {
    value& add = arrayField(objectField(objectField(c, "securityContext"), "capabilities"), "add");
    for (const auto& cap : pod.capabilities) {
      bool has = false;
      for (const auto& a : add.as_array()) has = has || (a.is_string() && a.as_string() == cap);
      if (!has) push(add, str(cap));
    }
  }
}

value hostnameRequirement(const std::string& hostname) {
  value req = value::object();
  req["key"] = str(kHostnameLabel);
  req["operator"] = str("In");
  value values = value::array();
  values[0] = str(hostname);
  req["values"] = values;
  return req;
}

void pinToNode(value& spec, const std::string& hostname) {
  value& required = objectField(objectField(objectField(spec, "affinity"), "nodeAffinity"),
                                "requiredDuringSchedulingIgnoredDuringExecution");
  value& terms = arrayField(required, "nodeSelectorTerms");
  if (terms.size() == 0) push(terms, value::object());
  for (size_t i = 0; i < terms.size(); ++i) {
    push(arrayField(terms[i], "matchExpressions"), hostnameRequirement(hostname));
  }
}

const api::WorkerGroup* groupOf(const api::RpcJobSpec& spec, const std::string& name) {
  for (const auto& g : spec.workers) {
    if (g.name == name) return &g;
  }
  return nullptr;
}

value templateOf(const api::WorkerGroup* group) {
  value t = parseOr(group ? group->podTemplate.json : "{}", value::object());
  if (!t.has_object_field("spec")) t["spec"] = value::object();
  if (!t.at("spec").has_array_field("containers")) t["spec"]["containers"] = value::array();
  return t;
}

}  // namespace

std::string assignmentConfigMapName(const std::string& job) {
  return job + "-assignment";
}

std::string serviceJson(const JobRef& job, int rpcPort) {
  value labels = value::object();
  labels[kLabelName] = str(kWorkerAppName);
  value s = value::object();
  s["apiVersion"] = str("v1");
  s["kind"] = str("Service");
  s["metadata"] = metadata(job, job.name, labels);
  value& spec = s["spec"];
  spec["clusterIP"] = str("None");
  spec["publishNotReadyAddresses"] = value::boolean(true);
  spec["selector"][kLabelJobName] = str(job.name);
  value port = value::object();
  port["name"] = str("rpc");
  port["port"] = value::number(rpcPort);
  port["targetPort"] = value::number(rpcPort);
  port["protocol"] = str("TCP");
  spec["ports"][0] = port;
  return s.serialize();
}

std::string configMapJson(const JobRef& job, const Assignment& assignment) {
  value labels = value::object();
  labels[kLabelName] = str(kWorkerAppName);
  value cm = value::object();
  cm["apiVersion"] = str("v1");
  cm["kind"] = str("ConfigMap");
  cm["metadata"] = metadata(job, assignmentConfigMapName(job.name), labels);
  cm["data"][kAssignmentKey] = str(toYaml(assignment));
  return cm.serialize();
}

std::string podJson(const JobRef& job, const api::RpcJobSpec& spec, const planner::Plan& plan,
                    const planner::PodPlan& pod, const std::string& hostname, int generation) {
  const bool shared = spec.placement.workersPerPod == api::WorkersPerPod::Auto;
  std::vector<const WorkerEntry*> entries;
  for (const auto& w : pod.workers) {
    if (const WorkerEntry* e = plan.assignment.byName(w)) entries.push_back(e);
  }
  const std::string firstGroup = entries.empty() ? "" : entries.front()->group;
  value tmpl = templateOf(groupOf(spec, firstGroup));
  value podSpec = tmpl.at("spec");
  const int world = plan.assignment.worldSize();

  value containers = value::array();
  const auto& tmplContainers = tmpl.at("spec").at("containers").as_array();
  if (!shared) {
    containers = tmpl.at("spec").at("containers");
    if (containers.size() > 0 && !entries.empty()) {
      makeWorkerContainer(containers[0], job, *entries.front(), world, 0, pod, true);
    }
  } else {
    for (size_t k = 0; k < entries.size(); ++k) {
      value own = templateOf(groupOf(spec, entries[k]->group));
      if (own.at("spec").at("containers").size() == 0) continue;
      value c = own.at("spec").at("containers")[0];
      c["name"] = str(entries[k]->name);
      makeWorkerContainer(c, job, *entries[k], world, static_cast<int>(k), pod, k == 0);
      push(containers, c);
    }
    for (size_t i = 1; i < tmplContainers.size(); ++i) push(containers, tmplContainers.at(i));
  }
  for (size_t i = 0; i < containers.size(); ++i) {
    addMount(containers[i], kAssignmentVolume, kAssignmentDir, true);
    addMount(containers[i], kSecretVolume, kSecretDir, true);
    if (pod.shmVolume) addMount(containers[i], kShmVolume, "/dev/shm", false);
  }
  podSpec["containers"] = containers;

  value& volumes = arrayField(podSpec, "volumes");
  value cmVolume = value::object();
  cmVolume["name"] = str(kAssignmentVolume);
  cmVolume["configMap"]["name"] = str(assignmentConfigMapName(job.name));
  push(volumes, cmVolume);
  value secretVolume = value::object();  // the job's Secret (job_security.h)
  secretVolume["name"] = str(kSecretVolume);
  secretVolume["secret"]["secretName"] = str(jobSecretName(job.name));
  secretVolume["secret"]["defaultMode"] = value::number(0440);
  push(volumes, secretVolume);
  if (pod.shmVolume) {
    value shm = value::object();
    shm["name"] = str(kShmVolume);
    shm["emptyDir"]["medium"] = str("Memory");
    push(volumes, shm);
  }
  if (pod.shareProcessNamespace) podSpec["shareProcessNamespace"] = value::boolean(true);
  podSpec["hostname"] = str(pod.name);
  podSpec["subdomain"] = str(job.name);
  podSpec["restartPolicy"] = str("Never");
  if (podSpec.has_field("nodeName")) podSpec.as_object().erase("nodeName");
  pinToNode(podSpec, hostname);

  value labels = value::object();
  value annotations = value::object();
  if (tmpl.has_object_field("metadata")) {
    const value& tm = tmpl.at("metadata");
    if (tm.has_object_field("labels")) labels = tm.at("labels");
    if (tm.has_object_field("annotations")) annotations = tm.at("annotations");
  }
  labels[kLabelName] = str(kWorkerAppName);
  labels[kLabelGroup] = str(firstGroup);
  labels[kLabelRestartGeneration] = str(std::to_string(generation));
  annotations[kAnnotationNode] = str(pod.node);
  value p = value::object();
  p["apiVersion"] = str("v1");
  p["kind"] = str("Pod");
  p["metadata"] = metadata(job, pod.name, labels);
  p["metadata"]["annotations"] = annotations;
  p["spec"] = podSpec;
  return p.serialize();
}

}  // namespace rpcjob::op
