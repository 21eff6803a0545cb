#include "rpcjob/operator/children.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>

#include "json_util.h"
#include "owned_metadata.h"
#include "rpcjob/api/quantity.h"
#include "rpcjob/assignment/environment.h"
#include "rpcjob/assignment/intra_op_threads.h"
#include "rpcjob/assignment/pod_launch.h"
#include "rpcjob/operator/job_security.h"
#include "rpcjob/operator/pod_security.h"

namespace rpcjob::op {
namespace {

using web::json::value;

value str(const std::string& s) {
  return value::string(s);
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

using EnvList = std::vector<std::pair<std::string, std::string>>;

// The variables every worker gets (rpcjob/assignment/environment.h).
EnvList identityEnv(const JobRef& job, const WorkerEntry& e, int world) {
  return {
      {kEnvWorkerName, e.name},
      {kEnvRank, std::to_string(e.rank)},
      {kEnvWorldSize, std::to_string(world)},
      {kEnvJobName, job.name},
      {kEnvNamespace, job.ns},
      {kEnvAssignmentPath, kAssignmentPath},
      {kEnvMetricsPort, std::to_string(e.metricsPort)},
      {kEnvSecretFile, kSecretPath},  // job_security.h
  };
}

bool isIdentityVariable(const std::string& name) {
  static const std::set<std::string> kNames = {
      kEnvWorkerName,     kEnvRank,        kEnvWorldSize,  kEnvJobName,        kEnvNamespace,
      kEnvAssignmentPath, kEnvMetricsPort, kEnvPodWorkers, kEnvTerminationLog, kEnvSecretFile};
  return kNames.count(name) > 0;
}

// `first` then the template's own entries that `first` does not replace (with
// `onlyValueFrom`, those that use valueFrom).
void setEnv(value& c, const EnvList& first, bool onlyValueFrom = false) {
  value newEnv = value::array();
  for (const auto& [name, val] : first) {
    value v = value::object();
    v["name"] = str(name);
    v["value"] = str(val);
    push(newEnv, v);
  }
  if (c.has_array_field("env")) {
    for (const auto& v : c.at("env").as_array()) {
      const std::string name = kube::detail::getString(v, "name");
      if (isIdentityVariable(name) || (onlyValueFrom && !v.has_field("valueFrom"))) continue;
      push(newEnv, v);
    }
  }
  c["env"] = newEnv;
}

// The template container's literal env entries (valueFrom needs the kubelet: only
// the launcher container's own entries can use it).
EnvList literalEnv(const value& c) {
  EnvList env;
  if (!c.has_array_field("env")) return env;
  for (const auto& v : c.at("env").as_array()) {
    if (!v.is_object() || v.has_field("valueFrom")) continue;
    const std::string name = kube::detail::getString(v, "name");
    if (!name.empty() && !isIdentityVariable(name)) {
      env.emplace_back(name, kube::detail::getString(v, "value"));
    }
  }
  return env;
}

std::vector<std::string> strings(const value& c, const char* key) {
  std::vector<std::string> out;
  if (!c.has_array_field(key)) return out;
  for (const auto& v : c.at(key).as_array()) out.push_back(v.is_string() ? v.as_string() : "");
  return out;
}

// The k-th worker's ports on `c` ("rpc", "metrics"; "rpc-k", "metrics-k" after the
// first: port names are unique per pod).
void addPorts(value& c, const WorkerEntry& e, int k) {
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
}

// The pod's GPUs and RDMA devices, all on the one container that
// runs its workers: the device plugin shows a container only the GPUs it asked
// for, numbered from 0, and the plan numbers a pod's GPUs the same way.
void addPodDevices(value& c, const planner::PodPlan& pod) {
  value& resources = objectField(c, "resources");
  if (pod.requests.gpus > 0) {
    objectField(resources, "limits")[planner::kGpuResource] =
        str(std::to_string(pod.requests.gpus));
  }
  if (pod.requests.rdma > 0) {
    objectField(resources, "limits")[planner::kRdmaResource] =
        str(std::to_string(pod.requests.rdma));
  }
}

// The sum of the workers' `resource` limits, or nothing when one worker has none.
std::optional<int64_t> summedLimit(const std::vector<const value*>& containers,
                                   const char* resource) {
  int64_t milli = 0;
  for (const value* c : containers) {
    if (!c->has_object_field("resources") || !c->at("resources").has_object_field("limits")) {
      return std::nullopt;
    }
    const std::string text = kube::detail::getString(c->at("resources").at("limits"), resource);
    auto q = api::parseQuantity(text);
    if (text.empty() || !q) return std::nullopt;
    milli += q->milli;
  }
  return milli;
}

bool setsEnv(const value& c, const std::string& name) {
  if (!c.has_array_field("env")) return false;
  for (const auto& v : c.at("env").as_array()) {
    if (kube::detail::getString(v, "name") == name) return true;
  }
  return false;
}

// Makes `c` (the template's first container) the container of the pod's one worker.
// With a CPU limit, libtorch's pool is sized to it (intra_op_threads.h) unless the
// template says otherwise; a pod of several workers gets its shares from
// rpcjob-launch, which reads the limit from its cgroup.
void makeWorkerContainer(value& c, const JobRef& job, const WorkerEntry& e, int world,
                         const planner::PodPlan& pod) {
  EnvList env = identityEnv(job, e, world);
  const auto limit = summedLimit({&c}, "cpu");
  const int threads = limit ? intraOpThreads(0, 1, *limit) : 0;
  for (auto& entry :
       intraOpEnvironment(threads, [&](const std::string& name) { return setsEnv(c, name); })) {
    env.push_back(std::move(entry));
  }
  setEnv(c, env);
  addPorts(c, e, 0);
  addPodDevices(c, pod);
}

// Makes `c` (the first worker's template container) the one container running
// every worker of the pod through rpcjob-launch: its env carries the launch spec
// (rpcjob/assignment/pod_launch.h); cpu and memory are the workers' sums (the
// plan's requests, and the templates' limits when every worker has one).
void makeLauncherContainer(value& c, const JobRef& job, const api::RpcJobSpec& spec,
                           const std::vector<const WorkerEntry*>& entries, int world,
                           const planner::PodPlan& pod) {
  PodLaunch launch;
  std::vector<value> templates;
  for (const WorkerEntry* e : entries) {
    value t = templateOf(groupOf(spec, e->group));
    const auto& cs = t.at("spec").at("containers");
    templates.push_back(cs.size() > 0 ? cs.at(0) : value::object());
  }
  std::vector<const value*> workerContainers;
  for (std::size_t k = 0; k < entries.size(); ++k) {
    const value& own = templates[k];
    workerContainers.push_back(&own);
    PodWorker w;
    w.name = entries[k]->name;
    w.argv = strings(own, "command");
    std::vector<std::string> args = strings(own, "args");
    if (w.argv.empty()) {
      w.argv = {kWorkerProgram};
      if (args.empty()) args = {"serve"};
    }
    w.argv.insert(w.argv.end(), args.begin(), args.end());
    w.env = literalEnv(own);
    const EnvList identity = identityEnv(job, *entries[k], world);
    w.env.insert(w.env.end(), identity.begin(), identity.end());
    launch.workers.push_back(std::move(w));
    addPorts(c, *entries[k], static_cast<int>(k));
  }
  // Literal entries travel per worker in the spec (a group's own reach only its
  // workers); valueFrom needs the kubelet, so those of the first worker's group
  // stay on the container, where every worker of the pod inherits them.
  EnvList own = {{kEnvPodWorkers, toJson(launch)}};
  // The report goes where the kubelet reads the termination message.
  const std::string reportPath = kube::detail::getString(c, "terminationMessagePath");
  if (!reportPath.empty()) own.emplace_back(kEnvTerminationLog, reportPath);
  setEnv(c, own, true);
  value command = value::array();
  command[0] = str(kLaunchProgram);
  c["command"] = command;
  if (c.has_field("args")) c.as_object().erase("args");

  value& resources = objectField(c, "resources");
  value& requests = objectField(resources, "requests");
  if (pod.requests.cpuMilli > 0) requests["cpu"] = str(std::to_string(pod.requests.cpuMilli) + "m");
  if (pod.requests.memoryBytes > 0) {
    requests["memory"] = str(std::to_string(pod.requests.memoryBytes));
  }
  for (const char* r : {"cpu", "memory"}) {
    value& limits = objectField(resources, "limits");
    const auto sum = summedLimit(workerContainers, r);
    if (!sum) {
      if (limits.has_field(r)) limits.as_object().erase(r);
    } else {
      limits[r] = str(std::strcmp(r, "cpu") == 0 ? std::to_string(*sum) + "m"
                                                 : std::to_string((*sum + 999) / 1000));
    }
  }
  addPodDevices(c, pod);
}

// The pod's and its worker container's securityContext (pod_security.h): the
// template's fields, restricted defaults where it is silent, the plan's
// capabilities that `level` allows.
void applyPodSecurity(value& podSpec, value& worker, const planner::PodPlan& pod,
                      PodSecurityLevel level) {
  PodSecurityInput in;
  if (podSpec.has_field("securityContext"))
    in.podSecurityContext = podSpec.at("securityContext").serialize();
  if (worker.has_field("securityContext"))
    in.containerSecurityContext = worker.at("securityContext").serialize();
  in.capabilities = pod.capabilities;
  in.level = level;
  const PodSecurityResult r = podSecurity(in);
  podSpec["securityContext"] = parseOr(r.podSecurityContext, value::object());
  worker["securityContext"] = parseOr(r.containerSecurityContext, value::object());
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

}  // namespace

std::string assignmentConfigMapName(const std::string& job) {
  return job + "-assignment";
}

std::string serviceJson(const JobRef& job, int rpcPort) {
  value s = value::object();
  s["apiVersion"] = str("v1");
  s["kind"] = str("Service");
  s["metadata"] = ownedMetadata(job, job.name);
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
  value cm = value::object();
  cm["apiVersion"] = str("v1");
  cm["kind"] = str("ConfigMap");
  cm["metadata"] = ownedMetadata(job, assignmentConfigMapName(job.name));
  cm["data"][kAssignmentKey] = str(toYaml(assignment));
  return cm.serialize();
}

std::string podJson(const JobRef& job, const api::RpcJobSpec& spec, const planner::Plan& plan,
                    const planner::PodPlan& pod, const std::string& hostname, int generation,
                    PodSecurityLevel level) {
  std::vector<const WorkerEntry*> entries;
  for (const auto& w : pod.workers) {
    if (const WorkerEntry* e = plan.assignment.byName(w)) entries.push_back(e);
  }
  const std::string firstGroup = entries.empty() ? "" : entries.front()->group;
  value tmpl = templateOf(groupOf(spec, firstGroup));
  value podSpec = tmpl.at("spec");
  const int world = plan.assignment.worldSize();

  // The template's first container runs the pod's worker(s); the others are
  // sidecars, kept as they are.
  value containers = tmpl.at("spec").at("containers");
  if (containers.size() > 0 && !entries.empty()) {
    if (entries.size() == 1) {
      makeWorkerContainer(containers[0], job, *entries.front(), world, pod);
    } else {
      makeLauncherContainer(containers[0], job, spec, entries, world, pod);
    }
  }
  for (size_t i = 0; i < containers.size(); ++i) {
    addMount(containers[i], kAssignmentVolume, kAssignmentDir, true);
    addMount(containers[i], kSecretVolume, kSecretDir, true);
    if (pod.shmVolume) addMount(containers[i], kShmVolume, "/dev/shm", false);
  }
  if (containers.size() > 0 && !entries.empty())
    applyPodSecurity(podSpec, containers[0], pod, level);
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
  labels[kLabelGroup] = str(firstGroup);
  labels[kLabelRestartGeneration] = str(std::to_string(generation));
  annotations[kAnnotationNode] = str(pod.node);
  value p = value::object();
  p["apiVersion"] = str("v1");
  p["kind"] = str("Pod");
  p["metadata"] = ownedMetadata(job, pod.name, labels);
  p["metadata"]["annotations"] = annotations;
  p["spec"] = podSpec;
  return p.serialize();
}

}  // namespace rpcjob::op
