#pragma once
// The end-to-end fixture shared by e2e_test.cc and scenarios_test.cc (one
// binary, one control plane): the real rpcjob-operator binary as a child
// process, fake GPU Nodes made through the API, the kubelet played by patching
// pod status. Every test has its own namespace, its own nodes (selected by a
// label, so jobs of one test never land on another's) and its own operator.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "control_plane.h"
#include "rpcjob/assignment/assignment.h"
#include "rpcjob/operator/client.h"

namespace rpcjob::kube::e2e {

using namespace std::chrono_literals;
namespace r = resources;

using rpcjob::testing::ControlPlaneEnvironment;

// The API server may restart under these tests: an ApiError means "not yet".
using rpcjob::testing::eventuallyThroughApiErrors;

// The operator binary, started for one test; SIGTERM (Lease released) on scope exit.
class OperatorProcess {
 public:
  OperatorProcess(const std::string& ns, const std::string& id,
                  std::vector<std::string> extraArgs = {})
      : ns_(ns), id_(id), extraArgs_(std::move(extraArgs)) {
    log_ = ControlPlaneEnvironment::plane()->dir() + "/operator-" + id + ".log";
    spawn(O_TRUNC);
  }
  ~OperatorProcess() { stop(); }
  // What the chart's Deployment does when the operator exits: starts it again.
  // An operator that loses its Lease exits (1) on purpose, so that a reconcile
  // in flight never acts beside a new leader; an API server slow to come back
  // (seconds under a loaded CI machine) can outlast its renew deadline. Returns
  // the exit it restarted after ("" when it was still running).
  std::string restartIfExited() {
    int status = 0;
    if (pid_ <= 0 || waitpid(pid_, &status, WNOHANG) != pid_) return "";
    std::string how = WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                        : "signal " + std::to_string(WTERMSIG(status));
    spawn(O_APPEND);
    return how;
  }

  // SIGKILL: no Lease release, no clean-up, whatever it was doing.
  void kill9() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  // SIGTERM; true when it exited 0 within 10 s.
  bool stop() {
    if (pid_ <= 0) return true;
    kill(pid_, SIGTERM);
    int status = 0;
    bool exited =
        eventuallyThroughApiErrors([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, 10s);
    if (!exited) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    }
    pid_ = -1;
    return exited && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  std::string log() const {
    std::ifstream in(log_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  void spawn(int mode) {
    pid_ = fork();
    if (pid_ == 0) {
      int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | mode, 0644);
      dup2(fd, 2);
      dup2(fd, 1);
      std::string kc = ControlPlaneEnvironment::plane()->kubeconfig();
      setenv("POD_NAME", id_.c_str(), 1);
      std::vector<std::string> args = {"rpcjob-operator",
                                       "--kubeconfig",
                                       kc,
                                       "--namespace",
                                       ns_,
                                       "--leader-elect",
                                       "--leader-election-namespace",
                                       ns_,
                                       "--metrics-address",
                                       "127.0.0.1",
                                       "--metrics-port",
                                       "0"};
      args.insert(args.end(), extraArgs_.begin(), extraArgs_.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(RPCJOB_OPERATOR_BINARY, argv.data());
      _exit(127);
    }
  }

  std::string ns_, id_;
  std::vector<std::string> extraArgs_;
  pid_t pid_ = -1;
  std::string log_;
};

class E2e : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ControlPlaneEnvironment::skipReason().empty())
      GTEST_SKIP() << ControlPlaneEnvironment::skipReason();
    ASSERT_NE(ControlPlaneEnvironment::plane(), nullptr)
        << "control plane did not start: " << ControlPlaneEnvironment::startError();
    client_ = ControlPlaneEnvironment::plane()->adminClient();
    ensureCrd();
    ns_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (auto& c : ns_) c = static_cast<char>(std::tolower(c));
    ns_ = ns_.substr(0, 40);
    client_->create(r::kNamespaces, "",
                    R"({"apiVersion":"v1","kind":"Namespace","metadata":{"name":")" + ns_ + "\"}}");
    // Pods are refused until kube-controller-manager made the default ServiceAccount.
    ASSERT_TRUE(eventuallyThroughApiErrors(
        [&] { return rpcjob::testing::podsAdmittedIn(*client_, ns_); }, 30s));
  }
  void TearDown() override {
    for (const auto& n : nodes_) client_->removeIfExists(r::kNodes, "", n);
  }

  void ensureCrd() {
    static bool done = false;
    if (done) return;
    rpcjob::testing::createRpcJobCrd(*client_);
    ASSERT_TRUE(eventuallyThroughApiErrors(
        [&] {
          client_->list(r::kRpcJobs, "default");
          return true;
        },
        30s));
    done = true;
  }

  // A fake GPU node: created, then its status patched as a kubelet would.
  void addNode(const std::string& suffix, int gpus) {
    const std::string name = ns_.substr(0, 20) + "-" + suffix;
    client_->create(r::kNodes, "",
                    R"({"apiVersion":"v1","kind":"Node","metadata":{"name":")" + name +
                        R"(","labels":{"kubernetes.io/hostname":")" + name +
                        R"(","rpcjob.test/ns":")" + ns_ + R"("}}})");
    client_->patchStatus(
        r::kNodes, "", name,
        R"({"status":{"capacity":{"nvidia.com/gpu":")" + std::to_string(gpus) +
            R"(","cpu":"64","memory":"512Gi","pods":"110"},"allocatable":{"nvidia.com/gpu":")" +
            std::to_string(gpus) +
            R"(","cpu":"64","memory":"512Gi","pods":"110"},"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady"}]}})");
    nodes_.push_back(name);
  }

  std::string jobJson(const std::string& name, int workers, int gpus,
                      const std::string& runPolicy = "{}") const {
    const std::string tmpl = R"({"spec":{"nodeSelector":{"rpcjob.test/ns":")" + ns_ +
                             R"("},"containers":[{"name":"w","image":"rpcjob-worker"}]}})";
    return R"({"apiVersion":"rpcjob.dev/v1alpha1","kind":"RpcJob","metadata":{"name":")" + name +
           R"("},"spec":{"workers":[{"name":"master","gpusPerWorker":)" + std::to_string(gpus) +
           R"(,"template":)" + tmpl + R"(},{"name":"worker","replicas":)" +
           std::to_string(workers) + R"(,"gpusPerWorker":)" + std::to_string(gpus) +
           R"(,"template":)" + tmpl + R"(}],"runPolicy":)" + runPolicy + "}}";
  }

  std::string field(const std::string& job, const std::string& pointer) {
    auto o = client_->tryGet(r::kRpcJobs, ns_, job);
    return o ? jsonString(o->json, pointer).value_or("") : "";
  }
  std::string phase(const std::string& job) { return field(job, "/status/phase"); }
  // "True/Reason" of a condition, "" when absent.
  std::string condition(const std::string& job, const std::string& type) {
    for (int i = 0; i < 8; ++i) {
      std::string p = "/status/conditions/" + std::to_string(i);
      if (field(job, p + "/type") == type) {
        return field(job, p + "/status") + "/" + field(job, p + "/reason");
      }
    }
    return "";
  }
  std::vector<Object> pods(const std::string& job) {
    ListOptions o;
    o.labelSelector = "rpcjob.dev/job-name=" + job;
    return client_->list(r::kPods, ns_, o).items;
  }
  std::set<std::string> eventReasons() {
    std::set<std::string> out;
    for (const auto& e : client_->list(r::kEvents, ns_).items) {
      out.insert(jsonString(e.json, "/reason").value_or(""));
    }
    return out;
  }
  void setPodStatus(const std::string& pod, const std::string& status) {
    client_->patchStatus(r::kPods, ns_, pod, R"({"status":)" + status + "}");
  }
  void runAll(const std::string& job) {
    for (const auto& p : pods(job)) {
      setPodStatus(p.metadata.name,
                   R"({"phase":"Running","conditions":[{"type":"Ready","status":"True"}]})");
    }
  }

  std::shared_ptr<Client> client_;
  std::string ns_;
  std::vector<std::string> nodes_;
};

inline const std::string kFailed =
    R"({"phase":"Failed","containerStatuses":[{"name":"w","ready":false,"restartCount":0,"image":"rpcjob-worker","imageID":"","state":{"terminated":{"exitCode":3,"reason":"Error"}}}]})";

}  // namespace rpcjob::kube::e2e
