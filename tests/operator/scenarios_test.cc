// Scenarios of issue 17 on the real control plane (e2e_fixture.h): what a real
// cluster does to a running operator — nodes join and fail, pods vanish, jobs
// race for GPUs, the scheduler says no, the API refuses a pod, the operator is
// SIGKILLed. Each asserts what the user sees: pods (by UID), status, Events.
#include "e2e_fixture.h"
#include "rpcjob/operator/desired_state.h"

namespace rpcjob::kube::e2e {
namespace {

// Flags that make the slow paths fast enough for a test.
const std::vector<std::string> kFast = {"--node-lost-grace", "2"};

class Scenario : public E2e {
 protected:
  std::map<std::string, std::string> uidsByName(const std::string& job) {
    std::map<std::string, std::string> out;
    for (const auto& p : pods(job)) {
      if (p.metadata.deletionTimestamp.empty()) out[p.metadata.name] = p.metadata.uid;
    }
    return out;
  }
  // The scheduler's part: bind the pod to the node it is pinned to.
  void bind(const Object& pod) {
    const std::string node =
        jsonString(pod.json, "/metadata/annotations/rpcjob.dev~1node").value_or("");
    HttpResponse resp = client_->raw(
        "POST", r::kPods.itemPath(ns_, pod.metadata.name) + "/binding",
        R"({"apiVersion":"v1","kind":"Binding","metadata":{"name":")" + pod.metadata.name +
            R"("},"target":{"apiVersion":"v1","kind":"Node","name":")" + node + R"("}})",
        "application/json");
    ASSERT_EQ(resp.status / 100, 2) << resp.body;
  }
  void bindAndRun(const std::string& job) {
    for (const auto& p : pods(job)) bind(p);
    runAll(job);
  }
  std::string conditionMessage(const std::string& job, const std::string& type) {
    for (int i = 0; i < 10; ++i) {
      std::string p = "/status/conditions/" + std::to_string(i);
      if (field(job, p + "/type") == type) return field(job, p + "/message");
    }
    return "";
  }
  std::string eventMessage(const std::string& reason) {
    for (const auto& e : client_->list(r::kEvents, ns_).items) {
      if (jsonString(e.json, "/reason") == reason) {
        return jsonString(e.json, "/type").value_or("") + ": " +
               jsonString(e.json, "/message").value_or("");
      }
    }
    return "";
  }
  std::string nodeName(const std::string& suffix) const { return ns_.substr(0, 20) + "-" + suffix; }
};

// Issue 17's report: a larger node joins and the job is touched; then the
// operator is SIGKILLed and another takes over. The pods stay (same UIDs).
TEST_F(Scenario, ChurnLargerNodeEditAndSigkillKeepThePods) {
  addNode("a", 4);
  auto op = std::make_unique<OperatorProcess>(ns_, "op-1", kFast);
  client_->create(r::kRpcJobs, ns_, jobJson("train", 1, 1));
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return pods("train").size() == 2; }, 30s))
      << op->log();
  bindAndRun("train");
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return phase("train") == "Running"; }, 20s))
      << op->log();
  const auto before = uidsByName("train");

  addNode("big", 16);  // empty, larger: a plan from scratch would pick it
  client_->mergePatch(r::kRpcJobs, ns_, "train", R"({"spec":{"runPolicy":{"backoffLimit":4}}})");
  ASSERT_TRUE(eventuallyThroughApiErrors(
      [&] { return field("train", "/status/observedGeneration") == "2"; }, 20s))
      << "the runPolicy edit is acted on\n"
      << op->log();
  EXPECT_EQ(uidsByName("train"), before) << op->log();

  op->kill9();  // mid-whatever: no lease release
  op = std::make_unique<OperatorProcess>(ns_, "op-2", kFast);
  // The successor waits out the lease (15 s), then adopts; a pod-shaping edit
  // is not applied to the running pods (SpecApplied=False) either.
  client_->mergePatch(
      r::kRpcJobs, ns_, "train",
      R"({"spec":{"workers":[{"name":"master","gpusPerWorker":1,"template":{"spec":{"nodeSelector":{"rpcjob.test/ns":")" +
          ns_ +
          R"("},"containers":[{"name":"w","image":"rpcjob-worker:v2"}]}}},{"name":"worker","replicas":1,"gpusPerWorker":1,"template":{"spec":{"nodeSelector":{"rpcjob.test/ns":")" +
          ns_ + R"("},"containers":[{"name":"w","image":"rpcjob-worker:v2"}]}}}]}})");
  ASSERT_TRUE(eventuallyThroughApiErrors(
      [&] { return condition("train", "SpecApplied") == "False/DeferredWhileRunning"; }, 40s))
      << op->log();
  EXPECT_EQ(field("train", "/status/observedGeneration"), "2") << "not acted on yet";
  EXPECT_EQ(uidsByName("train"), before) << op->log();
  EXPECT_EQ(phase("train"), "Running");
  EXPECT_EQ(op->log().find("deleted Pod"), std::string::npos) << op->log();
  EXPECT_EQ(op->log().find("created Pod"), std::string::npos) << op->log();
}

// The operator is SIGKILLed while it creates a job's pods (slowed by a client
// rate limit of 2 requests a second, so the kill lands between creates); its
// successor adopts the pods made and creates only the rest.
TEST_F(Scenario, SigkillMidCreateSuccessorAdopts) {
  addNode("a", 8);
  auto op = std::make_unique<OperatorProcess>(
      ns_, "op-1", std::vector<std::string>{"--qps", "2", "--burst", "1"});
  client_->create(r::kRpcJobs, ns_, jobJson("slow", 5, 1));
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return pods("slow").size() >= 2; }, 30s))
      << op->log();
  op->kill9();
  const auto made = uidsByName("slow");
  ASSERT_LT(made.size(), 6u) << "the rate limit let every create through before the kill";
  op = std::make_unique<OperatorProcess>(ns_, "op-2", kFast);
  ASSERT_TRUE(eventuallyThroughApiErrors(
      [&] { return pods("slow").size() == 6 && phase("slow") == "Planned"; }, 40s))
      << op->log();
  const auto after = uidsByName("slow");
  for (const auto& [name, uid] : made) EXPECT_EQ(after.at(name), uid) << name << " was replaced";
  EXPECT_EQ(field("slow", "/status/restarts"), "0");
}

// Two jobs that each need all four GPUs of the only node, created together:
// one gets pods, the other waits Unschedulable (pods not yet bound hold GPUs).
TEST_F(Scenario, RaceTwoJobsForTheSameGpus) {
  addNode("a", 4);
  OperatorProcess op(ns_, "op-1", kFast);
  client_->create(r::kRpcJobs, ns_, jobJson("left", 1, 2));
  client_->create(r::kRpcJobs, ns_, jobJson("right", 1, 2));
  ASSERT_TRUE(eventuallyThroughApiErrors(
      [&] {
        return pods("left").size() + pods("right").size() == 2 &&
               (condition("left", "Planned") == "False/Unschedulable" ||
                condition("right", "Planned") == "False/Unschedulable");
      },
      30s))
      << op.log();
  std::this_thread::sleep_for(1s);  // a negative check: no second job's pods appear
  EXPECT_EQ(pods("left").size() + pods("right").size(), 2u) << op.log();
}

// The scheduler rejects a pod: no restart counted, Unschedulable with its
// message, and after the backoff the pods come back on the other node.
TEST_F(Scenario, RejectionLoopBacksOffAndMovesOn) {
  addNode("a", 4);
  addNode("b", 4);
  OperatorProcess op(ns_, "op-1", kFast);
  client_->create(r::kRpcJobs, ns_, jobJson("picky", 1, 1));
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return pods("picky").size() == 2; }, 30s))
      << op.log();
  const std::string first =
      jsonString(pods("picky")[0].json, "/metadata/annotations/rpcjob.dev~1node").value_or("");
  setPodStatus(
      "picky-master-0",
      R"({"phase":"Pending","conditions":[{"type":"PodScheduled","status":"False","reason":"Unschedulable","message":"0/9 nodes are available: 1 Insufficient nvidia.com/gpu."}]})");
  ASSERT_TRUE(eventuallyThroughApiErrors(
      [&] { return condition("picky", "Planned") == "False/Unschedulable"; }, 20s))
      << op.log();
  EXPECT_NE(conditionMessage("picky", "Planned").find("1 Insufficient nvidia.com/gpu"),
            std::string::npos)
      << conditionMessage("picky", "Planned");
  EXPECT_EQ(field("picky", "/status/schedulerRejections"), "1");
  EXPECT_EQ(field("picky", "/status/rejectedNodes/0"), first);
  // After the backoff (2.5-5 s): recreated elsewhere, never counted as a restart.
  ASSERT_TRUE(eventuallyThroughApiErrors(
      [&] {
        auto ps = pods("picky");
        if (ps.size() != 2) return false;
        for (const auto& p : ps) {
          if (jsonString(p.json, "/metadata/annotations/rpcjob.dev~1node") == first) return false;
        }
        return true;
      },
      30s))
      << op.log();
  EXPECT_EQ(field("picky", "/status/restarts"), "0");
  EXPECT_TRUE(eventuallyThroughApiErrors(
      [&] { return eventMessage("Unschedulable").find("Warning: ") == 0; }, 10s));
}

// A job waiting for GPUs starts as soon as the job holding them finishes (a pod
// event wakes it; the periodic resync is 5 min away).
TEST_F(Scenario, WakePendingJobWhenAnotherFinishes) {
  addNode("a", 4);
  OperatorProcess op(ns_, "op-1", kFast);
  client_->create(r::kRpcJobs, ns_, jobJson("first", 1, 2));
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return pods("first").size() == 2; }, 30s))
      << op.log();
  bindAndRun("first");
  client_->create(r::kRpcJobs, ns_, jobJson("second", 1, 2));
  ASSERT_TRUE(eventuallyThroughApiErrors(
      [&] { return condition("second", "Planned") == "False/Unschedulable"; }, 20s))
      << op.log();
  EXPECT_TRUE(pods("second").empty());
  for (const auto& p : pods("first")) setPodStatus(p.metadata.name, R"({"phase":"Succeeded"})");
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return phase("first") == "Succeeded"; }, 20s))
      << op.log();
  EXPECT_TRUE(eventuallyThroughApiErrors([&] { return pods("second").size() == 2; }, 15s))
      << conditionMessage("second", "Planned") << "\n"
      << op.log();
}

// A node goes NotReady under a running job: after the grace period its pods
// are deleted (forcibly: no kubelet will confirm), the job restarts (counted)
// on the node left, and the status names the lost node.
TEST_F(Scenario, NodeNotReadyRestartsTheJobElsewhere) {
  addNode("a", 4);
  OperatorProcess op(ns_, "op-1", kFast);
  client_->create(r::kRpcJobs, ns_, jobJson("sturdy", 1, 1, R"({"backoffLimit":2})"));
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return pods("sturdy").size() == 2; }, 30s))
      << op.log();
  bindAndRun("sturdy");
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return phase("sturdy") == "Running"; }, 20s));
  const auto before = uidsByName("sturdy");
  addNode("b", 4);
  client_->patchStatus(
      r::kNodes, "", nodeName("a"),
      R"({"status":{"conditions":[{"type":"Ready","status":"False","reason":"KubeletNotReady","lastTransitionTime":")" +
          op::formatTime(std::chrono::system_clock::now()) + R"("}]}})");
  ASSERT_TRUE(eventuallyThroughApiErrors(
      [&] {
        return condition("sturdy", "Restarting") == "True/NodeLost" ||
               field("sturdy", "/status/restarts") == "1";
      },
      30s))
      << op.log();
  EXPECT_TRUE(eventuallyThroughApiErrors(
      [&] { return eventMessage("NodeLost").find(nodeName("a")) != std::string::npos; }, 10s))
      << eventMessage("NodeLost");
  ASSERT_TRUE(eventuallyThroughApiErrors(
      [&] {
        auto ps = pods("sturdy");
        if (ps.size() != 2) return false;
        for (const auto& p : ps) {
          if (before.count(p.metadata.name) && before.at(p.metadata.name) == p.metadata.uid)
            return false;
          if (jsonString(p.json, "/metadata/annotations/rpcjob.dev~1node") != nodeName("b"))
            return false;
        }
        return true;
      },
      30s))
      << "the bound pods were force-deleted (no kubelet) and recreated on b\n"
      << op.log();
  EXPECT_EQ(field("sturdy", "/status/restarts"), "1");
}

// The API refuses a pod (a template port named like the operator's): a
// condition and a Warning Event carry the API's message; a ConfigMap of the
// job's name owned by nobody is an error too, never success.
TEST_F(Scenario, TemplatePortClashAndForeignConfigMapAreVisible) {
  addNode("a", 4);
  OperatorProcess op(ns_, "op-1", kFast);
  std::string job = jobJson("clash", 1, 1);
  const std::string container = R"({"name":"w","image":"rpcjob-worker"})";
  const std::string withPort =
      R"({"name":"w","image":"rpcjob-worker","ports":[{"name":"metrics","containerPort":9000}]})";
  job.replace(job.rfind(container), container.size(), withPort);
  client_->create(r::kRpcJobs, ns_, job);
  ASSERT_TRUE(eventuallyThroughApiErrors(
      [&] { return condition("clash", "ReplicaFailure") == "True/FailedCreate"; }, 30s))
      << op.log();
  EXPECT_NE(conditionMessage("clash", "ReplicaFailure").find("Duplicate value"), std::string::npos)
      << conditionMessage("clash", "ReplicaFailure");
  EXPECT_TRUE(eventuallyThroughApiErrors(
      [&] { return eventMessage("FailedCreate").find("Warning: Pod clash-worker-0") == 0; }, 10s))
      << eventMessage("FailedCreate");

  client_->create(
      r::kConfigMaps, ns_,
      R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"squat-assignment"},"data":{}})");
  client_->create(r::kRpcJobs, ns_, jobJson("squat", 1, 1));
  ASSERT_TRUE(eventuallyThroughApiErrors(
      [&] { return condition("squat", "ReplicaFailure") == "True/NotOwned"; }, 30s))
      << op.log();
  EXPECT_NE(conditionMessage("squat", "ReplicaFailure").find("squat-assignment"),
            std::string::npos);
}

// A pod deleted by someone else (kubectl delete pod): the whole job restarts,
// counted, with a PodDeleted condition and Event naming the pod.
TEST_F(Scenario, DeletedPodRestartsTheJobCounted) {
  addNode("a", 4);
  OperatorProcess op(ns_, "op-1", kFast);
  client_->create(r::kRpcJobs, ns_, jobJson("fragile", 1, 1, R"({"backoffLimit":3})"));
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return pods("fragile").size() == 2; }, 30s))
      << op.log();
  runAll("fragile");
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return phase("fragile") == "Running"; }, 20s));
  const auto before = uidsByName("fragile");
  client_->remove(r::kPods, ns_, "fragile-worker-0", DeleteOptions{"Background", "", 0});
  ASSERT_TRUE(
      eventuallyThroughApiErrors([&] { return field("fragile", "/status/restarts") == "1"; }, 20s))
      << op.log();
  EXPECT_TRUE(eventuallyThroughApiErrors(
      [&] { return eventMessage("PodDeleted").find("fragile-worker-0") != std::string::npos; },
      10s))
      << eventMessage("PodDeleted");
  ASSERT_TRUE(eventuallyThroughApiErrors(
      [&] {
        auto now = uidsByName("fragile");
        return now.size() == 2 && now.at("fragile-master-0") != before.at("fragile-master-0");
      },
      20s))
      << op.log();
}

}  // namespace
}  // namespace rpcjob::kube::e2e
