#pragma once
// A real control plane (etcd, kube-apiserver, kube-controller-manager) for a
// test binary, through tests/kube/control-plane.sh. Start it once per binary
// (a gtest Environment), never per test: it takes ~10 s.

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "rpcjob/operator/client.h"

namespace rpcjob::testing {

class ControlPlane {
 public:
  // Empty when the binaries are built; else why not (tests then GTEST_SKIP).
  static std::string unavailableReason();

  // Starts in a fresh temp dir. Throws std::runtime_error on failure (with the
  // script's output). A watchdog stops the processes if this process dies.
  ControlPlane();
  ~ControlPlane();  // stops and removes the temp dir

  void restartApiserver();  // same port and etcd data

  const std::string& dir() const { return dir_; }
  const std::string& url() const { return url_; }
  std::string kubeconfig() const { return dir_ + "/kubeconfig"; }
  std::string nogroupKubeconfig() const { return dir_ + "/kubeconfig-nogroup"; }

  std::shared_ptr<kube::Client> adminClient(kube::ClientOptions o = {}) const;
  std::shared_ptr<kube::Client> nogroupClient() const;

 private:
  std::string script() const;
  std::string dir_;
  std::string url_;
};

// One control plane for a whole test binary: register it with
// ::testing::AddGlobalTestEnvironment(new ControlPlaneEnvironment). Tests skip with
// skipReason() when the binaries are not built, and fail with startError() when they
// are but the control plane did not come up.
class ControlPlaneEnvironment : public ::testing::Environment {
 public:
  void SetUp() override;
  void TearDown() override;
  static ControlPlane* plane();  // null when skipped or failed
  static const std::string& skipReason();
  static const std::string& startError();
};

// Whether namespace `ns` accepts Pods: on v1.20 the ServiceAccount admission plugin
// wants the `default` ServiceAccount *and* its token Secret, which
// kube-controller-manager adds a moment after creating the account (until then a
// Pod create fails with 500 "No API token found for service account").
bool podsAdmittedIn(kube::Client& client, const std::string& ns);

// Creates the RpcJob CRD (crds/rpcjob.yaml) unless it exists. Created, not
// server-side applied: v1.20's apply refuses a CRD with x-kubernetes-validations
// (CEL, 1.25+), a create drops them. It serves a moment later: wait for a list.
void createRpcJobCrd(kube::Client& client);

// Polls `pred` every `interval` until it holds or `timeout` passes (then asks
// once more). An exception from `pred` ends the wait and fails the test.
bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout,
                std::chrono::milliseconds interval = std::chrono::milliseconds(50));
// The same, where an ApiError means "not yet" (the API server may be
// restarting, as it is in the end-to-end tests), polled every 100 ms.
bool eventuallyThroughApiErrors(const std::function<bool()>& pred,
                                std::chrono::milliseconds timeout);

// Runs a shell command; returns its exit status and fills `output`.
int runCommand(const std::string& command, std::string* output = nullptr);

}  // namespace rpcjob::testing
