// End-to-end: the real rpcjob-operator binary against a real control plane
// (etcd, kube-apiserver and kube-controller-manager v1.20.2, one for this whole
// binary: e2e_fixture.h). There is no scheduler or kubelet: fake GPU Nodes are
// registered through the API, and the tests play the kubelet by patching pod
// status. Waits poll with deadlines, never fixed sleeps.
#include "e2e_fixture.h"
#include "restricted_check.h"

#include "rpcjob/assignment/pair_links.h"
#include "rpcjob/operator/config.h"

namespace rpcjob::kube::e2e {
namespace {

const auto* gEnv = ::testing::AddGlobalTestEnvironment(new ControlPlaneEnvironment);

// Whether `pod` has the job's Secret as a volume and its (one) container mounts it.
bool mountsJobSecret(const Object& pod, const std::string& job) {
  std::string volume;
  for (int v = 0; v < 4; ++v) {
    const std::string at = "/spec/volumes/" + std::to_string(v);
    if (jsonString(pod.json, at + "/secret/secretName") == job + "-rpc-secret") {
      volume = jsonString(pod.json, at + "/name").value_or("");
    }
  }
  if (volume.empty()) return false;
  for (int m = 0; m < 4; ++m) {
    const std::string at = "/spec/containers/0/volumeMounts/" + std::to_string(m);
    if (jsonString(pod.json, at + "/name") == volume) {
      return jsonString(pod.json, at + "/mountPath") == "/var/run/rpcjob";
    }
  }
  return false;
}

TEST_F(E2e, JobGetsServiceConfigMapPodsAndStatusThenRunsAndSucceeds) {
  addNode("a", 4);
  addNode("b", 4);
  OperatorProcess op(ns_, "op-1");
  client_->create(r::kRpcJobs, ns_, jobJson("train", 5, 1));
  ASSERT_TRUE(eventuallyThroughApiErrors(
      [&] { return pods("train").size() == 6 && phase("train") == "Planned"; }, 30s))
      << op.log();
  // The Service: headless, addresses published before readiness.
  Object svc = client_->get(r::kServices, ns_, "train");
  EXPECT_EQ(jsonString(svc.json, "/spec/clusterIP"), "None");
  EXPECT_EQ(jsonString(svc.json, "/spec/publishNotReadyAddresses"), "true");
  ASSERT_NE(svc.metadata.controllerRef(), nullptr);
  // The assignment, as the runtime reads it.
  Object cm = client_->get(r::kConfigMaps, ns_, "train-assignment");
  Assignment a = parseAssignment(jsonString(cm.json, "/data/assignment.yaml").value_or(""));
  ASSERT_EQ(a.worldSize(), 6);
  EXPECT_EQ(a.byRank(0)->name, "master");
  EXPECT_EQ(deviceMapsOf(a, "master").size(), 5u) << "a device map to every GPU peer";
  EXPECT_EQ(a.byName("master")->address, "train-master-0.train." + ns_ + ".svc:29500");
  // The job's Secret: random, owned by the job, never in the operator's log.
  Object secret = client_->get(r::kSecrets, ns_, "train-rpc-secret");
  ASSERT_NE(secret.metadata.controllerRef(), nullptr);
  const std::string key = base64Decode(jsonString(secret.json, "/data/secret").value_or(""));
  EXPECT_EQ(key.size(), 64u) << "256 random bits as hex";
  EXPECT_EQ(key.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(op.log().find(key), std::string::npos) << "the operator logged the job's secret";
  // Its NetworkPolicy: the job's pods admit the job's pods (and the metrics scraper).
  Object policy = client_->get(r::kNetworkPolicies, ns_, "train-rpc");
  ASSERT_NE(policy.metadata.controllerRef(), nullptr);
  EXPECT_EQ(jsonString(policy.json, "/spec/podSelector/matchLabels/rpcjob.dev~1job-name"), "train");
  EXPECT_EQ(jsonString(policy.json,
                       "/spec/ingress/0/from/0/podSelector/matchLabels/rpcjob.dev~1job-name"),
            "train");
  std::set<std::string> nodesUsed;
  for (const auto& p : pods("train")) {
    EXPECT_TRUE(mountsJobSecret(p, "train")) << p.metadata.name;
    EXPECT_NE(p.json.find(R"({"name":"RPCJOB_SECRET_FILE","value":"/var/run/rpcjob/secret"})"),
              std::string::npos)
        << p.metadata.name;
    const WorkerEntry* e = nullptr;
    for (const auto& w : a.workers) e = w.pod == p.metadata.name ? &w : e;
    ASSERT_NE(e, nullptr) << p.metadata.name;
    EXPECT_EQ(jsonString(p.json, "/spec/containers/0/env/1/value"), std::to_string(e->rank));
    EXPECT_EQ(jsonString(p.json,
                         "/spec/affinity/nodeAffinity/"
                         "requiredDuringSchedulingIgnoredDuringExecution/"
                         "nodeSelectorTerms/0/matchExpressions/0/values/0"),
              e->node)
        << "pinned by required node affinity";
    EXPECT_EQ(jsonString(p.json, "/spec/containers/0/resources/limits/nvidia.com~1gpu"), "1");
    EXPECT_EQ(jsonString(p.json, "/spec/subdomain"), "train");
    ASSERT_NE(p.metadata.controllerRef(), nullptr);
    EXPECT_EQ(p.metadata.controllerRef()->kind, "RpcJob");
    nodesUsed.insert(e->node);
  }
  EXPECT_EQ(nodesUsed.size(), 2u) << "6 one-GPU workers on two 4-GPU nodes";
  EXPECT_EQ(field("train", "/status/workerCount"), "6");
  EXPECT_EQ(field("train", "/status/workers/0/name"), "master");
  EXPECT_EQ(condition("train", "Planned"), "True/Planned");
  EXPECT_FALSE(field("train", "/status/startTime").empty());

  runAll("train");
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return phase("train") == "Running"; }, 20s))
      << op.log();
  EXPECT_TRUE(eventuallyThroughApiErrors(
      [&] { return field("train", "/status/readyWorkers") == "6"; }, 10s));
  for (const auto& p : pods("train")) setPodStatus(p.metadata.name, R"({"phase":"Succeeded"})");
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return phase("train") == "Succeeded"; }, 20s))
      << op.log();
  EXPECT_FALSE(field("train", "/status/completionTime").empty());
  EXPECT_TRUE(op.stop()) << op.log();
}

TEST_F(E2e, FailedWorkerRestartsWithSamePodNamesThenFailsAfterBackoffLimit) {
  addNode("a", 4);
  OperatorProcess op(ns_, "op-1");
  client_->create(r::kRpcJobs, ns_, jobJson("flaky", 2, 1, R"({"backoffLimit":1})"));
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return pods("flaky").size() == 3; }, 30s))
      << op.log();
  std::set<std::string> names, uids;
  for (const auto& p : pods("flaky")) {
    names.insert(p.metadata.name);
    uids.insert(p.metadata.uid);
  }
  runAll("flaky");
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return phase("flaky") == "Running"; }, 20s))
      << op.log();
  setPodStatus("flaky-worker-1", kFailed);
  ASSERT_TRUE(eventuallyThroughApiErrors(
      [&] {
        auto ps = pods("flaky");
        if (ps.size() != 3 || field("flaky", "/status/restarts") != "1") return false;
        for (const auto& p : ps) {
          if (uids.count(p.metadata.uid) || !names.count(p.metadata.name)) return false;
          if (p.metadata.labels.at("rpcjob.dev/restart-generation") != "1") return false;
        }
        return true;
      },
      30s))
      << op.log();
  EXPECT_TRUE(
      eventuallyThroughApiErrors([&] { return eventReasons().count("WorkerFailed") > 0; }, 10s));
  EXPECT_TRUE(eventuallyThroughApiErrors(
      [&] { return condition("flaky", "Restarting") == "False/Relaunched"; }, 10s));

  runAll("flaky");
  setPodStatus("flaky-master-0", kFailed);
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return phase("flaky") == "Failed"; }, 20s))
      << op.log();
  EXPECT_EQ(condition("flaky", "Failed"), "True/BackoffLimitExceeded");
  EXPECT_EQ(field("flaky", "/status/restarts"), "1");
  // cleanPodPolicy Running (the default): the pods still running are deleted.
  EXPECT_TRUE(eventuallyThroughApiErrors([&] { return pods("flaky").size() == 1; }, 20s));
}

TEST_F(E2e, SuspendDeletesPodsAndResumeRecreatesThem) {
  addNode("a", 4);
  OperatorProcess op(ns_, "op-1");
  client_->create(r::kRpcJobs, ns_, jobJson("pausable", 1, 1));
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return pods("pausable").size() == 2; }, 30s))
      << op.log();
  client_->mergePatch(r::kRpcJobs, ns_, "pausable", R"({"spec":{"runPolicy":{"suspend":true}}})");
  ASSERT_TRUE(eventuallyThroughApiErrors(
      [&] { return phase("pausable") == "Suspended" && pods("pausable").empty(); }, 20s))
      << op.log();
  EXPECT_EQ(condition("pausable", "Suspended"), "True/Suspended");
  EXPECT_TRUE(client_->tryGet(r::kConfigMaps, ns_, "pausable-assignment").has_value());
  client_->mergePatch(r::kRpcJobs, ns_, "pausable", R"({"spec":{"runPolicy":{"suspend":false}}})");
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return pods("pausable").size() == 2; }, 20s))
      << op.log();
  EXPECT_TRUE(eventuallyThroughApiErrors(
      [&] { return condition("pausable", "Suspended") == "False/Resumed"; }, 10s));
}

TEST_F(E2e, UnschedulableAndInvalidJobsGetAClearConditionAndNoPods) {
  addNode("a", 4);
  OperatorProcess op(ns_, "op-1");
  client_->create(r::kRpcJobs, ns_, jobJson("huge", 1, 16));
  ASSERT_TRUE(eventuallyThroughApiErrors(
      [&] { return condition("huge", "Planned") == "False/Unschedulable"; }, 30s))
      << op.log();
  EXPECT_NE(field("huge", "/status/conditions/0/message").find("nvidia.com/gpu"), std::string::npos)
      << field("huge", "/status/conditions/0/message");
  EXPECT_EQ(phase("huge"), "Pending");
  EXPECT_TRUE(
      eventuallyThroughApiErrors([&] { return eventReasons().count("Unschedulable") > 0; }, 10s));
  EXPECT_TRUE(pods("huge").empty());
  EXPECT_FALSE(client_->tryGet(r::kConfigMaps, ns_, "huge-assignment"));

  // Valid for the API server (v1.20 drops the CRD's CEL), not for rpcjob: GPUs
  // must come from gpusPerWorker, not from the template.
  client_->create(
      r::kRpcJobs, ns_,
      R"({"apiVersion":"rpcjob.dev/v1alpha1","kind":"RpcJob","metadata":{"name":"bad"},"spec":{"workers":[{"name":"master","template":{"spec":{"containers":[{"name":"w","image":"i","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}}]}})");
  ASSERT_TRUE(
      eventuallyThroughApiErrors([&] { return condition("bad", "Failed") == "True/Invalid"; }, 30s))
      << op.log();
  EXPECT_TRUE(pods("bad").empty());
  // Recorded once: one status write, one Event; no retry storm.
  std::string rv = client_->get(r::kRpcJobs, ns_, "bad").metadata.resourceVersion;
  EXPECT_TRUE(eventuallyThroughApiErrors([&] { return eventReasons().count("Invalid") > 0; }, 10s));
  client_->mergePatch(r::kRpcJobs, ns_, "bad", R"({"metadata":{"labels":{"poke":"1"}}})");
  std::this_thread::sleep_for(1s);  // a negative check: nothing more may happen
  int invalidEvents = 0;
  for (const auto& e : client_->list(r::kEvents, ns_).items) {
    invalidEvents += jsonString(e.json, "/reason") == "Invalid";
  }
  EXPECT_EQ(invalidEvents, 1);
  EXPECT_EQ(field("bad", "/status/observedGeneration"), "1");
  (void)rv;
}

TEST_F(E2e, DeadlineFailsTheJobAndTtlDeletesIt) {
  addNode("a", 4);
  OperatorProcess op(ns_, "op-1");
  client_->create(
      r::kRpcJobs, ns_,
      jobJson("timed", 1, 1, R"({"activeDeadlineSeconds":2,"ttlSecondsAfterFinished":2})"));
  ASSERT_TRUE(eventuallyThroughApiErrors(
      [&] { return condition("timed", "Failed") == "True/DeadlineExceeded"; }, 30s))
      << op.log();
  EXPECT_TRUE(
      eventuallyThroughApiErrors([&] { return !client_->tryGet(r::kRpcJobs, ns_, "timed"); }, 30s))
      << op.log();
}

TEST_F(E2e, OperatorRecoversFromApiserverRestart) {
  addNode("a", 4);
  OperatorProcess op(ns_, "op-1");
  client_->create(r::kRpcJobs, ns_, jobJson("before", 1, 1));
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return pods("before").size() == 2; }, 30s))
      << op.log();
  ControlPlaneEnvironment::plane()->restartApiserver();
  client_ = ControlPlaneEnvironment::plane()->adminClient();
  client_->create(r::kRpcJobs, ns_, jobJson("after", 1, 1));
  // Either its informers and Lease ride the restart out, or (the API server
  // back later than the renew deadline, seen on a loaded 2-core CI machine) it
  // exits on the lost Lease and, restarted as its Deployment would, carries on.
  // Any other exit is a failure.
  std::vector<std::string> exits;
  EXPECT_TRUE(eventuallyThroughApiErrors(
      [&] {
        if (std::string how = op.restartIfExited(); !how.empty()) exits.push_back(how);
        return pods("after").size() == 2 && phase("after") == "Planned";
      },
      90s))
      << op.log();
  for (const auto& how : exits) EXPECT_EQ(how, "exit 1") << op.log();
  if (!exits.empty()) {
    EXPECT_NE(op.log().find("lost the lease: exiting"), std::string::npos) << op.log();
  }
  EXPECT_LE(exits.size(), 1u) << op.log();
  EXPECT_EQ(pods("before").size(), 2u);  // nothing made twice, restarted or not
}

TEST_F(E2e, RestartedOperatorMakesNoDuplicateChildren) {
  addNode("a", 8);
  std::set<std::string> uids;
  {
    OperatorProcess op(ns_, "op-1");
    client_->create(r::kRpcJobs, ns_, jobJson("steady", 3, 1));
    ASSERT_TRUE(eventuallyThroughApiErrors([&] { return pods("steady").size() == 4; }, 30s))
        << op.log();
    ASSERT_TRUE(eventuallyThroughApiErrors([&] { return phase("steady") == "Planned"; }, 10s));
    for (const auto& p : pods("steady")) uids.insert(p.metadata.uid);
    EXPECT_TRUE(op.stop()) << op.log();
  }
  std::string rv = client_->get(r::kRpcJobs, ns_, "steady").metadata.resourceVersion;
  OperatorProcess again(ns_, "op-2");
  // The new operator reconciles (it reports the pods Running) and changes nothing else.
  runAll("steady");
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return phase("steady") == "Running"; }, 30s))
      << again.log();
  std::set<std::string> after;
  for (const auto& p : pods("steady")) after.insert(p.metadata.uid);
  EXPECT_EQ(after, uids);
  EXPECT_EQ(client_->list(r::kServices, ns_).items.size(), 1u);
  EXPECT_EQ(client_->list(r::kConfigMaps, ns_).items.size(),
            1u +
                /* kube-root-ca.crt, if any */
                (client_->tryGet(r::kConfigMaps, ns_, "kube-root-ca.crt") ? 1u : 0u));
  EXPECT_EQ(again.log().find("created"), std::string::npos) << again.log();
}

TEST_F(E2e, TwoReplicasOneLeader) {
  addNode("a", 8);
  OperatorProcess a(ns_, "op-a");
  ASSERT_TRUE(eventuallyThroughApiErrors(
      [&] {
        auto l = client_->tryGet(r::kLeases, ns_, "rpcjob-operator");
        return l && jsonString(l->json, "/spec/holderIdentity") == "op-a";
      },
      30s))
      << a.log();
  OperatorProcess b(ns_, "op-b");
  // The standby is ready too (a 2-replica rollout must not stall on it).
  std::string port;
  ASSERT_TRUE(eventuallyThroughApiErrors(
      [&] {
        const std::string text = b.log(), marker = "/readyz on 127.0.0.1:";
        auto at = text.find(marker);
        if (at == std::string::npos) return false;
        port = text.substr(at + marker.size(), text.find('\n', at) - at - marker.size());
        return true;
      },
      10s))
      << b.log();
  std::string ready;
  rpcjob::testing::runCommand(
      "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:" + port + "/readyz", &ready);
  EXPECT_EQ(ready, "200") << b.log();
  client_->create(r::kRpcJobs, ns_, jobJson("one", 1, 1));
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return pods("one").size() == 2; }, 30s)) << a.log();
  EXPECT_NE(a.log().find("created Pod"), std::string::npos);
  EXPECT_EQ(b.log().find("reconcile"), std::string::npos) << "the standby reconciled:\n" << b.log();
  // The leader steps down (SIGTERM releases the Lease): the standby takes over.
  EXPECT_TRUE(a.stop());
  client_->create(r::kRpcJobs, ns_, jobJson("two", 1, 1));
  EXPECT_TRUE(eventuallyThroughApiErrors([&] { return pods("two").size() == 2; }, 30s)) << b.log();
  EXPECT_NE(b.log().find("created Pod"), std::string::npos) << b.log();
}

TEST_F(E2e, DeletingTheJobRemovesItsChildren) {
  addNode("a", 4);
  OperatorProcess op(ns_, "op-1");
  client_->create(r::kRpcJobs, ns_, jobJson("doomed", 1, 1));
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return pods("doomed").size() == 2; }, 30s))
      << op.log();
  client_->remove(r::kRpcJobs, ns_, "doomed", DeleteOptions{"Background", "", std::nullopt});
  // Garbage collection (kube-controller-manager) follows the ownerReferences (the
  // Secret and NetworkPolicy too). It learns a new CRD at its 30 s discovery resync: this test runs
  // last, so the control plane is old enough by then.
  EXPECT_TRUE(eventuallyThroughApiErrors(
      [&] {
        return pods("doomed").empty() && !client_->tryGet(r::kServices, ns_, "doomed") &&
               !client_->tryGet(r::kConfigMaps, ns_, "doomed-assignment") &&
               !client_->tryGet(r::kSecrets, ns_, "doomed-rpc-secret") &&
               !client_->tryGet(r::kNetworkPolicies, ns_, "doomed-rpc");
      },
      60s))
      << op.log();
}

TEST_F(E2e, SharedPodHasOneContainerWithAllItsGpusAndReportsTheFailedWorker) {
  addNode("a", 8);
  OperatorProcess op(ns_, "op-1");
  const std::string tmpl = R"({"spec":{"nodeSelector":{"rpcjob.test/ns":")" + ns_ +
                           R"("},"containers":[{"name":"worker","image":"rpcjob-worker",)"
                           R"("command":["rpcjob-worker"],"args":["model-split"]}]}})";
  client_->create(
      r::kRpcJobs, ns_,
      R"({"apiVersion":"rpcjob.dev/v1alpha1","kind":"RpcJob","metadata":{"name":"split"},)"
      R"("spec":{"workers":[{"name":"master","gpusPerWorker":1,"template":)" +
          tmpl + R"(},{"name":"shard","gpusPerWorker":1,"template":)" + tmpl +
          R"(}],"placement":{"policy":"Pack","workersPerPod":"Auto"},)"
          R"("runPolicy":{"backoffLimit":0}}})");
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return pods("split").size() == 1; }, 30s))
      << op.log();
  const Object pod = pods("split").front();
  EXPECT_EQ(jsonString(pod.json, "/spec/containers/0/name"), "worker");
  EXPECT_FALSE(jsonString(pod.json, "/spec/containers/1/name")) << "one container";
  EXPECT_EQ(jsonString(pod.json, "/spec/containers/0/command/0"), "rpcjob-launch");
  EXPECT_EQ(jsonString(pod.json, "/spec/containers/0/resources/limits/nvidia.com~1gpu"), "2");
  EXPECT_EQ(jsonString(pod.json, "/spec/containers/0/env/0/name"), "RPCJOB_POD_WORKERS");
  const std::string spec = jsonString(pod.json, "/spec/containers/0/env/0/value").value_or("");
  EXPECT_NE(spec.find(R"("name":"shard")"), std::string::npos) << spec;
  // Both workers of the shared pod get the job secret's path; the one container mounts it.
  EXPECT_TRUE(mountsJobSecret(pod, "split"));
  std::size_t secretEnvs = 0;
  for (auto at = spec.find(R"("RPCJOB_SECRET_FILE")"); at != std::string::npos;
       at = spec.find(R"("RPCJOB_SECRET_FILE")", at + 1)) {
    ++secretEnvs;
  }
  EXPECT_EQ(secretEnvs, 2u) << spec;
  // The shard maps the master's cuda:0 to its own cuda:1 of the pod's two GPUs.
  const Assignment table =
      parseAssignment(jsonString(client_->get(r::kConfigMaps, ns_, "split-assignment").json,
                                 "/data/assignment.yaml")
                          .value_or(""));
  EXPECT_EQ(deviceMapsOf(table, "master").at("shard"), (DeviceMap{{"cuda:0", "cuda:1"}}));

  runAll("split");
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return phase("split") == "Running"; }, 20s))
      << op.log();
  const std::string report =
      R"({\"failed\":\"shard\",\"workers\":[{\"name\":\"shard\",\"exitCode\":3,\"signal\":0,)"
      R"(\"restarts\":0},{\"name\":\"master\",\"exitCode\":143,\"signal\":15,\"restarts\":0}]})";
  setPodStatus(pod.metadata.name,
               R"({"phase":"Failed","containerStatuses":[{"name":"worker","ready":false,)"
               R"("restartCount":0,"image":"rpcjob-worker","imageID":"","state":{"terminated":)"
               R"({"exitCode":3,"reason":"Error","message":")" +
                   report + R"("}}}]})");
  ASSERT_TRUE(eventuallyThroughApiErrors([&] { return phase("split") == "Failed"; }, 20s))
      << op.log();
  std::string message;
  for (int i = 0; i < 8; ++i) {
    const std::string c = "/status/conditions/" + std::to_string(i);
    if (field("split", c + "/type") == "Failed") message = field("split", c + "/message");
  }
  EXPECT_NE(
      message.find("worker shard exited with code 3 (pod workers: shard 3, master signal 15)"),
      std::string::npos)
      << message;
}

// A namespace that enforces restricted (v1.20 has no PodSecurity admission, so
// the API server admits anything: the test checks the pods themselves): every
// pod passes the restricted checks, the RDMA links are left out of the
// assignment, and the job says so (condition and Warning Event). Relabelled
// privileged, the operator sees the change through its namespace watch.
TEST_F(E2e, RestrictedNamespaceGetsRestrictedPodsAndSaysWhatItLeftOut) {
  client_->mergePatch(
      r::kNamespaces, "", ns_,
      R"({"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"restricted"}}})");
  addNode("a", 4);
  addNode("b", 4);
  for (const auto& n : nodes_) {
    client_->mergePatch(r::kNodes, "", n, R"({"metadata":{"labels":{"rpcjob.dev/rdma":"true"}}})");
  }
  OperatorProcess op(ns_, "op-1");
  client_->create(r::kRpcJobs, ns_, jobJson("train", 5, 1));
  ASSERT_TRUE(eventuallyThroughApiErrors(
      [&] { return pods("train").size() == 6 && phase("train") == "Planned"; }, 30s))
      << op.log();
  for (const auto& p : pods("train")) {
    SCOPED_TRACE(p.metadata.name);
    EXPECT_EQ(op::testing::restrictedViolations(YAML::Load(p.json)), std::vector<std::string>{});
    EXPECT_EQ(jsonString(p.json, "/spec/securityContext/fsGroup"), "65532");
  }
  EXPECT_EQ(condition("train", "PodSecurity"), "True/LinksLeftOut");
  // The reconciler writes the status, then records its Events: the condition
  // seen does not mean the Event is there yet.
  EXPECT_TRUE(
      eventuallyThroughApiErrors([&] { return eventReasons().count("LinksLeftOut") > 0; }, 10s))
      << op.log();
  std::string warning;
  for (const auto& e : client_->list(r::kEvents, ns_).items) {
    if (jsonString(e.json, "/reason") == "LinksLeftOut") {
      warning = jsonString(e.json, "/type").value_or("") + ": " +
                jsonString(e.json, "/message").value_or("");
    }
  }
  EXPECT_NE(warning.find("Warning: "), std::string::npos) << warning;
  EXPECT_NE(warning.find("ibv (needs IPC_LOCK)"), std::string::npos) << warning;
  EXPECT_NE(warning.find("restricted"), std::string::npos) << warning;
  const Assignment a =
      parseAssignment(jsonString(client_->get(r::kConfigMaps, ns_, "train-assignment").json,
                                 "/data/assignment.yaml")
                          .value_or(""));
  EXPECT_EQ(a.transports, (std::vector<std::string>{"shm", "uv"}));

  client_->mergePatch(
      r::kNamespaces, "", ns_,
      R"({"metadata":{"labels":{"pod-security.kubernetes.io/enforce":"privileged"}}})");
  EXPECT_TRUE(eventuallyThroughApiErrors(
      [&] { return condition("train", "PodSecurity") == "False/NothingLeftOut"; }, 30s))
      << op.log();
}

}  // namespace
}  // namespace rpcjob::kube::e2e
