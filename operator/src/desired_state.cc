#include "rpcjob/operator/desired_state.h"

#include <time.h>

#include <cstdio>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "json_util.h"
#include "rpcjob/api/names.h"
#include "rpcjob/api/parse.h"
#include "rpcjob/api/serialize.h"
#include "rpcjob/api/validate.h"
#include "rpcjob/api/vocabulary.h"
#include "rpcjob/assignment/pair_links.h"
#include "rpcjob/operator/children.h"
#include "rpcjob/operator/termination_report.h"

namespace rpcjob::op {
namespace {

using web::json::value;
using Clock = std::chrono::system_clock;
namespace r = kube::resources;

// Per-peer channels and device maps are copied into status.workers only up to
// this many workers (all pairs grow quadratically; the ConfigMap has them all).
constexpr int kMaxWorkersWithPeerTables = 32;
constexpr const char* kAnnotationSpecHash = "rpcjob.dev/spec-hash";

// What the run policy needs to know of one pod.
struct PodView {
  const kube::Object* obj = nullptr;
  bool deleting = false;
  int generation = -1;
  std::string phase;
  std::string node;       // planned node (annotation)
  std::string boundNode;  // spec.nodeName: where the scheduler put it
  std::string specHash;   // podSpecHash of the spec it was made from ("" before hashes)
  std::vector<std::string> containers;
  bool ready = false;
  bool schedulerRejected = false;
  std::string detail;  // why it failed or was rejected
};

bool isAdmissionFailure(const std::string& reason) {
  static const std::set<std::string> kReasons = {
      "NodeAffinity", "NodeSelectorMismatching", "UnexpectedAdmissionError", "Unschedulable",
      "NodePorts",    "PodFitsHostPorts"};
  return reason.rfind("OutOf", 0) == 0 || kReasons.count(reason) > 0;
}

PodView viewOf(const kube::Object& pod) {
  PodView v;
  v.obj = &pod;
  v.deleting = !pod.metadata.deletionTimestamp.empty();
  auto gen = pod.metadata.labels.find(kLabelRestartGeneration);
  if (gen != pod.metadata.labels.end()) v.generation = std::atoi(gen->second.c_str());
  auto node = pod.metadata.annotations.find(kAnnotationNode);
  if (node != pod.metadata.annotations.end()) v.node = node->second;
  auto hash = pod.metadata.annotations.find(kAnnotationSpecHash);
  if (hash != pod.metadata.annotations.end()) v.specHash = hash->second;
  auto json = kube::detail::parseJson(pod.json);
  if (json && json->has_object_field("spec")) {
    const value& spec = json->at("spec");
    v.boundNode = kube::detail::getString(spec, "nodeName");
    if (spec.has_array_field("containers")) {
      for (const auto& c : spec.at("containers").as_array()) {
        v.containers.push_back(kube::detail::getString(c, "name"));
      }
    }
  }
  if (!json || !json->has_object_field("status")) return v;
  const value& st = json->at("status");
  v.phase = kube::detail::getString(st, "phase");
  const std::string reason = kube::detail::getString(st, "reason");
  const std::string message = kube::detail::getString(st, "message");
  if (st.has_array_field("conditions")) {
    for (const auto& c : st.at("conditions").as_array()) {
      const std::string type = kube::detail::getString(c, "type");
      const std::string status = kube::detail::getString(c, "status");
      if (type == "Ready") v.ready = status == "True";
      if (type == "PodScheduled" && status == "False" &&
          kube::detail::getString(c, "reason") == "Unschedulable") {
        v.schedulerRejected = true;
        v.detail = kube::detail::getString(c, "message");
      }
    }
  }
  if (v.phase == "Failed" && isAdmissionFailure(reason)) {
    v.schedulerRejected = true;
    v.detail = reason + (message.empty() ? "" : ": " + message);
  }
  if (v.phase == "Failed" && !v.schedulerRejected) {
    v.detail = reason.empty() ? "" : reason;
    if (st.has_array_field("containerStatuses")) {
      for (const auto& cs : st.at("containerStatuses").as_array()) {
        if (!cs.has_object_field("state") || !cs.at("state").has_object_field("terminated")) {
          continue;
        }
        const value& t = cs.at("state").at("terminated");
        int64_t code = kube::detail::getInt(t, "exitCode");
        if (code == 0) continue;
        v.detail = "container " + kube::detail::getString(cs, "name") + " exited with code " +
                   std::to_string(code);
        const std::string why = kube::detail::getString(t, "reason");
        if (!why.empty()) v.detail += " (" + why + ")";
        break;
      }
    }
    // A pod of several workers: its launcher's report names the worker.
    if (auto worker = workerFailureOf(pod.json)) v.detail = *worker;
    if (v.detail.empty())
      v.detail = message.empty() ? "failed" : message;
    else if (v.detail == reason && !message.empty())
      v.detail += ": " + message;  // Evicted
  }
  return v;
}

const api::Condition* findCondition(const std::vector<api::Condition>& cs,
                                    const std::string& type) {
  for (const auto& c : cs) {
    if (c.type == type) return &c;
  }
  return nullptr;
}
bool isTrue(const std::vector<api::Condition>& cs, const std::string& type) {
  const api::Condition* c = findCondition(cs, type);
  return c && c->status == "True";
}

std::string plural(size_t n, const std::string& what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

class Computation {
 public:
  explicit Computation(const ObservedJob& o) : o_(o) {}

  DesiredState run();

 private:
  void setCondition(const std::string& type, bool status, const std::string& reason,
                    const std::string& message);
  void removePod(const PodView& p) {
    if (!p.deleting) d_.remove.push_back({&r::kPods, p.obj->metadata.name, ""});
  }
  void removeAllPods() {
    for (const auto& p : pods_) removePod(p);
  }
  void cleanUpPods();  // cleanPodPolicy on completion
  // false: the job allows only links the namespace forbids (Planned=False set).
  bool applyPodSecurityLevel();
  void invalid(const std::string& message);
  void fail(const std::string& reason, const std::string& message);
  void finishTerminal();  // ttl
  // Every one of the job's `pods` succeeded: the terminal phase, the clean-up.
  void succeed(size_t pods) {
    setCondition("Succeeded", true, "AllWorkersSucceeded",
                 "all " + plural(pods, "pod") + " of the job succeeded");
    setCondition("Running", false, "AllWorkersSucceeded", "");
    d_.status.phase = "Succeeded";
    d_.status.completionTime = now_;
    d_.status.readyWorkers = 0;
    cleanUpPods();
    finishTerminal();
  }
  void relaunch(const std::string& reason, const std::string& message, bool countsAsRestart);
  bool handleNodeLoss(const std::map<std::string, const PodView*>& current);
  bool handleDeletedPod(const std::map<std::string, const PodView*>& current);
  void rejected(const std::string& name, const PodView& p);
  bool holdAfterRejection();
  std::map<std::string, std::string> pinnedWorkers(
      const std::map<std::string, const PodView*>& current) const;
  bool deferSpecEdit(const std::map<std::string, const PodView*>& current);
  void wakeAt(Clock::time_point t) {
    if (!wake_ || t < *wake_) wake_ = t;
  }
  void clearWorkerPhases() {
    for (auto& w : d_.status.workers) w.phase.clear();
  }
  void ensureServiceAndConfigMap();
  void fillWorkers();
  DesiredState finish();

  const ObservedJob& o_;
  DesiredState d_;
  api::RpcJob job_;
  JobRef ref_;
  api::RpcJobStatus prev_;
  std::string now_;
  std::vector<PodView> pods_;      // every pod the job controls
  std::set<std::string> created_;  // pods this computation creates
  std::string specHash_;
  std::optional<Clock::time_point> wake_;
};

void Computation::setCondition(const std::string& type, bool status, const std::string& reason,
                               const std::string& message) {
  auto& cs = d_.status.conditions;
  auto it = std::find_if(cs.begin(), cs.end(), [&](const auto& c) { return c.type == type; });
  const std::string s = status ? "True" : "False";
  if (it == cs.end()) {
    if (!status && reason.empty()) return;
    cs.push_back({type, s, reason, message, now_, o_.job.metadata.generation});
    return;
  }
  if (it->status != s) it->lastTransitionTime = now_;
  it->status = s;
  it->reason = reason;
  it->message = message;
  it->observedGeneration = o_.job.metadata.generation;
}

void Computation::cleanUpPods() {
  const auto policy = job_.spec.runPolicy.cleanPodPolicy;
  if (policy == api::CleanPodPolicy::None) return;
  for (const auto& p : pods_) {
    bool finished = p.phase == "Succeeded" || p.phase == "Failed";
    if (policy == api::CleanPodPolicy::All || !finished) removePod(p);
  }
}

void Computation::invalid(const std::string& message) {
  setCondition("Planned", false, "Invalid", message);
  setCondition("Failed", true, "Invalid", message);
  if (findCondition(d_.status.conditions, "Running")) setCondition("Running", false, "Invalid", "");
  d_.status.phase = "Failed";
  d_.status.readyWorkers = 0;
  clearWorkerPhases();
  removeAllPods();
}

void Computation::fail(const std::string& reason, const std::string& message) {
  setCondition("Failed", true, reason, message);
  setCondition("Running", false, reason, message);
  if (isTrue(d_.status.conditions, "Restarting")) setCondition("Restarting", false, reason, "");
  d_.status.phase = "Failed";
  d_.status.completionTime = now_;
  d_.status.readyWorkers = 0;
  cleanUpPods();
  finishTerminal();
}

void Computation::finishTerminal() {
  const auto& ttl = job_.spec.runPolicy.ttlSecondsAfterFinished;
  auto done = parseTime(d_.status.completionTime);
  if (!ttl || !done) return;
  auto expires = *done + std::chrono::seconds(*ttl);
  if (o_.now >= expires) {
    d_.deleteJob = true;
  } else {
    d_.requeueAfter = std::chrono::duration_cast<std::chrono::milliseconds>(expires - o_.now) +
                      std::chrono::milliseconds(100);
  }
}

void Computation::relaunch(const std::string& reason, const std::string& message,
                           bool countsAsRestart) {
  if (countsAsRestart) {
    const int limit = job_.spec.runPolicy.backoffLimit;
    if (prev_.restarts >= limit) {
      fail("BackoffLimitExceeded", message + "; backoffLimit " + std::to_string(limit) +
                                       " reached after " + plural(prev_.restarts, "restart"));
      return;
    }
    d_.status.restarts = prev_.restarts + 1;
  }
  setCondition(
      "Restarting", true, reason,
      message + (countsAsRestart ? "; restart " + std::to_string(d_.status.restarts) + " of " +
                                       std::to_string(job_.spec.runPolicy.backoffLimit)
                                 : "; re-planning"));
  setCondition("Running", false, reason, message);
  d_.status.phase = "Restarting";
  d_.status.readyWorkers = 0;
  clearWorkerPhases();
  removeAllPods();
}

// A running pod whose node is gone, or NotReady longer than the grace period:
// the pod cannot finish, and its node cannot confirm a deletion (forced).
bool Computation::handleNodeLoss(const std::map<std::string, const PodView*>& current) {
  std::map<std::string, std::string> lost;  // node -> why
  std::string firstPod;
  for (const auto& [name, p] : current) {
    if (p->boundNode.empty() || p->phase == "Succeeded" || p->phase == "Failed") continue;
    const planner::Node* node = nullptr;
    for (const auto& n : o_.cluster.nodes) node = n.name == p->boundNode ? &n : node;
    std::string why;
    if (node == nullptr) {
      why = "node " + p->boundNode + " was deleted";
    } else if (!node->ready) {
      auto since = o_.nodeReadySince.find(p->boundNode);
      if (since != o_.nodeReadySince.end() && o_.now < since->second + o_.nodeLostGrace) {
        wakeAt(since->second + o_.nodeLostGrace);
        continue;
      }
      why = "node " + p->boundNode + " is NotReady" +
            (since == o_.nodeReadySince.end() ? "" : " since " + formatTime(since->second)) +
            " (grace " + std::to_string(o_.nodeLostGrace.count()) + " s)";
    } else {
      continue;
    }
    if (lost.emplace(p->boundNode, why).second && firstPod.empty()) firstPod = name;
  }
  if (lost.empty()) return false;
  const auto& [node, why] = *lost.begin();
  relaunch("NodeLost", why + ": pod " + firstPod + " lost", true);
  for (auto& r : d_.remove) {
    for (const auto& p : pods_) {
      if (p.obj->metadata.name == r.name && lost.count(p.boundNode)) r.force = true;
    }
  }
  if (d_.status.phase != "Failed") fillWorkers();
  clearWorkerPhases();
  return true;
}

// A pod the status says ran for this generation (phase Running), that is gone
// or going without the operator deleting it (kubectl delete, eviction by the API, a
// node's garbage collection): the whole job restarts, counted like a failure
// (a worker's peers cannot continue without it; see operator/README.md).
bool Computation::handleDeletedPod(const std::map<std::string, const PodView*>& current) {
  for (const auto& w : prev_.workers) {
    // Only a pod that ran: one deleted while Pending is simply created again
    // (and a cache that lags behind a create never looks like a deletion).
    if (w.pod.empty() || w.phase != "Running") continue;
    if (current.count(w.pod) || o_.expectedPods.count(w.pod)) continue;
    relaunch("PodDeleted", "pod " + w.pod + " (worker " + w.name + ") was deleted", true);
    if (d_.status.phase != "Failed") fillWorkers();
    clearWorkerPhases();
    return true;
  }
  return false;
}

void Computation::rejected(const std::string& name, const PodView& p) {
  auto& st = d_.status;
  st.schedulerRejections = prev_.schedulerRejections + 1;
  if (!p.node.empty() && std::find(st.rejectedNodes.begin(), st.rejectedNodes.end(), p.node) ==
                             st.rejectedNodes.end()) {
    st.rejectedNodes.push_back(p.node);
  }
  auto delay = rejectionBackoff(ref_.uid, st.schedulerRejections);
  setCondition("Planned", false, "Unschedulable",
               "the scheduler rejected pod " + name + " on " + p.node + ": " + p.detail +
                   "; re-planning without " +
                   (st.rejectedNodes.size() == 1 ? "that node" : "those nodes") + " in " +
                   std::to_string((delay.count() + 999) / 1000) + " s (rejection " +
                   std::to_string(st.schedulerRejections) + ")");
  if (findCondition(st.conditions, "Running")) setCondition("Running", false, "Unschedulable", "");
  st.phase = "Pending";
  st.readyWorkers = 0;
  removeAllPods();
  fillWorkers();
  clearWorkerPhases();
  wakeAt(o_.now + delay);
}

// After a rejection: nothing is created until the backoff has passed.
bool Computation::holdAfterRejection() {
  if (prev_.schedulerRejections <= 0) return false;
  const api::Condition* c = findCondition(prev_.conditions, "Planned");
  if (!c || c->status != "False" || c->reason != "Unschedulable") return false;
  auto since = parseTime(c->lastTransitionTime);
  if (!since) return false;
  auto until = *since + rejectionBackoff(ref_.uid, prev_.schedulerRejections);
  if (o_.now >= until) return false;
  removeAllPods();
  d_.status.phase = "Pending";
  wakeAt(until);
  return true;
}

// Where the live pods of this generation run: their workers stay there.
std::map<std::string, std::string> Computation::pinnedWorkers(
    const std::map<std::string, const PodView*>& current) const {
  std::map<std::string, std::string> pinned;
  const bool shared = job_.spec.placement.workersPerPod == api::WorkersPerPod::Auto;
  for (const auto& [name, p] : current) {
    const std::string node = p->boundNode.empty() ? p->node : p->boundNode;
    if (node.empty()) continue;
    for (const auto& g : job_.spec.workers) {
      for (int i = 0; i < g.replicas; ++i) {
        const std::string worker = api::workerName(g, i);
        bool in = shared ? std::find(p->containers.begin(), p->containers.end(), worker) !=
                               p->containers.end()
                         : api::workerPodName(ref_.name, g.name, i) == name;
        if (in) pinned[worker] = node;
      }
    }
  }
  return pinned;
}

// Live pods made from another spec (all but runPolicy): a running job's pods
// are never changed in place, so the edit waits for the next launch (a restart,
// or suspend and resume); SpecApplied says so and observedGeneration stays.
bool Computation::deferSpecEdit(const std::map<std::string, const PodView*>& current) {
  bool stale = false;
  for (const auto& [name, p] : current) {
    if (!p->specHash.empty() && p->specHash != specHash_) stale = true;
  }
  if (!stale) {
    if (findCondition(prev_.conditions, "SpecApplied") &&
        !isTrue(prev_.conditions, "SpecApplied")) {
      setCondition("SpecApplied", true, "Applied", "the pods run the current spec");
    }
    return false;
  }
  d_.status.observedGeneration = prev_.observedGeneration;
  setCondition("SpecApplied", false, "DeferredWhileRunning",
               "spec changed (generation " + std::to_string(o_.job.metadata.generation) +
                   ") while pods of an older spec run; pods are never changed in place: the change "
                   "applies at the next launch (a restart, or suspend and resume)");
  return true;
}

void Computation::ensureServiceAndConfigMap() {
  auto has = [](const std::vector<kube::ObjectPtr>& list, const std::string& name) {
    for (const auto& o : list) {
      if (o->metadata.name == name) return o;
    }
    return kube::ObjectPtr();
  };
  if (!has(o_.services, ref_.name)) {
    d_.create.push_back({&r::kServices, ref_.name, serviceJson(ref_, planner::kDefaultRpcPort)});
  }
  const std::string cmName = assignmentConfigMapName(ref_.name);
  const std::string cm = configMapJson(ref_, d_.plan.assignment);
  if (auto existing = has(o_.configMaps, cmName)) {
    if (kube::jsonString(existing->json, "/data/assignment.yaml") != toYaml(d_.plan.assignment)) {
      d_.update.push_back({&r::kConfigMaps, cmName, cm});
    }
  } else {
    d_.create.push_back({&r::kConfigMaps, cmName, cm});
  }
}

void Computation::fillWorkers() {
  std::map<std::string, const PodView*> byName;
  for (const auto& p : pods_) {
    if (!p.deleting && p.generation == d_.status.restarts) byName[p.obj->metadata.name] = &p;
  }
  const bool tables = d_.plan.assignment.worldSize() <= kMaxWorkersWithPeerTables;
  d_.status.workers.clear();
  for (const auto& w : d_.plan.workers) {
    api::WorkerStatus ws;
    ws.name = w.name;
    ws.rank = w.rank;
    ws.group = w.group;
    ws.pod = w.pod;
    ws.node = w.node;
    ws.gpus = w.gpus;
    if (const WorkerEntry* e = d_.plan.assignment.byName(w.name)) {
      ws.address = e->address;
      if (tables) {  // derived from the compact table, as the runtime derives them
        ws.channels = channelsOf(d_.plan.assignment, w.name);
        for (const auto& [peer, map] : deviceMapsOf(d_.plan.assignment, w.name)) {
          ws.deviceMaps[peer] = std::map<std::string, std::string>(map.begin(), map.end());
        }
      }
    }
    auto pod = byName.find(w.pod);
    ws.phase = pod == byName.end() ? "" : pod->second->phase;
    if (ws.phase.empty() && (pod != byName.end() || created_.count(w.pod))) ws.phase = "Pending";
    d_.status.workers.push_back(std::move(ws));
  }
}

// The transports and channels the namespace's level forbids leave the job's
// lists (the assignment's: the workers never try them), and the PodSecurity
// condition says which, what each needs and the level.
bool Computation::applyPodSecurityLevel() {
  const std::vector<LeftOut> out = leftOutBy(o_.podSecurity);
  const std::string level =
      "namespace " + ref_.ns + " enforces Pod Security level \"" + toString(o_.podSecurity) + "\"";
  std::string message;
  for (const auto& [field, list, known] :
       {std::tuple{"spec.transports", &job_.spec.transports, &api::knownTransports()},
        std::tuple{"spec.channels", &job_.spec.channels, &api::knownChannels()}}) {
    const std::vector<std::string>& before = list->empty() ? *known : *list;
    std::string removed;
    for (const auto& l : out) {
      if (std::find(before.begin(), before.end(), l.name) == before.end()) continue;
      removed += (removed.empty() ? "" : ", ") + l.name + " (needs " + l.capability + ")";
    }
    const bool named = !list->empty();
    *list = withoutLeftOut(*list, *known, out);
    if (named && list->empty()) {
      // Empty means "all viable": never plan a job with what it did not allow.
      setCondition("Planned", false, "NoTransport",
                   std::string(field) + " allows only " + removed + ", which " + level +
                       " forbids: allow another, or run the job in a namespace that allows " +
                       "what it needs");
      d_.status.phase = "Pending";
      return false;
    }
    if (!removed.empty()) message += (message.empty() ? "" : ", ") + removed;
  }
  // What is left out today (ibv, cuda_gdr) is RDMA: worth a Warning only where a
  // node has RDMA for the job to miss.
  const bool rdma = std::any_of(o_.cluster.nodes.begin(), o_.cluster.nodes.end(),
                                [](const planner::Node& n) { return n.hasRdma(); });
  if (!message.empty() && rdma) {
    setCondition("PodSecurity", true, "LinksLeftOut",
                 level + ": left out " + message + "; the workers use the other allowed links");
  } else if (isTrue(prev_.conditions, "PodSecurity")) {
    setCondition("PodSecurity", false, "NothingLeftOut", "");
  }
  return true;
}

DesiredState Computation::finish() {
  // Events: one per condition transition.
  for (const auto& c : d_.status.conditions) {
    const api::Condition* before = findCondition(prev_.conditions, c.type);
    bool changed = !before || before->status != c.status || before->reason != c.reason;
    if (!changed) continue;
    const bool isTrueNow = c.status == "True";
    bool worth = isTrueNow || (c.type == "Planned") || (c.type == "Suspended" && before) ||
                 (c.type == "Restarting" && before);
    if (!worth || c.reason.empty()) continue;
    bool warning = (c.type == "Failed" && isTrueNow) || (c.type == "Restarting" && isTrueNow) ||
                   (c.type == "Planned" && !isTrueNow) || (c.type == "PodSecurity" && isTrueNow);
    // One Event per reason (Invalid turns two conditions at once).
    bool seen = std::any_of(d_.events.begin(), d_.events.end(),
                            [&](const JobEvent& e) { return e.reason == c.reason; });
    if (seen) continue;
    d_.events.push_back({warning ? "Warning" : "Normal", c.reason,
                         c.message.empty() ? c.type + " is " + c.status : c.message});
  }
  d_.statusChanged = api::statusToJson(d_.status) != api::statusToJson(prev_);
  if (wake_) {
    auto in = std::chrono::duration_cast<std::chrono::milliseconds>(*wake_ - o_.now) +
              std::chrono::milliseconds(100);
    if (!d_.requeueAfter || in < *d_.requeueAfter) d_.requeueAfter = in;
  }
  return std::move(d_);
}

DesiredState Computation::run() {
  const auto& meta = o_.job.metadata;
  ref_ = {meta.name, meta.namespace_.empty() ? "default" : meta.namespace_, meta.uid};
  now_ = formatTime(o_.now);
  for (const auto& p : o_.pods) pods_.push_back(viewOf(*p));

  api::ParseResult parsed = api::parseRpcJobUnvalidated(o_.job.json);
  job_ = parsed.job;
  job_.metadata.name = meta.name;
  job_.metadata.namespaceName = ref_.ns;
  job_.metadata.uid = meta.uid;
  job_.metadata.generation = meta.generation;
  prev_ = job_.status.value_or(api::RpcJobStatus{});
  specHash_ = podSpecHash(o_.job.json);
  d_.status = prev_;
  d_.status.observedGeneration = meta.generation;

  std::vector<api::FieldError> errors = parsed.errors;
  if (errors.empty()) errors = api::validateRpcJob(job_);
  if (!errors.empty()) {
    invalid(api::formatErrors(errors));
    return finish();
  }
  const api::Condition* failed = findCondition(prev_.conditions, "Failed");
  if (failed && failed->status == "True" && failed->reason == "Invalid") {
    setCondition("Failed", false, "Valid", "the spec passes validation now");
    d_.status.phase = "Pending";
  }
  d_.status.workerCount = api::totalWorkers(job_.spec);

  // Finished: only clean-up and time to live.
  if (isTrue(d_.status.conditions, "Succeeded") || isTrue(d_.status.conditions, "Failed")) {
    cleanUpPods();
    finishTerminal();
    return finish();
  }

  if (job_.spec.runPolicy.suspend) {
    removeAllPods();
    setCondition("Suspended", true, "Suspended", "spec.runPolicy.suspend is true: pods deleted");
    if (findCondition(d_.status.conditions, "Running")) {
      setCondition("Running", false, "Suspended", "");
    }
    d_.status.phase = "Suspended";
    d_.status.startTime.clear();
    d_.status.readyWorkers = 0;
    for (auto& w : d_.status.workers) w.phase.clear();
    return finish();
  }
  if (isTrue(prev_.conditions, "Suspended")) {
    setCondition("Suspended", false, "Resumed", "spec.runPolicy.suspend is false: pods recreated");
  }

  const auto& deadline = job_.spec.runPolicy.activeDeadlineSeconds;
  auto started = parseTime(d_.status.startTime);
  if (deadline && started && o_.now >= *started + std::chrono::seconds(*deadline)) {
    fail("DeadlineExceeded",
         "the job ran longer than activeDeadlineSeconds (" + std::to_string(*deadline) + " s)");
    return finish();
  }
  if (deadline && started) wakeAt(*started + std::chrono::seconds(*deadline));

  // The pods of the current generation, by name; the others go.
  const int gen = prev_.restarts;
  std::map<std::string, const PodView*> current;
  std::set<std::string> taken;  // names held by any pod, even one being deleted
  for (const auto& p : pods_) {
    taken.insert(p.obj->metadata.name);
    if (p.deleting) continue;
    if (p.generation == gen) {
      current[p.obj->metadata.name] = &p;
    } else {
      removePod(p);
    }
  }

  // Failures first, before any planning: the status never says Running while a
  // worker is gone.
  if (handleNodeLoss(current)) return finish();
  for (const auto& [name, p] : current) {
    if (p->phase == "Failed" && !p->schedulerRejected) {
      relaunch("WorkerFailed", "pod " + name + " failed: " + p->detail, true);
      if (d_.status.phase != "Failed") fillWorkers();
      clearWorkerPhases();
      return finish();
    }
  }
  if (handleDeletedPod(current)) return finish();
  for (const auto& [name, p] : current) {
    if (p->schedulerRejected) {
      rejected(name, *p);
      return finish();
    }
  }
  if (holdAfterRejection()) return finish();

  // A spec edit under running pods waits (they are never changed in place).
  if (deferSpecEdit(current)) {
    size_t succeeded = 0, running = 0;
    for (const auto& [name, p] : current) {
      succeeded += p->phase == "Succeeded";
      running += p->phase == "Running";
    }
    std::set<std::string> launched;
    for (const auto& w : prev_.workers) launched.insert(w.pod);
    if (!launched.empty() && succeeded == launched.size() && current.size() == launched.size()) {
      succeed(launched.size());
    }
    return finish();
  }

  if (!applyPodSecurityLevel()) return finish();

  // Plan: the live pods stay where they are (pinned); only missing pods are placed.
  planner::PlanOptions po;
  po.target = planner::Target::Kubernetes;
  po.pinned = pinnedWorkers(current);
  if (!prev_.rejectedNodes.empty() && po.pinned.empty()) {
    // Leave out the nodes that rejected this job while another placement fits.
    planner::ClusterView avoiding = o_.cluster;
    for (auto& n : avoiding.nodes) {
      if (std::find(prev_.rejectedNodes.begin(), prev_.rejectedNodes.end(), n.name) !=
          prev_.rejectedNodes.end()) {
        n.unschedulable = true;
      }
    }
    d_.plan = planner::planJob(job_, avoiding, po);
  }
  if (!d_.plan.planned()) d_.plan = planner::planJob(job_, o_.cluster, po);
  if (d_.plan.outcome == planner::PlanOutcome::Invalid) {
    invalid(d_.plan.message.empty() ? api::formatErrors(d_.plan.errors) : d_.plan.message);
    return finish();
  }
  if (!d_.plan.planned() && !po.pinned.empty()) {
    // The live pods' placement is no longer valid (a pinned node left the view
    // before it was seen lost): relaunch, not counted.
    relaunch("PlacementInvalid", d_.plan.message, false);
    return finish();
  }
  if (!d_.plan.planned()) {
    setCondition("Planned", false, d_.plan.reason, d_.plan.message);
    bool anyPods =
        std::any_of(pods_.begin(), pods_.end(), [](const auto& p) { return !p.deleting; });
    if (!anyPods) {
      d_.status.phase = "Pending";
      d_.status.readyWorkers = 0;
    }
    return finish();
  }
  setCondition("Planned", true, "Planned", d_.plan.message);
  ensureServiceAndConfigMap();

  std::map<std::string, const planner::PodPlan*> planned;
  for (const auto& pp : d_.plan.pods) planned[pp.name] = &pp;

  size_t succeeded = 0, running = 0, bound = 0;
  int ready = 0;
  for (const auto& [name, p] : current) {
    if (p->phase == "Succeeded") ++succeeded;
    if (!p->boundNode.empty()) ++bound;
    if (p->phase == "Running") {
      ++running;
      auto pp = planned.find(name);
      if (p->ready && pp != planned.end()) ready += static_cast<int>(pp->second->workers.size());
    }
  }
  const size_t n = d_.plan.pods.size();
  if (succeeded == n && current.size() == n) {
    if (isTrue(d_.status.conditions, "Restarting"))
      setCondition("Restarting", false, "Relaunched", "");
    fillWorkers();
    succeed(n);
    return finish();
  }
  if (bound == n && current.size() == n) {
    d_.status.schedulerRejections = 0;  // the scheduler took them all
    d_.status.rejectedNodes.clear();
  }

  // Create what is missing; a name still held by an old pod waits for its deletion.
  size_t present = current.size();
  for (const auto& pp : d_.plan.pods) {
    if (current.count(pp.name)) continue;
    if (o_.expectedPods.count(pp.name)) {
      created_.insert(pp.name);  // created, not in the cache yet
      ++present;
      continue;
    }
    if (taken.count(pp.name)) continue;
    std::string hostname = pp.node;
    for (const auto& node : o_.cluster.nodes) {
      if (node.name != pp.node) continue;
      auto h = node.labels.find(kHostnameLabel);
      if (h != node.labels.end()) hostname = h->second;
    }
    auto pod = kube::detail::parseJson(
        podJson(ref_, job_.spec, d_.plan, pp, hostname, gen, o_.podSecurity));
    if (!pod) continue;
    (*pod)["metadata"]["annotations"][kAnnotationSpecHash] = value::string(specHash_);
    d_.create.push_back({&r::kPods, pp.name, pod->serialize()});
    created_.insert(pp.name);
    ++present;
  }
  fillWorkers();
  if (d_.status.startTime.empty() && present > 0) d_.status.startTime = now_;
  if (isTrue(prev_.conditions, "Restarting") && present == n) {
    setCondition("Restarting", false, "Relaunched", "all " + plural(n, "pod") + " recreated");
  }
  d_.status.readyWorkers = ready;
  if (running == n) {
    setCondition("Running", true, "AllWorkersRunning", "all " + plural(n, "pod") + " running");
  } else if (findCondition(d_.status.conditions, "Running") || present > 0) {
    setCondition("Running", false, "WorkersPending",
                 std::to_string(running) + " of " + plural(n, "pod") + " running");
  }
  if (isTrue(d_.status.conditions, "Restarting")) {
    d_.status.phase = "Restarting";
  } else {
    d_.status.phase = running == n ? "Running" : "Planned";
  }
  if (deadline) {
    auto start = parseTime(d_.status.startTime).value_or(o_.now);
    wakeAt(start + std::chrono::seconds(*deadline));
  }
  return finish();
}

}  // namespace

std::string formatTime(Clock::time_point t) {
  std::time_t s = Clock::to_time_t(t);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::optional<Clock::time_point> parseTime(const std::string& text) {
  if (text.empty()) return std::nullopt;
  std::tm tm{};
  const char* end = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (end == nullptr) return std::nullopt;
  if (*end == '.') {
    ++end;
    while (*end >= '0' && *end <= '9') ++end;
  }
  if (*end != 'Z' || end[1] != '\0') return std::nullopt;
  return Clock::from_time_t(timegm(&tm));
}

DesiredState computeDesiredState(const ObservedJob& observed) {
  return Computation(observed).run();
}

namespace {
uint64_t fnv1a(const std::string& text, uint64_t h = 1469598103934665603ULL) {
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}
}  // namespace

std::chrono::milliseconds rejectionBackoff(const std::string& uid, int rejections) {
  constexpr int64_t kBaseMs = 5000, kCapMs = 300000;
  int64_t ms = kBaseMs;
  for (int i = 1; i < rejections && ms < kCapMs; ++i) ms *= 2;
  ms = std::min(ms, kCapMs);
  const double jitter =
      0.5 +
      0.5 * static_cast<double>(fnv1a(uid + "/" + std::to_string(rejections)) % 1000) / 1000.0;
  return std::chrono::milliseconds(static_cast<int64_t>(static_cast<double>(ms) * jitter));
}

std::string podSpecHash(const std::string& jobJson) {
  auto v = kube::detail::parseJson(jobJson);
  std::string text;
  if (v && v->has_object_field("spec")) {
    value spec = v->at("spec");
    if (spec.has_field("runPolicy")) spec.erase("runPolicy");
    text = spec.serialize();
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(fnv1a(text)));
  return buf;
}

void applyChildErrors(DesiredState& d, const api::RpcJobStatus& observed,
                      const std::vector<ChildError>& errors, const std::string& now) {
  auto& cs = d.status.conditions;
  auto it =
      std::find_if(cs.begin(), cs.end(), [](const auto& c) { return c.type == "ReplicaFailure"; });
  const api::Condition* before = findCondition(observed.conditions, "ReplicaFailure");
  if (errors.empty()) {
    if (it != cs.end() && it->status == "True") {
      it->status = "False";
      it->reason = "Created";
      it->message = "";
      it->lastTransitionTime = now;
    }
  } else {
    const ChildError& e = errors.front();
    std::string message = e.kind + " " + e.name + ": " + e.message;
    if (errors.size() > 1) message += " (and " + plural(errors.size() - 1, "more error") + ")";
    if (it == cs.end()) {
      cs.push_back({"ReplicaFailure", "True", e.reason, message, now, d.status.observedGeneration});
    } else {
      if (it->status != "True") it->lastTransitionTime = now;
      it->status = "True";
      it->reason = e.reason;
      it->message = message;
    }
    if (!before || before->status != "True" || before->reason != e.reason ||
        before->message != message) {
      d.events.push_back({"Warning", e.reason, message});
    }
    for (auto& w : d.status.workers) {
      for (const auto& err : errors) {
        if (err.kind == "Pod" && err.name == w.pod) w.phase.clear();
      }
    }
  }
  d.statusChanged = api::statusToJson(d.status) != api::statusToJson(observed);
}

}  // namespace rpcjob::op
