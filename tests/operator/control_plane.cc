#include "control_plane.h"

#include <stdlib.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "rpcjob/operator/config.h"
#include "rpcjob/operator/errors.h"
#include "rpcjob/operator/object.h"
#include "rpcjob/operator/resource.h"

namespace rpcjob::testing {

namespace {
std::string scriptPath() {
  return std::string(RPCJOB_SOURCE_DIR) + "/tests/kube/control-plane.sh";
}
}  // namespace

bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout,
                std::chrono::milliseconds interval) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(interval);
  }
  return pred();
}

bool eventuallyThroughApiErrors(const std::function<bool()>& pred,
                                std::chrono::milliseconds timeout) {
  return eventually(
      [&pred] {
        try {
          return pred();
        } catch (const kube::ApiError&) {
          return false;
        }
      },
      timeout, std::chrono::milliseconds(100));
}

int runCommand(const std::string& command, std::string* output) {
  std::FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (!p) return -1;
  std::array<char, 4096> buf;
  std::string out;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  if (output) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string ControlPlane::unavailableReason() {
  std::string bin;
  if (runCommand(scriptPath() + " bin-dir", &bin) != 0) return "control-plane.sh failed";
  while (!bin.empty() && (bin.back() == '\n')) bin.pop_back();
  for (const char* b : {"/kube-apiserver", "/kube-controller-manager"}) {
    if (access((bin + b).c_str(), X_OK) != 0) {
      return "kube-apiserver is not built (" + bin + b +
             " missing): run tests/kube/control-plane.sh build (scripts/test.sh does)";
    }
  }
  if (runCommand("command -v etcd >/dev/null") != 0) return "etcd is not installed (etcd-server)";
  return "";
}

std::string ControlPlane::script() const {
  return scriptPath();
}

ControlPlane::ControlPlane() {
  std::string t = (std::filesystem::temp_directory_path() / "rpcjob-kube-XXXXXX").string();
  if (!mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
  dir_ = t;
  std::string out;
  std::string cmd =
      "RPCJOB_KUBE_OWNER_PID=" + std::to_string(getpid()) + " " + script() + " start " + dir_;
  if (runCommand(cmd, &out) != 0) {
    runCommand(script() + " stop " + dir_);
    throw std::runtime_error("control-plane.sh start failed:\n" + out);
  }
  url_ = kube::loadKubeconfig(kubeconfig()).server;
}

ControlPlane::~ControlPlane() {
  runCommand(script() + " stop " + dir_);
  if (std::getenv("RPCJOB_KEEP_KUBE_DIR") == nullptr) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

void ControlPlane::restartApiserver() {
  std::string out;
  if (runCommand(script() + " restart-apiserver " + dir_, &out) != 0) {
    throw std::runtime_error("restart-apiserver failed:\n" + out);
  }
}

std::shared_ptr<kube::Client> ControlPlane::adminClient(kube::ClientOptions o) const {
  return kube::Client::fromConfig(kube::loadKubeconfig(kubeconfig()), o);
}

std::shared_ptr<kube::Client> ControlPlane::nogroupClient() const {
  return kube::Client::fromConfig(kube::loadKubeconfig(nogroupKubeconfig()));
}

bool podsAdmittedIn(kube::Client& client, const std::string& ns) {
  const auto account = client.tryGet(kube::resources::kServiceAccounts, ns, "default");
  return account && kube::jsonString(account->json, "/secrets/0/name").has_value();
}

void createRpcJobCrd(kube::Client& client) {
  std::ifstream in(std::string(RPCJOB_SOURCE_DIR) + "/crds/rpcjob.yaml");
  std::stringstream yaml;
  yaml << in.rdbuf();
  try {
    client.create(kube::resources::kCustomResourceDefinitions, "", kube::yamlToJson(yaml.str()));
  } catch (const kube::ApiError& e) {
    if (!e.alreadyExists()) throw;
  }
}

namespace {
std::unique_ptr<ControlPlane> gPlane;
std::string gSkipReason;
std::string gStartError;
}  // namespace

void ControlPlaneEnvironment::SetUp() {
  gSkipReason = ControlPlane::unavailableReason();
  if (!gSkipReason.empty()) return;
  try {
    gPlane = std::make_unique<ControlPlane>();
  } catch (const std::exception& e) {
    gStartError = e.what();
  }
}

void ControlPlaneEnvironment::TearDown() {
  gPlane.reset();
}

ControlPlane* ControlPlaneEnvironment::plane() {
  return gPlane.get();
}

const std::string& ControlPlaneEnvironment::skipReason() {
  return gSkipReason;
}

const std::string& ControlPlaneEnvironment::startError() {
  return gStartError;
}

}  // namespace rpcjob::testing
