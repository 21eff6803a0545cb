// The reconciler's pure parts: Node/Pod JSON -> ClusterView, the children built
// from a plan, and computeDesiredState's status and run policy, step by step
// through a simulated world (what the API server would hold after each act).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "rpcjob/api/parse.h"
#include "rpcjob/api/serialize.h"
#include "rpcjob/assignment/assignment.h"
#include "rpcjob/assignment/pod_launch.h"
#include "rpcjob/operator/children.h"
#include "rpcjob/operator/cluster_view.h"
#include "rpcjob/operator/desired_state.h"

namespace rpcjob::op {
namespace {

using namespace std::chrono_literals;
using kube::jsonString;

std::string nodeJson(const std::string& name, int gpus, bool ready = true,
                     const std::string& extraSpec = "") {
  return R"({"apiVersion":"v1","kind":"Node","metadata":{"name":")" + name +
         R"(","labels":{"kubernetes.io/hostname":")" + name + R"("}},"spec":{)" + extraSpec +
         R"(},"status":{"allocatable":{"nvidia.com/gpu":")" + std::to_string(gpus) +
         R"(","cpu":"32","memory":"128Gi"},"conditions":[{"type":"Ready","status":")" +
         (ready ? "True" : "False") + R"("}]}})";
}

kube::ObjectPtr obj(const std::string& json) {
  return std::make_shared<const kube::Object>(kube::parseObject(json));
}

TEST(ClusterView, NodeFromJson) {
  planner::Node n = nodeFromJson(
      nodeJson("a", 8, true,
               R"("unschedulable":true,"taints":[{"key":"k","value":"v","effect":"NoSchedule"}])"));
  EXPECT_EQ(n.name, "a");
  EXPECT_EQ(n.allocatable.gpus, 8);
  EXPECT_EQ(n.allocatable.cpuMilli, 32000);
  EXPECT_EQ(n.allocatable.memoryBytes, 128LL << 30);
  EXPECT_TRUE(n.ready);
  EXPECT_TRUE(n.unschedulable);
  ASSERT_EQ(n.taints.size(), 1u);
  EXPECT_EQ(n.taints[0].effect, "NoSchedule");
  EXPECT_FALSE(nodeFromJson(nodeJson("b", 1, false)).ready);
  EXPECT_FALSE(nodeFromJson(R"({"metadata":{"name":"c"}})").ready) << "no conditions: not ready";
  EXPECT_FALSE(nodeFromJson("not json").ready);
}

TEST(ClusterView, PodUsage) {
  const std::string pod =
      R"({"metadata":{"name":"p","namespace":"n"},"spec":{"nodeName":"a","containers":[)"
      R"({"name":"x","resources":{"limits":{"nvidia.com/gpu":"2","cpu":"2"},"requests":{"cpu":"500m"}}},)"
      R"({"name":"y","resources":{"requests":{"memory":"1Gi"}}}],)"
      R"("initContainers":[{"name":"i","resources":{"requests":{"cpu":"4"}}}]},"status":{"phase":"Running"}})";
  planner::Resources r = podRequests(pod);
  EXPECT_EQ(r.gpus, 2) << "requests default to limits";
  EXPECT_EQ(r.cpuMilli, 4000) << "the largest init container wins over the sum";
  EXPECT_EQ(r.memoryBytes, 1LL << 30);
  EXPECT_TRUE(podHoldsResources(pod));
  EXPECT_FALSE(podHoldsResources(R"({"spec":{},"status":{"phase":"Pending"}})"));
  EXPECT_FALSE(podHoldsResources(R"({"spec":{"nodeName":"a"},"status":{"phase":"Succeeded"}})"));

  std::string owned =
      R"({"metadata":{"name":"q","namespace":"n","ownerReferences":[{"apiVersion":"rpcjob.dev/v1alpha1","kind":"RpcJob","name":"j","uid":"U","controller":true}]},)"
      R"("spec":{"nodeName":"a","containers":[{"name":"x","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}})";
  auto view = clusterViewFrom({obj(nodeJson("a", 8))}, {obj(pod), obj(owned)}, "U");
  ASSERT_EQ(view.nodes.size(), 1u);
  EXPECT_EQ(view.freeOn(view.nodes[0]).gpus, 6) << "the job's own pod is not counted";
  EXPECT_EQ(clusterViewFrom({obj(nodeJson("a", 8))}, {obj(pod), obj(owned)}).used["a"].gpus, 3);
}

TEST(Time, FormatAndParse) {
  auto t = std::chrono::system_clock::from_time_t(1800000000);
  EXPECT_EQ(formatTime(t), "2027-01-15T08:00:00Z");
  EXPECT_EQ(parseTime("2027-01-15T08:00:00Z"), t);
  EXPECT_EQ(parseTime("2027-01-15T08:00:00.123456Z"), t);
  EXPECT_FALSE(parseTime("yesterday"));
  EXPECT_FALSE(parseTime(""));
}

// A world the desired state acts on, as the API server would hold it.
class World {
 public:
  explicit World(std::string spec) : spec_(std::move(spec)) {
    nodes_.push_back(obj(nodeJson("node-a", 4)));
    nodes_.push_back(obj(nodeJson("node-b", 4)));
  }

  ObservedJob observe() const {
    ObservedJob o;
    std::string json =
        R"({"apiVersion":"rpcjob.dev/v1alpha1","kind":"RpcJob","metadata":{"name":"job","namespace":"ns","uid":"UID","generation":)" +
        std::to_string(generation) + R"(,"resourceVersion":"1"},"spec":)" + spec_ +
        (status_.empty() ? "" : R"(,"status":)" + status_) + "}";
    o.job = kube::parseObject(json);
    for (const auto& [name, p] : pods_) o.pods.push_back(p);
    for (const auto& [name, s] : others_) {
      (s->kind == "Service" ? o.services : o.configMaps).push_back(s);
    }
    o.cluster = clusterViewFrom(nodes_, {}, "UID");
    o.nodeReadySince = readySince;
    o.now = now;
    o.podSecurity = podSecurity;
    return o;
  }

  // Applies what the reconciler would do.
  DesiredState step() {
    DesiredState d = computeDesiredState(observe());
    for (const auto& c : d.create) {
      auto& into = c.resource->kind == "Pod" ? pods_ : others_;
      if (!into.count(c.name)) into[c.name] = obj(c.json);
    }
    for (const auto& c : d.update) others_[c.name] = obj(c.json);
    for (const auto& c : d.remove) pods_.erase(c.name);
    if (d.statusChanged) status_ = api::statusToJson(d.status);
    for (const auto& e : d.events) events.push_back(e.reason);
    return d;
  }

  void setPodStatus(const std::string& name, const std::string& status) {
    std::string json = pods_.at(name)->json;
    auto at = json.find(",\"status\":");
    if (at != std::string::npos) json = json.substr(0, at) + "}";
    json.pop_back();
    pods_[name] = obj(json + R"(,"status":)" + status + "}");
  }
  void setAllPods(const std::string& status) {
    for (const auto& [name, p] : std::map<std::string, kube::ObjectPtr>(pods_)) {
      setPodStatus(name, status);
    }
  }
  void labelNodesRdma() {
    for (auto& n : nodes_) {
      std::string json = n->json;
      json.replace(json.find("\"labels\":{") + 10, 0, R"("rpcjob.dev/rdma":"true",)");
      n = obj(json);
    }
  }
  void markDeleting(const std::string& name) {
    std::string json = pods_.at(name)->json;
    json.replace(json.find("\"metadata\":{") + 12, 0,
                 R"("deletionTimestamp":"2026-01-01T00:00:00Z",)");
    pods_[name] = obj(json);
  }

  api::RpcJobStatus status() const {
    auto r = api::parseRpcJobUnvalidated(
        R"({"apiVersion":"rpcjob.dev/v1alpha1","kind":"RpcJob","metadata":{"name":"job"},"spec":)" +
        spec_ + R"(,"status":)" + (status_.empty() ? "{}" : status_) + "}");
    return r.job.status.value_or(api::RpcJobStatus{});
  }
  const api::Condition* condition(const std::string& type) const {
    static api::RpcJobStatus st;
    st = status();
    for (const auto& c : st.conditions) {
      if (c.type == type) return new api::Condition(c);  // leaked in tests only
    }
    return nullptr;
  }
  std::string conditionString(const std::string& type) const {
    const api::Condition* c = condition(type);
    return c ? c->status + "/" + c->reason : "absent";
  }

  std::map<std::string, kube::ObjectPtr> pods_;
  std::map<std::string, kube::ObjectPtr> others_;
  std::vector<kube::ObjectPtr> nodes_;
  std::map<std::string, std::chrono::system_clock::time_point> readySince;
  std::vector<std::string> events;
  std::string spec_;
  std::string status_;
  int64_t generation = 1;
  PodSecurityLevel podSecurity = PodSecurityLevel::Privileged;
  std::chrono::system_clock::time_point now = std::chrono::system_clock::from_time_t(1800000000);
};

const std::string kRunning =
    R"({"phase":"Running","conditions":[{"type":"Ready","status":"True"}]})";
const std::string kSucceeded = R"({"phase":"Succeeded"})";
const std::string kFailed =
    R"({"phase":"Failed","containerStatuses":[{"name":"w","state":{"terminated":{"exitCode":3,"reason":"Error"}}}]})";

std::string spec(const std::string& runPolicy = "{}", int workers = 3, int gpus = 1,
                 const std::string& placement = "{}") {
  return R"({"workers":[{"name":"master","gpusPerWorker":)" + std::to_string(gpus) +
         R"(,"template":{"spec":{"containers":[{"name":"w","image":"img","env":[{"name":"X","value":"1"},{"name":"RPCJOB_RANK","value":"99"}]},{"name":"side","image":"s"}]}}},)"
         R"({"name":"worker","replicas":)" +
         std::to_string(workers) + R"(,"gpusPerWorker":)" + std::to_string(gpus) +
         R"(,"template":{"metadata":{"labels":{"team":"a"}},"spec":{"containers":[{"name":"w","image":"img"}]}}}],)"
         R"("placement":)" +
         placement + R"(,"runPolicy":)" + runPolicy + "}";
}

TEST(DesiredState, FreshJobCreatesServiceConfigMapAndPodsThenSettles) {
  World w(spec());
  DesiredState d = w.step();
  ASSERT_TRUE(d.plan.planned()) << d.plan.message;
  EXPECT_EQ(d.create.size(), 2u + 4u);
  EXPECT_TRUE(d.statusChanged);
  EXPECT_EQ(w.pods_.size(), 4u);
  EXPECT_EQ(w.status().phase, "Planned");
  EXPECT_EQ(w.status().workerCount, 4);
  EXPECT_EQ(w.status().startTime, "2027-01-15T08:00:00Z");
  EXPECT_EQ(w.conditionString("Planned"), "True/Planned");
  EXPECT_EQ(w.conditionString("Running"), "False/WorkersPending");
  ASSERT_EQ(w.status().workers.size(), 4u);
  EXPECT_EQ(w.status().workers[0].name, "master");
  EXPECT_EQ(w.status().workers[0].rank, 0);
  EXPECT_EQ(w.status().workers[0].phase, "Pending");
  EXPECT_FALSE(w.status().workers[0].deviceMaps.empty());
  EXPECT_EQ(w.events, std::vector<std::string>{"Planned"});

  // The Service: headless, published before readiness.
  const std::string svc = w.others_.at("job")->json;
  EXPECT_EQ(jsonString(svc, "/spec/clusterIP"), "None");
  EXPECT_EQ(jsonString(svc, "/spec/publishNotReadyAddresses"), "true");
  EXPECT_EQ(jsonString(svc, "/spec/selector/rpcjob.dev~1job-name"), "job");
  EXPECT_EQ(jsonString(svc, "/metadata/ownerReferences/0/uid"), "UID");
  // The ConfigMap: the assignment.
  Assignment a =
      parseAssignment(*jsonString(w.others_.at("job-assignment")->json, "/data/assignment.yaml"));
  EXPECT_EQ(a.worldSize(), 4);
  EXPECT_EQ(a.byRank(0)->name, "master");

  // A pod.
  const std::string pod = w.pods_.at("job-master-0")->json;
  EXPECT_EQ(jsonString(pod, "/metadata/ownerReferences/0/controller"), "true");
  EXPECT_EQ(jsonString(pod, "/metadata/ownerReferences/0/blockOwnerDeletion"), "true");
  EXPECT_EQ(jsonString(pod, "/metadata/labels/app.kubernetes.io~1managed-by"), "rpcjob-operator");
  EXPECT_EQ(jsonString(pod, "/metadata/labels/app.kubernetes.io~1name"), "rpcjob-worker");
  EXPECT_EQ(jsonString(pod, "/metadata/labels/rpcjob.dev~1restart-generation"), "0");
  EXPECT_EQ(jsonString(pod, "/metadata/labels/rpcjob.dev~1group"), "master");
  EXPECT_EQ(jsonString(pod, "/spec/hostname"), "job-master-0");
  EXPECT_EQ(jsonString(pod, "/spec/subdomain"), "job");
  EXPECT_EQ(jsonString(pod, "/spec/restartPolicy"), "Never");
  EXPECT_FALSE(jsonString(pod, "/spec/nodeName"));
  const std::string node = *jsonString(pod, "/metadata/annotations/rpcjob.dev~1node");
  const std::string expr =
      "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/"
      "nodeSelectorTerms/0/matchExpressions/0";
  EXPECT_EQ(jsonString(pod, expr + "/key"), "kubernetes.io/hostname");
  EXPECT_EQ(jsonString(pod, expr + "/values/0"), node);
  EXPECT_EQ(jsonString(pod, "/spec/containers/0/resources/limits/nvidia.com~1gpu"), "1");
  EXPECT_EQ(jsonString(pod, "/spec/containers/0/env/0/name"), "RPCJOB_WORKER_NAME");
  EXPECT_EQ(jsonString(pod, "/spec/containers/0/env/0/value"), "master");
  EXPECT_EQ(jsonString(pod, "/spec/containers/0/env/1/value"), "0")
      << "template's RPCJOB_RANK replaced";
  EXPECT_EQ(jsonString(pod, "/spec/containers/0/env/2/value"), "4");
  EXPECT_EQ(jsonString(pod, "/spec/containers/0/env/5/value"), "/etc/rpcjob/assignment.yaml");
  EXPECT_EQ(jsonString(pod, "/spec/containers/0/env/7/name"), "RPCJOB_SECRET_FILE");
  EXPECT_EQ(jsonString(pod, "/spec/containers/0/env/7/value"), "/var/run/rpcjob/secret");
  EXPECT_EQ(jsonString(pod, "/spec/containers/0/env/8/name"), "X") << "template env kept";
  EXPECT_FALSE(jsonString(pod, "/spec/containers/0/env/9"));
  EXPECT_EQ(jsonString(pod, "/spec/volumes/1/secret/secretName"), "job-rpc-secret");
  EXPECT_EQ(jsonString(pod, "/spec/containers/0/volumeMounts/1/mountPath"), "/var/run/rpcjob");
  EXPECT_EQ(jsonString(pod, "/spec/containers/0/volumeMounts/1/readOnly"), "true");
  EXPECT_EQ(jsonString(pod, "/spec/containers/0/ports/0/name"), "rpc");
  EXPECT_EQ(jsonString(pod, "/spec/containers/0/ports/1/name"), "metrics");
  EXPECT_EQ(jsonString(pod, "/spec/containers/0/ports/1/containerPort"), "9400");
  EXPECT_EQ(jsonString(pod, "/spec/containers/0/volumeMounts/0/mountPath"), "/etc/rpcjob");
  EXPECT_EQ(jsonString(pod, "/spec/containers/1/volumeMounts/0/mountPath"), "/etc/rpcjob");
  EXPECT_FALSE(jsonString(pod, "/spec/containers/1/env")) << "sidecars get no worker env";
  EXPECT_EQ(jsonString(pod, "/spec/volumes/0/configMap/name"), "job-assignment");
  EXPECT_EQ(jsonString(w.pods_.at("job-worker-0")->json, "/metadata/labels/team"), "a");

  // Idempotent: the same observation again does nothing.
  DesiredState again = w.step();
  EXPECT_TRUE(again.create.empty());
  EXPECT_TRUE(again.update.empty());
  EXPECT_TRUE(again.remove.empty());
  EXPECT_TRUE(again.events.empty());
  EXPECT_FALSE(again.statusChanged);

  // The kubelet runs the pods.
  w.now += 5s;
  w.setAllPods(kRunning);
  w.step();
  EXPECT_EQ(w.status().phase, "Running");
  EXPECT_EQ(w.status().readyWorkers, 4);
  EXPECT_EQ(w.conditionString("Running"), "True/AllWorkersRunning");
  EXPECT_FALSE(w.step().statusChanged);

  // All succeed.
  w.now += 5s;
  w.setAllPods(kSucceeded);
  DesiredState done = w.step();
  EXPECT_EQ(w.status().phase, "Succeeded");
  EXPECT_EQ(w.status().completionTime, "2027-01-15T08:00:10Z");
  EXPECT_EQ(w.conditionString("Succeeded"), "True/AllWorkersSucceeded");
  EXPECT_TRUE(done.remove.empty()) << "cleanPodPolicy Running keeps finished pods";
  EXPECT_FALSE(w.step().statusChanged);
}

// A namespace enforcing restricted: the pods are restricted, the RDMA links
// (IPC_LOCK) leave the assignment, and PodSecurity says so once, as a Warning.
TEST(DesiredState, RestrictedNamespaceLeavesOutRdmaLinksAndSaysSo) {
  for (PodSecurityLevel level :
       {PodSecurityLevel::Privileged, PodSecurityLevel::Baseline, PodSecurityLevel::Restricted}) {
    SCOPED_TRACE(toString(level));
    World w(spec("{}", 3, 1, R"({"workersPerPod":"Auto"})"));
    w.labelNodesRdma();
    w.podSecurity = level;
    DesiredState d = w.step();
    ASSERT_TRUE(d.plan.planned()) << d.plan.message;
    const Assignment a =
        parseAssignment(*jsonString(w.others_.at("job-assignment")->json, "/data/assignment.yaml"));
    ASSERT_FALSE(w.pods_.empty());
    const std::string pod = w.pods_.begin()->second->json;
    EXPECT_EQ(jsonString(pod, "/spec/securityContext/runAsNonRoot"), "true");
    EXPECT_EQ(jsonString(pod, "/spec/containers/0/securityContext/capabilities/drop/0"), "ALL");
    if (level == PodSecurityLevel::Privileged) {
      EXPECT_TRUE(a.transports.empty() && a.channels.empty()) << "all viable";
      EXPECT_EQ(w.conditionString("PodSecurity"), "absent");
      EXPECT_EQ(w.events, std::vector<std::string>{"Planned"});
      continue;
    }
    EXPECT_EQ(a.transports, (std::vector<std::string>{"shm", "uv"}));
    EXPECT_EQ(std::count(a.channels.begin(), a.channels.end(), "cuda_gdr"), 0);
    EXPECT_EQ(std::count(a.channels.begin(), a.channels.end(), "rpcjob_cma"), 1)
        << "cma needs no capability with one uid in one container";
    EXPECT_FALSE(jsonString(pod, "/spec/containers/0/securityContext/capabilities/add/0"))
        << "neither SYS_PTRACE nor IPC_LOCK";
    EXPECT_EQ(w.conditionString("PodSecurity"), "True/LinksLeftOut");
    const std::string message = w.condition("PodSecurity")->message;
    EXPECT_THAT(message, ::testing::HasSubstr("ibv (needs IPC_LOCK)"));
    EXPECT_THAT(message, ::testing::HasSubstr("cuda_gdr (needs IPC_LOCK)"));
    EXPECT_THAT(message, ::testing::HasSubstr(toString(level)));
    ASSERT_EQ(d.events.size(), 2u);
    const auto warning = std::find_if(d.events.begin(), d.events.end(),
                                      [](const JobEvent& e) { return e.reason == "LinksLeftOut"; });
    ASSERT_NE(warning, d.events.end());
    EXPECT_EQ(warning->type, "Warning");
    w.step();
    EXPECT_EQ(w.events, (std::vector<std::string>{"LinksLeftOut", "Planned"})) << "once";
    // The namespace relaxed: the condition turns False, without another Warning.
    w.podSecurity = PodSecurityLevel::Privileged;
    w.step();
    EXPECT_EQ(w.conditionString("PodSecurity"), "False/NothingLeftOut");
    EXPECT_EQ(w.events, (std::vector<std::string>{"LinksLeftOut", "Planned"}));
  }
}

// A job that allows only links the level forbids is not planned with all of them
// (an empty list means "all viable"): it waits, saying why.
TEST(DesiredState, JobAllowingOnlyForbiddenLinksIsNotPlanned) {
  std::string only = spec();
  only.replace(only.rfind('}'), 1, R"(,"transports":["ibv"]})");
  World w(only);
  w.labelNodesRdma();
  w.podSecurity = PodSecurityLevel::Restricted;
  DesiredState d = w.step();
  EXPECT_TRUE(d.create.empty());
  EXPECT_TRUE(w.pods_.empty());
  EXPECT_EQ(w.status().phase, "Pending");
  EXPECT_EQ(w.conditionString("Planned"), "False/NoTransport");
  const std::string message = w.condition("Planned")->message;
  EXPECT_THAT(message, ::testing::HasSubstr("spec.transports"));
  EXPECT_THAT(message, ::testing::HasSubstr("ibv (needs IPC_LOCK)"));
  EXPECT_THAT(message, ::testing::HasSubstr("restricted"));
  w.podSecurity = PodSecurityLevel::Privileged;
  w.step();
  EXPECT_EQ(w.conditionString("Planned"), "True/Planned") << w.condition("Planned")->message;
}

TEST(DesiredState, FailedWorkerRestartsTheJobThenFailsAfterBackoffLimit) {
  World w(spec(R"({"backoffLimit":1})"));
  w.step();
  w.setAllPods(kRunning);
  w.step();
  w.setPodStatus("job-worker-1", kFailed);
  DesiredState d = w.step();
  EXPECT_EQ(d.remove.size(), 4u) << "the whole job restarts";
  EXPECT_TRUE(d.create.empty()) << "new pods wait for the old names to be free";
  EXPECT_EQ(w.status().restarts, 1);
  EXPECT_EQ(w.status().phase, "Restarting");
  EXPECT_EQ(w.conditionString("Restarting"), "True/WorkerFailed");
  EXPECT_NE(w.condition("Restarting")->message.find("exited with code 3"), std::string::npos);
  EXPECT_EQ(w.events.back(), "WorkerFailed");

  DesiredState again = w.step();  // the old pods are gone: recreate, same names
  EXPECT_EQ(again.create.size(), 4u);
  EXPECT_EQ(jsonString(w.pods_.at("job-worker-1")->json,
                       "/metadata/labels/rpcjob.dev~1restart-generation"),
            "1");
  EXPECT_EQ(w.conditionString("Restarting"), "False/Relaunched");
  EXPECT_EQ(w.status().phase, "Planned");

  w.setAllPods(kRunning);
  w.setPodStatus("job-master-0", kFailed);
  DesiredState last = w.step();
  EXPECT_EQ(w.status().phase, "Failed");
  EXPECT_EQ(w.conditionString("Failed"), "True/BackoffLimitExceeded");
  EXPECT_EQ(w.status().restarts, 1);
  EXPECT_FALSE(w.status().completionTime.empty());
  EXPECT_EQ(last.remove.size(), 3u) << "cleanPodPolicy Running: the running pods go";
  EXPECT_FALSE(w.step().statusChanged);
}

TEST(DesiredState, StaleGenerationAndTerminatingPods) {
  World w(spec());
  w.step();
  // A pod of an older generation is deleted; a pod being deleted blocks its name.
  w.status_ = api::statusToJson([&] {
    auto s = w.status();
    s.restarts = 1;  // as a restart writes it: no worker phases of the new generation yet
    for (auto& wk : s.workers) wk.phase.clear();
    return s;
  }());
  w.markDeleting("job-worker-0");
  DesiredState d = w.step();
  EXPECT_EQ(d.remove.size(), 3u);
  for (const auto& c : d.create) EXPECT_NE(c.name, "job-worker-0");
}

const std::string kRejected =
    R"({"phase":"Pending","conditions":[{"type":"PodScheduled","status":"False","reason":"Unschedulable","message":"0/2 nodes: Insufficient nvidia.com/gpu"}]})";

TEST(DesiredState, SchedulerRejectionBacksOffWithJitterAvoidsTheNodeAndNeverCounts) {
  World w(spec("{}", 1, 1));
  w.step();
  const std::string node =
      *jsonString(w.pods_.at("job-worker-0")->json, "/metadata/annotations/rpcjob.dev~1node");
  w.setPodStatus("job-worker-0", kRejected);
  DesiredState d = w.step();
  EXPECT_EQ(d.remove.size(), 2u);
  EXPECT_EQ(w.status().restarts, 0) << "a rejection is not a restart";
  EXPECT_EQ(w.status().schedulerRejections, 1);
  EXPECT_EQ(w.status().rejectedNodes, std::vector<std::string>{node});
  EXPECT_EQ(w.status().phase, "Pending");
  EXPECT_EQ(w.conditionString("Planned"), "False/Unschedulable");
  EXPECT_NE(w.condition("Planned")->message.find("Insufficient nvidia.com/gpu"), std::string::npos)
      << "the scheduler's message";
  ASSERT_TRUE(d.requeueAfter);
  const auto first = rejectionBackoff("UID", 1);
  EXPECT_GE(first.count(), 2500);
  EXPECT_LT(first.count(), 5000);
  EXPECT_EQ(d.requeueAfter->count(), first.count() + 100);
  EXPECT_EQ(w.events, (std::vector<std::string>{"Planned", "Unschedulable"}));

  DesiredState wait = w.step();  // within the backoff: nothing created
  EXPECT_TRUE(wait.create.empty());
  EXPECT_FALSE(wait.statusChanged);
  w.now += first + 1s;
  w.step();
  ASSERT_EQ(w.pods_.size(), 2u);
  for (const auto& [name, p] : w.pods_) {
    EXPECT_NE(jsonString(p->json, "/metadata/annotations/rpcjob.dev~1node"), node)
        << "the node that rejected is avoided while another fits";
  }
  // Rejected again and again: the delay doubles up to the cap, with jitter.
  for (int k = 2; k <= 9; ++k) {
    w.setPodStatus(w.pods_.begin()->first, kRejected);
    DesiredState r = w.step();
    EXPECT_EQ(w.status().schedulerRejections, k);
    EXPECT_EQ(r.requeueAfter->count(), rejectionBackoff("UID", k).count() + 100);
    w.now += rejectionBackoff("UID", k) + 1s;
    w.step();
  }
  EXPECT_LE(rejectionBackoff("UID", 9).count(), 300000);
  EXPECT_GE(rejectionBackoff("UID", 9).count(), 150000);
  EXPECT_NE(rejectionBackoff("UID", 9), rejectionBackoff("OTHER", 9)) << "jitter per job";
  EXPECT_EQ(w.status().restarts, 0);
  // Bound at last: the memory of rejections is cleared.
  for (const auto& [name, p] : std::map<std::string, kube::ObjectPtr>(w.pods_)) {
    std::string json = p->json;
    json.replace(json.find("\"spec\":{") + 8, 0, R"("nodeName":"node-a",)");
    w.pods_[name] = obj(json);
  }
  w.step();
  EXPECT_EQ(w.status().schedulerRejections, 0);
  EXPECT_TRUE(w.status().rejectedNodes.empty());

  w.setPodStatus("job-worker-0", R"({"phase":"Failed","reason":"OutOfnvidia.com/gpu"})");
  w.step();
  EXPECT_EQ(w.status().restarts, 0) << "a kubelet admission failure is a rejection too";
  EXPECT_EQ(w.conditionString("Planned"), "False/Unschedulable");
}

TEST(DesiredState, UnschedulableJobGetsAConditionOnceAndNoPods) {
  World w(spec("{}", 1, 8));
  DesiredState d = w.step();
  EXPECT_TRUE(d.create.empty());
  EXPECT_EQ(w.status().phase, "Pending");
  EXPECT_EQ(w.conditionString("Planned"), "False/Unschedulable");
  EXPECT_NE(w.condition("Planned")->message.find("nvidia.com/gpu"), std::string::npos)
      << w.condition("Planned")->message;
  EXPECT_EQ(w.events, std::vector<std::string>{"Unschedulable"});
  DesiredState again = w.step();
  EXPECT_FALSE(again.statusChanged);
  EXPECT_TRUE(again.events.empty());
  EXPECT_FALSE(again.requeueAfter) << "Node changes wake the job, not a timer";

  // A bigger node arrives.
  w.nodes_.push_back(obj(nodeJson("node-c", 16)));
  w.step();
  EXPECT_EQ(w.conditionString("Planned"), "True/Planned");
  EXPECT_EQ(w.pods_.size(), 2u);
}

TEST(DesiredState, InvalidJobIsRecordedOnceNeverRetried) {
  World w(
      R"({"workers":[{"name":"master","template":{"spec":{"containers":[{"name":"w","image":"i","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}}]})");
  DesiredState d = w.step();
  EXPECT_TRUE(d.create.empty());
  EXPECT_FALSE(d.requeueAfter);
  EXPECT_EQ(w.status().phase, "Failed");
  EXPECT_EQ(w.conditionString("Failed"), "True/Invalid");
  EXPECT_NE(w.condition("Failed")->message.find("nvidia.com/gpu"), std::string::npos);
  EXPECT_EQ(w.events, std::vector<std::string>{"Invalid"}) << "one Event for two conditions";
  EXPECT_FALSE(w.step().statusChanged);

  // Fixed by an edit: looked at again.
  w.spec_ = spec();
  w.generation = 2;
  w.step();
  EXPECT_EQ(w.conditionString("Failed"), "False/Valid");
  EXPECT_EQ(w.pods_.size(), 4u);
  EXPECT_EQ(w.status().observedGeneration, 2);
}

TEST(DesiredState, SuspendDeletesPodsResumeRecreates) {
  World w(spec());
  w.step();
  w.spec_ = spec(R"({"suspend":true})");
  w.generation = 2;
  DesiredState d = w.step();
  EXPECT_EQ(d.remove.size(), 4u);
  EXPECT_EQ(w.status().phase, "Suspended");
  EXPECT_EQ(w.conditionString("Suspended"), "True/Suspended");
  EXPECT_TRUE(w.status().startTime.empty());
  EXPECT_EQ(w.others_.size(), 2u) << "Service and ConfigMap stay";
  EXPECT_FALSE(w.step().statusChanged);

  w.spec_ = spec(R"({"suspend":false})");
  w.generation = 3;
  w.step();
  EXPECT_EQ(w.conditionString("Suspended"), "False/Resumed");
  EXPECT_EQ(w.pods_.size(), 4u);
  EXPECT_EQ(w.events.back(), "Resumed");
}

TEST(DesiredState, DeadlineThenTimeToLive) {
  World w(
      spec(R"({"activeDeadlineSeconds":60,"ttlSecondsAfterFinished":30,"cleanPodPolicy":"All"})"));
  DesiredState d = w.step();
  ASSERT_TRUE(d.requeueAfter);
  EXPECT_NEAR(d.requeueAfter->count(), 60100, 10);
  w.setAllPods(kRunning);
  w.now += 61s;
  DesiredState late = w.step();
  EXPECT_EQ(w.conditionString("Failed"), "True/DeadlineExceeded");
  EXPECT_EQ(late.remove.size(), 4u);
  ASSERT_TRUE(late.requeueAfter);
  EXPECT_NEAR(late.requeueAfter->count(), 30100, 10);
  EXPECT_FALSE(late.deleteJob);
  w.now += 31s;
  EXPECT_TRUE(w.step().deleteJob);
}

TEST(DesiredState, CleanPodPolicyNoneKeepsPodsAll) {
  World w(spec(R"({"cleanPodPolicy":"None","backoffLimit":0})"));
  w.step();
  w.setAllPods(kRunning);
  w.setPodStatus("job-master-0", kFailed);
  DesiredState d = w.step();
  EXPECT_EQ(w.conditionString("Failed"), "True/BackoffLimitExceeded");
  EXPECT_TRUE(d.remove.empty());
}

TEST(DesiredState, WorkersPerPodAutoSharesPodsInOneLauncherContainer) {
  World w(spec("{}", 3, 1, R"({"workersPerPod":"Auto"})"));
  w.step();
  ASSERT_EQ(w.pods_.size(), 1u) << "4 GPUs fit one node: one pod";
  const std::string pod = w.pods_.begin()->second->json;
  // One container runs the 4 workers (rpcjob-launch) and holds the pod's 4 GPUs.
  EXPECT_EQ(jsonString(pod, "/spec/containers/0/name"), "w");
  EXPECT_EQ(jsonString(pod, "/spec/containers/0/command/0"), "rpcjob-launch");
  EXPECT_EQ(jsonString(pod, "/spec/containers/0/resources/limits/nvidia.com~1gpu"), "4");
  EXPECT_EQ(jsonString(pod, "/spec/containers/1/name"), "side") << "sidecars kept once";
  EXPECT_FALSE(jsonString(pod, "/spec/containers/2/name"));
  EXPECT_EQ(jsonString(pod, "/spec/containers/0/env/0/name"), "RPCJOB_POD_WORKERS");
  const PodLaunch launch = parsePodLaunch(*jsonString(pod, "/spec/containers/0/env/0/value"));
  ASSERT_EQ(launch.workers.size(), 4u);
  EXPECT_EQ(launch.workers[3].name, "worker2");
  EXPECT_THAT(launch.workers[3].env,
              ::testing::Contains(std::make_pair(std::string("RPCJOB_RANK"), std::string("3"))));
  EXPECT_EQ(jsonString(pod, "/spec/containers/0/ports/6/name"), "rpc-3");
  EXPECT_EQ(jsonString(pod, "/spec/containers/0/ports/7/name"), "metrics-3");
  EXPECT_EQ(jsonString(pod, "/spec/shareProcessNamespace"), "true");
  EXPECT_EQ(jsonString(pod, "/spec/volumes/2/emptyDir/medium"), "Memory");
  w.setAllPods(kRunning);
  w.step();
  EXPECT_EQ(w.status().readyWorkers, 4) << "ready counts workers, not pods";
}

void bind(World& w, const std::string& pod) {
  std::string json = w.pods_.at(pod)->json;
  const std::string node = *jsonString(json, "/metadata/annotations/rpcjob.dev~1node");
  json.replace(json.find("\"spec\":{") + 8, 0, R"("nodeName":")" + node + R"(",)");
  w.pods_[pod] = obj(json);
}

TEST(DesiredState, ALargerNodeNeverMovesARunningJob) {
  World w(spec("{}", 1, 1));
  w.step();
  std::map<std::string, std::string> before;
  for (const auto& [name, p] : w.pods_) before[name] = p->json;
  w.setAllPods(kRunning);
  w.step();
  // An empty node with more GPUs than any joins; the plan from scratch would pick it.
  w.nodes_.push_back(obj(nodeJson("node-z", 16)));
  w.generation = 1;
  DesiredState d = w.step();
  EXPECT_TRUE(d.remove.empty());
  EXPECT_TRUE(d.create.empty());
  EXPECT_TRUE(d.update.empty()) << "the assignment stays";
  EXPECT_EQ(w.status().phase, "Running");
  for (const auto& wk : w.status().workers) EXPECT_NE(wk.node, "node-z");
  // An operator that starts from scratch (no status) adopts the pods as they are.
  w.status_.clear();
  DesiredState adopt = w.step();
  EXPECT_TRUE(adopt.remove.empty());
  for (const auto& c : adopt.create) EXPECT_NE(c.resource->kind, "Pod") << c.name;
  EXPECT_EQ(w.status().phase, "Running");
  for (const auto& wk : w.status().workers) EXPECT_NE(wk.node, "node-z");
}

TEST(DesiredState, CreatedButUnboundPodsHoldTheirGpus) {
  // Another job's pod, pinned to node-a by the operator, not bound yet.
  const std::string other =
      R"({"metadata":{"name":"o","namespace":"ns","annotations":{"rpcjob.dev/node":"node-a"}},)"
      R"("spec":{"containers":[{"name":"x","resources":{"limits":{"nvidia.com/gpu":"4"}}}]},"status":{"phase":"Pending"}})";
  EXPECT_TRUE(podHoldsResources(other));
  auto view = clusterViewFrom({obj(nodeJson("node-a", 4))}, {obj(other)});
  EXPECT_EQ(view.freeOn(view.nodes[0]).gpus, 0);
}

TEST(DesiredState, LostNodeDeletesPodsForciblyAndRestartsNamingTheNode) {
  World w(spec(R"({"backoffLimit":2})", 1, 1));
  w.step();
  for (const auto& [name, p] : std::map<std::string, kube::ObjectPtr>(w.pods_)) bind(w, name);
  w.setAllPods(kRunning);
  w.step();
  ASSERT_EQ(w.status().phase, "Running");
  const std::string node =
      *jsonString(w.pods_.at("job-master-0")->json, "/metadata/annotations/rpcjob.dev~1node");
  for (auto& n : w.nodes_) {
    if (nodeFromJson(n->json).name == node) n = obj(nodeJson(node, 4, false));
  }
  w.readySince[node] = w.now;
  DesiredState grace = w.step();
  EXPECT_TRUE(grace.remove.empty()) << "NotReady within the grace period: wait";
  ASSERT_TRUE(grace.requeueAfter);
  EXPECT_EQ(grace.requeueAfter->count(), 60100);
  w.now += 61s;
  DesiredState d = w.step();
  ASSERT_FALSE(d.remove.empty());
  for (const auto& r : d.remove) EXPECT_TRUE(r.force) << r.name << " is on the lost node";
  EXPECT_EQ(w.status().restarts, 1);
  EXPECT_EQ(w.conditionString("Restarting"), "True/NodeLost");
  EXPECT_NE(w.condition("Restarting")->message.find(node), std::string::npos);
  EXPECT_NE(w.status().phase, "Running");
  EXPECT_EQ(w.events.back(), "NodeLost");
  w.step();  // recreated on the node still ready
  ASSERT_EQ(w.pods_.size(), 2u);
  for (const auto& [name, p] : w.pods_) {
    EXPECT_NE(jsonString(p->json, "/metadata/annotations/rpcjob.dev~1node"), node);
  }

  // A deleted node: lost at once.
  for (const auto& [name, p] : std::map<std::string, kube::ObjectPtr>(w.pods_)) bind(w, name);
  w.setAllPods(kRunning);
  w.step();
  const std::string other =
      *jsonString(w.pods_.at("job-master-0")->json, "/metadata/annotations/rpcjob.dev~1node");
  w.nodes_.erase(std::remove_if(w.nodes_.begin(), w.nodes_.end(),
                                [&](const auto& n) { return nodeFromJson(n->json).name == other; }),
                 w.nodes_.end());
  w.step();
  EXPECT_EQ(w.status().restarts, 2);
  EXPECT_NE(w.condition("Restarting")->message.find(other + " was deleted"), std::string::npos);
}

TEST(DesiredState, ADeletedOrEvictedPodRestartsTheJobCounted) {
  World w(spec(R"({"backoffLimit":3})", 1, 1));
  w.step();
  w.setAllPods(kRunning);
  w.step();
  w.pods_.erase("job-worker-0");  // kubectl delete pod
  DesiredState d = w.step();
  EXPECT_EQ(w.status().restarts, 1);
  EXPECT_EQ(w.conditionString("Restarting"), "True/PodDeleted");
  EXPECT_NE(w.condition("Restarting")->message.find("job-worker-0"), std::string::npos);
  EXPECT_EQ(d.remove.size(), 1u) << "the other pod goes too";
  w.step();
  ASSERT_EQ(w.pods_.size(), 2u);
  EXPECT_FALSE(w.step().statusChanged) << "recreated pods are not taken for deleted ones";

  w.setAllPods(kRunning);
  w.setPodStatus(
      "job-master-0",
      R"({"phase":"Failed","reason":"Evicted","message":"The node was low on memory."})");
  w.step();
  EXPECT_EQ(w.status().restarts, 2);
  EXPECT_EQ(w.conditionString("Restarting"), "True/WorkerFailed");
  EXPECT_NE(w.condition("Restarting")->message.find("Evicted: The node was low"), std::string::npos)
      << w.condition("Restarting")->message;
}

TEST(DesiredState, PodsTheCacheHasNotShownYetAreNotDeletedOnes) {
  World w(spec("{}", 1, 1));
  ObservedJob o = w.observe();
  DesiredState first = computeDesiredState(o);
  ASSERT_EQ(first.create.size(), 4u);
  o.job = kube::parseObject(
      R"({"apiVersion":"rpcjob.dev/v1alpha1","kind":"RpcJob","metadata":{"name":"job","namespace":"ns","uid":"UID","generation":1},"spec":)" +
      w.spec_ + R"(,"status":)" + api::statusToJson(first.status) + "}");
  o.expectedPods = {"job-master-0", "job-worker-0"};  // created; the cache lags
  DesiredState next = computeDesiredState(o);
  EXPECT_TRUE(next.remove.empty());
  EXPECT_FALSE(next.statusChanged) << "no PodDeleted, no second create";
  for (const auto& c : next.create) EXPECT_NE(c.resource->kind, "Pod");
}

TEST(DesiredState, SpecEditOfARunningJobWaitsForTheNextLaunch) {
  World w(spec("{}", 1, 1));
  w.step();
  w.setAllPods(kRunning);
  w.step();
  EXPECT_EQ(w.status().observedGeneration, 1);
  // runPolicy edits apply at once.
  w.spec_ = spec(R"({"backoffLimit":5})", 1, 1);
  w.generation = 2;
  w.step();
  EXPECT_EQ(w.status().observedGeneration, 2);
  EXPECT_EQ(w.conditionString("SpecApplied"), "absent");
  // A pod-shaping edit does not touch running pods.
  w.spec_ = spec(R"({"backoffLimit":5})", 2, 1);
  w.generation = 3;
  DesiredState d = w.step();
  EXPECT_TRUE(d.create.empty());
  EXPECT_TRUE(d.remove.empty());
  EXPECT_TRUE(d.update.empty());
  EXPECT_EQ(w.conditionString("SpecApplied"), "False/DeferredWhileRunning");
  EXPECT_EQ(w.status().observedGeneration, 2) << "not acted on";
  EXPECT_EQ(w.status().phase, "Running");
  EXPECT_FALSE(w.step().statusChanged);
  // A restart launches the new spec.
  w.setPodStatus("job-worker-0", kFailed);
  w.step();
  w.step();
  EXPECT_EQ(w.pods_.size(), 3u) << "two workers now";
  EXPECT_EQ(w.conditionString("SpecApplied"), "True/Applied");
  EXPECT_EQ(w.status().observedGeneration, 3);
  // All succeed under a deferred edit: still Succeeded.
  w.setAllPods(kSucceeded);
  w.spec_ = spec(R"({"backoffLimit":5})", 1, 1);
  w.generation = 4;
  w.step();
  EXPECT_EQ(w.status().phase, "Succeeded");
}

TEST(DesiredState, ChildErrorsBecomeAConditionAndOneWarning) {
  World w(spec("{}", 1, 1));
  ObservedJob o = w.observe();
  DesiredState d = computeDesiredState(o);
  api::RpcJobStatus before;
  applyChildErrors(d, before,
                   {{"FailedCreate", "Pod", "job-worker-0",
                     "Pod \"job-worker-0\" is invalid: spec.containers[0].ports[1].name: "
                     "Duplicate value: \"metrics\""}},
                   "2027-01-15T08:00:00Z");
  const api::Condition* c = nullptr;
  for (const auto& x : d.status.conditions) c = x.type == "ReplicaFailure" ? &x : c;
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->status, "True");
  EXPECT_EQ(c->reason, "FailedCreate");
  EXPECT_NE(c->message.find("Duplicate value"), std::string::npos);
  EXPECT_EQ(d.events.back().type, "Warning");
  EXPECT_EQ(d.events.back().reason, "FailedCreate");
  for (const auto& wk : d.status.workers) {
    if (wk.pod == "job-worker-0") {
      EXPECT_EQ(wk.phase, "") << "not created: not Pending";
    }
  }
  // The same error again: no second Event. Then success: False/Created.
  api::RpcJobStatus after = d.status;
  DesiredState again = computeDesiredState(o);
  applyChildErrors(again, after, {{"FailedCreate", "Pod", "job-worker-0", c->message.substr(18)}},
                   "2027-01-15T08:00:01Z");
  EXPECT_TRUE(std::none_of(again.events.begin(), again.events.end(),
                           [](const JobEvent& e) { return e.reason == "FailedCreate"; }));
  DesiredState ok = computeDesiredState(o);
  ok.status.conditions = after.conditions;
  applyChildErrors(ok, after, {}, "2027-01-15T08:00:02Z");
  for (const auto& x : ok.status.conditions) {
    if (x.type == "ReplicaFailure") {
      EXPECT_EQ(x.status + "/" + x.reason, "False/Created");
    }
  }
}

TEST(DesiredState, PodSpecHashIgnoresRunPolicy) {
  const std::string a = R"({"spec":{"workers":[{"name":"m"}],"runPolicy":{"backoffLimit":1}}})";
  const std::string b = R"({"spec":{"workers":[{"name":"m"}],"runPolicy":{"backoffLimit":7}}})";
  const std::string c = R"({"spec":{"workers":[{"name":"n"}],"runPolicy":{"backoffLimit":1}}})";
  EXPECT_EQ(podSpecHash(a), podSpecHash(b));
  EXPECT_NE(podSpecHash(a), podSpecHash(c));
  EXPECT_EQ(podSpecHash(a).size(), 16u);
}

}  // namespace
}  // namespace rpcjob::op
