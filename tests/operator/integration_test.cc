// The client machinery against a real kube-apiserver (v1.20.2, built by
// tests/kube/control-plane.sh), started once for this binary.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "control_plane.h"
#include "rpcjob/api/parse.h"
#include "rpcjob/assignment/assignment.h"
#include "rpcjob/operator/children.h"
#include "rpcjob/operator/controller.h"
#include "rpcjob/operator/events.h"
#include "rpcjob/operator/informer.h"
#include "rpcjob/operator/leader_election.h"
#include "rpcjob/planner/plan.h"

namespace rpcjob::kube {
namespace {

using namespace std::chrono_literals;
namespace r = resources;

using rpcjob::testing::ControlPlaneEnvironment;
const auto* gEnv = ::testing::AddGlobalTestEnvironment(new ControlPlaneEnvironment);

using rpcjob::testing::eventually;

class Kube : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ControlPlaneEnvironment::skipReason().empty())
      GTEST_SKIP() << ControlPlaneEnvironment::skipReason();
    ASSERT_NE(ControlPlaneEnvironment::plane(), nullptr)
        << "control plane did not start: " << ControlPlaneEnvironment::startError();
    client_ = ControlPlaneEnvironment::plane()->adminClient();
  }

  // A fresh namespace per test, so tests never see each other's objects.
  std::string makeNamespace(const std::string& name) {
    client_->create(
        r::kNamespaces, "",
        R"({"apiVersion":"v1","kind":"Namespace","metadata":{"name":")" + name + "\"}}");
    return name;
  }

  static std::string configMap(const std::string& name, const std::string& value) {
    return R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":")" + name +
           R"(","labels":{"app":"t"}},"data":{"k":")" + value + "\"}}";
  }

  void ensureCrd() {
    rpcjob::testing::createRpcJobCrd(*client_);
    ASSERT_TRUE(eventually(
        [&] {
          try {
            client_->list(r::kRpcJobs, "default");
            return true;
          } catch (const ApiError&) {
            return false;
          }
        },
        20s))
        << "CRD from crds/rpcjob.yaml never became served";
  }

  std::shared_ptr<Client> client_;
};

TEST_F(Kube, ConfigMapCrud) {
  const std::string ns = makeNamespace("crud");
  Object created = client_->create(r::kConfigMaps, ns, configMap("a", "1"));
  EXPECT_EQ(created.metadata.key(), ns + "/a");
  EXPECT_FALSE(created.metadata.uid.empty());

  try {
    client_->create(r::kConfigMaps, ns, configMap("a", "again"));
    FAIL() << "duplicate create accepted";
  } catch (const ApiError& e) {
    EXPECT_TRUE(e.alreadyExists()) << e.what();
  }

  Object got = client_->get(r::kConfigMaps, ns, "a");
  EXPECT_EQ(jsonString(got.json, "/data/k"), "1");

  Object patched = client_->mergePatch(r::kConfigMaps, ns, "a", R"({"data":{"k":"2","k2":"x"}})");
  EXPECT_EQ(jsonString(patched.json, "/data/k"), "2");
  EXPECT_NE(patched.metadata.resourceVersion, created.metadata.resourceVersion);

  // A PUT carrying the old resourceVersion is a conflict.
  try {
    client_->replace(r::kConfigMaps, ns, "a", created.json);
    FAIL() << "stale update accepted";
  } catch (const ApiError& e) {
    EXPECT_TRUE(e.conflict()) << e.what();
  }

  // Server-side apply, YAML body, our field manager.
  Object applied = client_->apply(r::kConfigMaps, ns, "b",
                                  "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n"
                                  "  labels: {app: t}\ndata:\n  k: applied\n");
  EXPECT_EQ(jsonString(applied.json, "/data/k"), "applied");
  EXPECT_NE(applied.json.find("rpcjob-operator"), std::string::npos) << "fieldManager not recorded";

  ObjectList list = client_->list(r::kConfigMaps, ns, ListOptions{"app=t", "", 1});  // pages of 1
  ASSERT_EQ(list.items.size(), 2u);
  EXPECT_EQ(list.items[0].kind, "ConfigMap");
  EXPECT_FALSE(list.resourceVersion.empty());

  client_->remove(r::kConfigMaps, ns, "a");
  EXPECT_FALSE(client_->tryGet(r::kConfigMaps, ns, "a").has_value());
  EXPECT_FALSE(client_->removeIfExists(r::kConfigMaps, ns, "a"));
  try {
    client_->get(r::kConfigMaps, ns, "a");
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_TRUE(e.notFound()) << e.what();
  }
}

TEST_F(Kube, EventsAreRecordedAgainstTheirObject) {
  const std::string ns = makeNamespace("events");
  Object target = client_->create(r::kConfigMaps, ns, configMap("about", "1"));
  EventRecorder recorder(client_, "rpcjob-operator");
  ASSERT_TRUE(recorder.record(target, "Warning", "Unschedulable", "needs 8 nvidia.com/gpu"));
  ListOptions lo;
  lo.fieldSelector = "involvedObject.name=about";
  ObjectList events = client_->list(r::kEvents, ns, lo);
  ASSERT_EQ(events.items.size(), 1u);
  EXPECT_EQ(jsonString(events.items[0].json, "/reason"), "Unschedulable");
  EXPECT_EQ(jsonString(events.items[0].json, "/involvedObject/uid"), target.metadata.uid);
  Object gone;
  gone.metadata.name = "x";
  gone.metadata.namespace_ = "no-such-namespace";
  EXPECT_FALSE(recorder.record(gone, "Normal", "Nothing", "")) << "must fail softly";
}

// What tests of the reconciler will do in the kubelet's place: a GPU Node with
// patched status, a Pod bound to it whose status becomes Running.
TEST_F(Kube, FakeGpuNodeAndPodStatusThroughTheApi) {
  const std::string ns = makeNamespace("kubelet");
  client_->create(r::kNodes, "",
                  R"({"apiVersion":"v1","kind":"Node","metadata":{"name":"gpu-node-1",)"
                  R"("labels":{"nvidia.com/gpu.product":"H100"}}})");
  Object node = client_->patchStatus(
      r::kNodes, "", "gpu-node-1",
      R"({"status":{"capacity":{"nvidia.com/gpu":"8","cpu":"64","memory":"512Gi","pods":"110"},)"
      R"("allocatable":{"nvidia.com/gpu":"8","cpu":"64","memory":"512Gi","pods":"110"},)"
      R"("conditions":[{"type":"Ready","status":"True","reason":"KubeletReady"}]}})");
  EXPECT_EQ(jsonString(node.json, "/status/allocatable/nvidia.com~1gpu"), "8");

  // Pods are refused until kube-controller-manager made the namespace's default
  // ServiceAccount.
  ASSERT_TRUE(eventually([&] { return rpcjob::testing::podsAdmittedIn(*client_, ns); }, 20s));
  client_->create(r::kPods, ns,
                  R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"w0"},"spec":{)"
                  R"("nodeName":"gpu-node-1","containers":[{"name":"w","image":"rpcjob-worker",)"
                  R"("resources":{"limits":{"nvidia.com/gpu":"1"}}}]}})");
  Object running = client_->patchStatus(
      r::kPods, ns, "w0",
      R"({"status":{"phase":"Running","podIP":"10.1.0.5","containerStatuses":[{"name":"w",)"
      R"("ready":true,"restartCount":0,"image":"rpcjob-worker","imageID":"",)"
      R"("state":{"running":{"startedAt":"2026-01-01T00:00:00Z"}}}]}})");
  EXPECT_EQ(jsonString(running.json, "/status/phase"), "Running");
  EXPECT_EQ(jsonString(running.json, "/spec/nodeName"), "gpu-node-1");
  client_->remove(r::kPods, ns, "w0", DeleteOptions{"", "", 0});
  client_->remove(r::kNodes, "", "gpu-node-1");
}

TEST_F(Kube, CustomResourceCrudAndStatus) {
  ensureCrd();
  const std::string ns = makeNamespace("crd");
  Object job = client_->create(
      r::kRpcJobs, ns,
      R"({"apiVersion":"rpcjob.dev/v1alpha1","kind":"RpcJob","metadata":{"name":"j1"},)"
      R"("spec":{"workers":[{"name":"master","replicas":1}]}})");
  EXPECT_EQ(job.kind, "RpcJob");
  EXPECT_EQ(job.metadata.generation, 1);

  Object withStatus =
      client_->patchStatus(r::kRpcJobs, ns, "j1", R"({"status":{"phase":"Planned"}})");
  EXPECT_EQ(jsonString(withStatus.json, "/status/phase"), "Planned");
  EXPECT_EQ(withStatus.metadata.generation, 1) << "a status write must not bump generation";

  // Status through PUT on /status, from the object just read.
  Object fresh = client_->get(r::kRpcJobs, ns, "j1");
  std::string body = fresh.json;
  auto pos = body.find("\"Planned\"");
  ASSERT_NE(pos, std::string::npos);
  body.replace(pos, 9, "\"Running\"");
  Object updated = client_->updateStatus(r::kRpcJobs, ns, "j1", body);
  EXPECT_EQ(jsonString(updated.json, "/status/phase"), "Running");

  // Server-side apply of the spec by a second manager.
  Object applied = client_->apply(
      r::kRpcJobs, ns, "j1",
      "apiVersion: rpcjob.dev/v1alpha1\nkind: RpcJob\nmetadata: {name: j1}\n"
      "spec:\n  workers:\n  - {name: master, replicas: 1}\n  - {name: worker, replicas: 2}\n",
      true, "rpcjob-test");
  EXPECT_EQ(jsonString(applied.json, "/spec/workers/1/replicas"), "2");
  EXPECT_EQ(applied.metadata.generation, 2);

  EXPECT_EQ(client_->list(r::kRpcJobs, ns).items.size(), 1u);
  client_->remove(r::kRpcJobs, ns, "j1", DeleteOptions{"Background", job.metadata.uid, {}});
  EXPECT_TRUE(eventually([&] { return !client_->tryGet(r::kRpcJobs, ns, "j1"); }, 10s));
}

TEST_F(Kube, InformerSeesAddedModifiedDeletedAcrossWatchRestarts) {
  const std::string ns = makeNamespace("watch");
  InformerOptions o;
  o.ns = ns;
  o.watchTimeout = 1s;  // the server ends each watch after 1-2 s: restarts happen
  Informer informer(client_, r::kConfigMaps, o);
  std::mutex mu;
  std::vector<std::string> seen;
  auto record = [&](const char* what, const ObjectPtr& obj) {
    if (obj->metadata.name != "w") return;
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(std::string(what) + ":" + jsonString(obj->json, "/data/k").value_or("-"));
  };
  informer.addHandler({[&](const ObjectPtr& o) { record("ADDED", o); },
                       [&](const ObjectPtr&, const ObjectPtr& n) { record("MODIFIED", n); },
                       [&](const ObjectPtr& o) { record("DELETED", o); }});
  informer.start();
  ASSERT_TRUE(informer.waitForSync(10s));
  auto seenCopy = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return seen;
  };

  client_->create(r::kConfigMaps, ns, configMap("w", "1"));
  ASSERT_TRUE(eventually([&] { return informer.cache().get(ns + "/w") != nullptr; }, 10s));
  std::this_thread::sleep_for(2500ms);  // at least one watch restart in between
  client_->mergePatch(r::kConfigMaps, ns, "w", R"({"data":{"k":"2"}})");
  ASSERT_TRUE(eventually([&] { return seenCopy().size() >= 2; }, 10s));
  client_->remove(r::kConfigMaps, ns, "w");
  ASSERT_TRUE(eventually([&] { return seenCopy().size() >= 3; }, 10s));
  EXPECT_EQ(seenCopy(), (std::vector<std::string>{"ADDED:1", "MODIFIED:2", "DELETED:2"}));
  EXPECT_EQ(informer.cache().get(ns + "/w"), nullptr);
  Informer::Stats s = informer.stats();
  EXPECT_GE(s.watches, 2) << "the watch was never restarted";
  EXPECT_EQ(s.lists, 1) << "a normal watch timeout must not relist";
  informer.stop();
}

TEST_F(Kube, TooOldResourceVersionIsGone) {
  // The watch cache of a resource whose cache started late (a CRD's) has no
  // history back to version 1, so the server answers 410 Gone.
  ensureCrd();
  const std::string ns = makeNamespace("gone");
  Cancellation cancel;
  WatchOptions wo;
  wo.resourceVersion = "1";
  wo.timeout = 5s;
  int events = 0;
  WatchEnd end = client_->watch(
      r::kRpcJobs, ns, wo, [&](const WatchEvent&) { ++events; }, cancel);
  ASSERT_EQ(end.end, StreamEnd::kError);
  ASSERT_TRUE(end.error.has_value());
  EXPECT_TRUE(end.error->gone()) << end.error->what();
}

TEST_F(Kube, NoGroupUserIsForbidden) {
  auto nobody = ControlPlaneEnvironment::plane()->nogroupClient();
  try {
    nobody->list(r::kConfigMaps, "default");
    FAIL() << "list allowed";
  } catch (const ApiError& e) {
    EXPECT_TRUE(e.forbidden()) << e.what();
    EXPECT_EQ(e.reason(), "Forbidden");
  }
  Cancellation cancel;
  WatchEnd end = nobody->watch(
      r::kPods, "default", WatchOptions{}, [](const WatchEvent&) {}, cancel);
  ASSERT_TRUE(end.error.has_value());
  EXPECT_TRUE(end.error->forbidden()) << end.error->what();
}

TEST_F(Kube, ClientCertificateKubeconfig) {
  // kube-controller-manager's kubeconfig authenticates with a client certificate.
  auto certClient = Client::fromConfig(
      loadKubeconfig(ControlPlaneEnvironment::plane()->dir() + "/kcm.kubeconfig"));
  EXPECT_GE(certClient->list(r::kNamespaces, "").items.size(), 1u);
  HttpResponse ready = certClient->raw("GET", "/readyz");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(ready.body, "ok");
}

TEST_F(Kube, UntrustedServerCertificateIsRefused) {
  ClusterConfig config = loadKubeconfig(ControlPlaneEnvironment::plane()->kubeconfig());
  std::ifstream other(ControlPlaneEnvironment::plane()->dir() +
                      "/pki/admin-client.crt");  // a certificate, but no CA of the server
  std::stringstream pem;
  pem << other.rdbuf();
  config.tls.caPem = pem.str();
  ClientOptions o;
  o.timeout = 5s;
  auto untrusting = Client::fromConfig(config, o);
  try {
    untrusting->list(r::kNamespaces, "");
    FAIL() << "TLS verification did not fail";
  } catch (const ApiError& e) {
    EXPECT_TRUE(e.transport()) << e.what();
  }
}

TEST_F(Kube, LeaderElectionOneLeaderThenTakeover) {
  const std::string ns = makeNamespace("lease");
  struct Candidate {
    std::string id;
    Cancellation stop;
    std::atomic<int> started{0}, stopped{0};
    std::unique_ptr<LeaderElector> elector;
    std::thread thread;
  };
  Candidate a, b;
  a.id = "candidate-a";
  b.id = "candidate-b";
  for (Candidate* c : {&a, &b}) {
    LeaderElectionOptions o;
    o.leaseNamespace = ns;
    o.leaseName = "test-lease";
    o.identity = c->id;
    o.leaseDuration = 2s;
    o.renewDeadline = 1500ms;
    o.retryPeriod = 200ms;
    o.releaseOnCancel = false;  // stopping = crashing: the other must wait the lease out
    LeaderCallbacks cb;
    cb.onStartedLeading = [c] { ++c->started; };
    cb.onStoppedLeading = [c] { ++c->stopped; };
    c->elector = std::make_unique<LeaderElector>(client_, o, cb);
  }
  for (Candidate* c : {&a, &b}) c->thread = std::thread([c] { c->elector->run(c->stop); });
  auto leaders = [&] { return int(a.elector->isLeader()) + int(b.elector->isLeader()); };
  ASSERT_TRUE(eventually([&] { return leaders() == 1; }, 10s));
  for (int i = 0; i < 20; ++i) {  // 2 s, longer than the lease: still exactly one leader
    EXPECT_EQ(leaders(), 1);
    std::this_thread::sleep_for(100ms);
  }
  Candidate& leader = a.elector->isLeader() ? a : b;
  Candidate& other = &leader == &a ? b : a;
  EXPECT_EQ(leader.started.load(), 1);
  EXPECT_EQ(other.started.load(), 0);
  Object lease = client_->get(r::kLeases, ns, "test-lease");
  EXPECT_EQ(jsonString(lease.json, "/spec/holderIdentity"), leader.id);

  auto stoppedAt = std::chrono::steady_clock::now();
  leader.stop.cancel();
  leader.thread.join();
  EXPECT_EQ(leader.stopped.load(), 1);
  ASSERT_TRUE(eventually([&] { return other.elector->isLeader(); }, 10s));
  auto took = std::chrono::steady_clock::now() - stoppedAt;
  EXPECT_GE(took, 1500ms) << "took over a lease that had not expired";
  lease = client_->get(r::kLeases, ns, "test-lease");
  EXPECT_EQ(jsonString(lease.json, "/spec/holderIdentity"), other.id);
  EXPECT_EQ(jsonString(lease.json, "/spec/leaseTransitions"), "1");
  other.stop.cancel();
  other.thread.join();
}

TEST_F(Kube, LeaderGivesUpWhenTheLeaseIsTakenFromIt) {
  const std::string ns = makeNamespace("stolen");
  LeaderElectionOptions o;
  o.leaseNamespace = ns;
  o.leaseName = "l";
  o.identity = "victim";
  o.leaseDuration = 3s;
  o.renewDeadline = 1s;
  o.retryPeriod = 100ms;
  std::atomic<bool> stoppedLeading{false};
  LeaderCallbacks cb;
  cb.onStoppedLeading = [&] { stoppedLeading = true; };
  LeaderElector elector(client_, o, cb);
  Cancellation stop;
  std::atomic<bool> lost{false};
  std::thread t([&] { lost = elector.run(stop); });
  ASSERT_TRUE(eventually([&] { return elector.isLeader(); }, 5s));
  // Someone else writes the lease (as a partitioned-away leader would find on return).
  ASSERT_TRUE(eventually(
      [&] {
        try {
          client_->mergePatch(r::kLeases, ns, "l",
                              R"({"spec":{"holderIdentity":"thief","renewTime":")" +
                                  formatMicroTime(std::chrono::system_clock::now()) + R"("}})");
          return true;
        } catch (const ApiError&) {
          return false;
        }
      },
      5s));
  EXPECT_TRUE(eventually([&] { return stoppedLeading.load(); }, 5s));
  t.join();
  EXPECT_TRUE(lost.load()) << "run() must report a lost lease";
  EXPECT_FALSE(elector.isLeader());
  EXPECT_EQ(elector.leader(), "thief");
}

TEST_F(Kube, OperatorBinaryLogsRpcJobs) {
  ensureCrd();
  const std::string ns = makeNamespace("binary");
  std::string log = ControlPlaneEnvironment::plane()->dir() + "/operator.log";
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    dup2(fd, 1);
    std::string kc = ControlPlaneEnvironment::plane()->kubeconfig();
    execl(RPCJOB_OPERATOR_BINARY, "rpcjob-operator", "--kubeconfig", kc.c_str(), "--namespace",
          ns.c_str(), "--leader-elect", "--lease-namespace", ns.c_str(), "--id", "op-1",
          "--metrics-address", "127.0.0.1", "--metrics-port", "0", static_cast<char*>(nullptr));
    _exit(127);
  }
  auto logText = [&] {
    std::ifstream in(log);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  client_->create(
      r::kRpcJobs, ns,
      R"({"apiVersion":"rpcjob.dev/v1alpha1","kind":"RpcJob","metadata":{"name":"seen"},)"
      R"("spec":{"workers":[{"name":"master","replicas":1}]}})");
  bool logged = eventually(
      [&] { return logText().find("reconcile: " + ns + "/seen") != std::string::npos; }, 20s);
  bool leased = client_->tryGet(r::kLeases, ns, "rpcjob-operator").has_value();
  // /metrics, /healthz, /readyz on the port the log names.
  std::string text = logText();
  const std::string marker = "/readyz on 127.0.0.1:";
  auto at = text.find(marker);
  ASSERT_NE(at, std::string::npos) << text;
  std::string port = text.substr(at + marker.size(), text.find('\n', at) - at - marker.size());
  std::string metricsBody, ready;
  rpcjob::testing::runCommand("curl -s http://127.0.0.1:" + port + "/metrics", &metricsBody);
  rpcjob::testing::runCommand(
      "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:" + port + "/readyz", &ready);
  EXPECT_NE(metricsBody.find("rpcjob_operator_reconciles_total{result=\"success\"}"),
            std::string::npos)
      << metricsBody;
  EXPECT_NE(metricsBody.find("rpcjob_operator_leader 1"), std::string::npos) << metricsBody;
  EXPECT_NE(metricsBody.find("rpcjob_operator_jobs{state=\"Pending\"} 1"), std::string::npos)
      << metricsBody;
  EXPECT_EQ(ready, "200");
  kill(pid, SIGTERM);
  int status = 0;
  bool exited = eventually([&] { return waitpid(pid, &status, WNOHANG) == pid; }, 10s);
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  EXPECT_TRUE(logged) << logText();
  EXPECT_TRUE(leased);
  EXPECT_TRUE(exited) << "no exit 10 s after SIGTERM";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << logText();
}

// The controller seam: RpcJob events and events of objects it controls reach the
// Reconciler as the job's key; a throwing reconcile is retried.
TEST_F(Kube, ControllerReconcilesJobsAndTheirChildren) {
  ensureCrd();
  const std::string ns = makeNamespace("controller");
  struct Counting : op::Reconciler {
    std::mutex mu;
    std::map<std::string, int> calls;
    std::atomic<int> failuresLeft{2};
    op::ReconcileResult reconcile(const std::string& key, const op::Caches& caches) override {
      {
        std::lock_guard<std::mutex> lock(mu);
        ++calls[key];
      }
      if (caches.jobs.get(key) && key.find("flaky") != std::string::npos && failuresLeft-- > 0) {
        throw std::runtime_error("transient");
      }
      return {};
    }
    int count(const std::string& key) {
      std::lock_guard<std::mutex> lock(mu);
      return calls[key];
    }
  } reconciler;
  op::ControllerOptions co;
  co.ns = ns;
  co.queue.baseDelay = 10ms;
  op::Controller controller(client_, reconciler, co);
  Cancellation stop;
  std::thread runner([&] { controller.run(stop); });
  auto job = [&](const std::string& name) {
    return client_->create(
        r::kRpcJobs, ns,
        R"({"apiVersion":"rpcjob.dev/v1alpha1","kind":"RpcJob","metadata":{"name":")" + name +
            R"("},"spec":{"workers":[{"name":"master","replicas":1}]}})");
  };
  Object j = job("j");
  job("flaky");
  const std::string key = ns + "/j";
  EXPECT_TRUE(eventually([&] { return reconciler.count(key) >= 1; }, 10s));
  EXPECT_TRUE(eventually([&] { return reconciler.count(ns + "/flaky") >= 3; }, 10s))
      << "a failed reconcile was not retried";

  // A ConfigMap the job controls wakes the job up.
  int before = reconciler.count(key);
  client_->create(r::kConfigMaps, ns,
                  R"({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"child",)"
                  R"("ownerReferences":[{"apiVersion":"rpcjob.dev/v1alpha1","kind":"RpcJob",)"
                  R"("name":"j","uid":")" +
                      j.metadata.uid + R"(","controller":true}]}})");
  EXPECT_TRUE(eventually([&] { return reconciler.count(key) > before; }, 10s));
  EXPECT_TRUE(eventually(
      [&] { return controller.caches().configMaps.listOwnedBy(j.metadata.uid).size() == 1; }, 10s));
  stop.cancel();
  runner.join();
}

// Last: restarts kube-apiserver under a running informer, which must recover.
TEST_F(Kube, InformerRecoversFromApiserverRestart) {
  const std::string ns = makeNamespace("restart");
  InformerOptions o;
  o.ns = ns;
  o.backoff = Backoff::Options().setInitial(200ms).setMax(2s);
  Informer informer(client_, r::kConfigMaps, o);
  informer.start();
  ASSERT_TRUE(informer.waitForSync(10s));
  client_->create(r::kConfigMaps, ns, configMap("before", "1"));
  ASSERT_TRUE(eventually([&] { return informer.cache().get(ns + "/before") != nullptr; }, 10s));

  ControlPlaneEnvironment::plane()->restartApiserver();
  client_->create(r::kConfigMaps, ns, configMap("after", "1"));
  client_->remove(r::kConfigMaps, ns, "before");
  EXPECT_TRUE(eventually(
      [&] {
        return informer.cache().get(ns + "/after") != nullptr &&
               informer.cache().get(ns + "/before") == nullptr;
      },
      30s))
      << "errors " << informer.stats().errors << ", watches " << informer.stats().watches;
  EXPECT_GE(informer.stats().watches, 2);
  informer.stop();
}

// The CRD bounds a group at 1024 workers (its `maximum`; the bound on the total
// across groups is a CEL rule, which v1.20 drops: api/'s validator refuses that,
// api/validate_test). The largest job it admits fits: created through the API
// server, planned as the operator plans it on 128 nodes, its worker table stored
// in one ConfigMap and read back as the runtime reads it.
TEST_F(Kube, TheLargestJobFitsAndOneWorkerMoreIsRefused) {
  ensureCrd();
  const std::string ns = makeNamespace("large");
  const auto jobJson = [](const std::string& name, int replicas) {
    return R"({"apiVersion":"rpcjob.dev/v1alpha1","kind":"RpcJob","metadata":{"name":")" + name +
           R"("},"spec":{"workers":[{"name":"trainer","replicas":)" + std::to_string(replicas) +
           R"(,"gpusPerWorker":1,"template":{"spec":{"containers":[{"name":"worker",)"
           R"("image":"ghcr.io/rpcjob/rpcjob-worker:latest","resources":{"requests":)"
           R"({"cpu":"500m","memory":"1Gi"}}}]}}}]}})";
  };
  try {
    client_->create(r::kRpcJobs, ns, jobJson("too-big", 1025));
    FAIL() << "a group of 1025 workers was accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code(), 422) << e.what();
    EXPECT_NE(std::string(e.what()).find("1024"), std::string::npos) << e.what();
  }
  const Object stored = client_->create(r::kRpcJobs, ns, jobJson("big", 1024));
  api::ParseResult parsed = api::parseRpcJob(stored.json);
  ASSERT_TRUE(parsed.ok()) << api::formatErrors(parsed.errors);
  parsed.job.metadata.namespaceName = ns;
  planner::ClusterView cluster;
  for (int i = 0; i < 128; ++i) {
    planner::Node n;
    n.name = "gpu-node-" + std::to_string(i);
    n.allocatable = {8, 64000, int64_t{512} << 30, 0};
    cluster.nodes.push_back(n);
  }
  const planner::Plan plan = planner::planJob(parsed.job, cluster);
  ASSERT_TRUE(plan.planned()) << plan.message;
  const std::string cm = op::configMapJson({"big", ns, stored.metadata.uid}, plan.assignment);
  EXPECT_LT(cm.size(), std::size_t{256} << 10) << "a quarter of the 1 MiB object limit at most";
  client_->create(r::kConfigMaps, ns, cm);
  const Object got = client_->get(r::kConfigMaps, ns, op::assignmentConfigMapName("big"));
  const Assignment read =
      parseAssignment(jsonString(got.json, "/data/assignment.yaml").value_or(""));
  EXPECT_EQ(read.worldSize(), 1024);
  EXPECT_TRUE(read == plan.assignment);
}

}  // namespace
}  // namespace rpcjob::kube
