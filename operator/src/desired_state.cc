#include "rpcjob/operator/desired_state.h"

#include <time.h>

#include <algorithm>
#include <map>
#include <set>

#include "json_util.h"
#include "rpcjob/api/names.h"
#include "rpcjob/api/parse.h"
#include "rpcjob/api/serialize.h"
#include "rpcjob/api/validate.h"
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
// How long pods rejected by the scheduler wait before they are planned and
// created again.
constexpr std::chrono::seconds kReplanDelay{10};

// What the run policy needs to know of one pod.
struct PodView {
  const kube::Object* obj = nullptr;
  bool deleting = false;
  int generation = -1;
  std::string phase;
  std::string node;  // planned node (annotation)
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
  auto json = kube::detail::parseJson(pod.json);
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
    if (v.detail.empty()) v.detail = message.empty() ? "failed" : message;
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
  void invalid(const std::string& message);
  void fail(const std::string& reason, const std::string& message);
  void finishTerminal();  // ttl
  void relaunch(const std::string& reason, const std::string& message, bool countsAsRestart);
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
  removeAllPods();
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
                   (c.type == "Planned" && !isTrueNow);
    // One Event per reason (Invalid turns two conditions at once).
    bool seen = std::any_of(d_.events.begin(), d_.events.end(),
                            [&](const JobEvent& e) { return e.reason == c.reason; });
    if (seen) continue;
    d_.events.push_back({warning ? "Warning" : "Normal", c.reason,
                         c.message.empty() ? c.type + " is " + c.status : c.message});
  }
  d_.statusChanged = api::statusToJson(d_.status) != api::statusToJson(prev_);
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

  planner::PlanOptions po;
  po.target = planner::Target::Kubernetes;
  d_.plan = planner::planJob(job_, o_.cluster, po);
  if (d_.plan.outcome == planner::PlanOutcome::Invalid) {
    invalid(d_.plan.message.empty() ? api::formatErrors(d_.plan.errors) : d_.plan.message);
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
  std::map<std::string, const planner::PodPlan*> planned;
  for (const auto& pp : d_.plan.pods) planned[pp.name] = &pp;

  for (const auto& [name, p] : current) {
    if (p->schedulerRejected) {
      relaunch("SchedulerRejected",
               "pod " + name + " was rejected on " + p->node + ": " + p->detail, false);
      fillWorkers();
      return finish();
    }
  }
  for (const auto& [name, p] : current) {
    if (p->phase == "Failed") {
      relaunch("WorkerFailed", "pod " + name + " failed: " + p->detail, true);
      if (d_.status.phase != "Failed") fillWorkers();
      return finish();
    }
  }
  for (const auto& [name, p] : current) {
    auto want = planned.find(name);
    if (want == planned.end() || want->second->node != p->node) {
      relaunch("PlacementChanged",
               "pod " + name + " is on " + p->node + " but the plan now puts " +
                   (want == planned.end() ? "no pod of that name" : "it on " + want->second->node),
               false);
      fillWorkers();
      return finish();
    }
  }

  size_t succeeded = 0, running = 0;
  int ready = 0;
  for (const auto& [name, p] : current) {
    if (p->phase == "Succeeded") ++succeeded;
    if (p->phase == "Running") {
      ++running;
      if (p->ready) ready += static_cast<int>(planned.at(name)->workers.size());
    }
  }
  const size_t n = d_.plan.pods.size();
  if (succeeded == n && current.size() == n) {
    setCondition("Succeeded", true, "AllWorkersSucceeded",
                 "all " + plural(n, "pod") + " of the job succeeded");
    setCondition("Running", false, "AllWorkersSucceeded", "");
    if (isTrue(d_.status.conditions, "Restarting"))
      setCondition("Restarting", false, "Relaunched", "");
    fillWorkers();
    d_.status.phase = "Succeeded";
    d_.status.completionTime = now_;
    d_.status.readyWorkers = 0;
    cleanUpPods();
    finishTerminal();
    return finish();
  }

  // Create what is missing; a name still held by an old pod waits for its deletion.
  // After a scheduler rejection, wait kReplanDelay first: the cluster may not have
  // changed yet, and an identical plan would only be rejected again.
  std::optional<Clock::time_point> holdUntil;
  if (const api::Condition* c = findCondition(prev_.conditions, "Restarting");
      c && c->status == "True" && c->reason == "SchedulerRejected") {
    auto since = parseTime(c->lastTransitionTime);
    if (since && o_.now < *since + kReplanDelay) holdUntil = *since + kReplanDelay;
  }
  size_t present = current.size();
  for (const auto& pp : d_.plan.pods) {
    if (current.count(pp.name) || taken.count(pp.name) || holdUntil) continue;
    std::string hostname = pp.node;
    for (const auto& node : o_.cluster.nodes) {
      if (node.name != pp.node) continue;
      auto h = node.labels.find(kHostnameLabel);
      if (h != node.labels.end()) hostname = h->second;
    }
    d_.create.push_back({&r::kPods, pp.name, podJson(ref_, job_.spec, d_.plan, pp, hostname, gen)});
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
  if (holdUntil) {
    d_.requeueAfter = std::chrono::duration_cast<std::chrono::milliseconds>(*holdUntil - o_.now) +
                      std::chrono::milliseconds(100);
  } else if (deadline) {
    auto start = parseTime(d_.status.startTime).value_or(o_.now);
    auto left = start + std::chrono::seconds(*deadline) - o_.now;
    d_.requeueAfter = std::chrono::duration_cast<std::chrono::milliseconds>(left) +
                      std::chrono::milliseconds(100);
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

}  // namespace rpcjob::op
