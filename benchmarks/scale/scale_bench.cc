// rpcjob-scale-bench: a large RpcJob through the real control plane (etcd,
// kube-apiserver, kube-controller-manager of tests/kube) and the real
// rpcjob-operator binary. For 64, 256 and 1024 single-GPU workers on nodes of 8
// GPUs, with workersPerPod 1 (a pod per worker) and Auto (a pod per node, its
// workers run by rpcjob-launch), it prints the time from creating the RpcJob to
// all of its pods existing, and the operator's peak RSS, beside issue 18's
// target (memory under 256 MiB while reconciling 1024 workers). The kubelet is
// absent: pods are created, never run.
//
//   rpcjob-scale-bench [--workers 64,256,1024] [--layouts 1,Auto]
//
// Not a test: it asserts nothing and takes about a minute.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "control_plane.h"
#include "rpcjob/operator/client.h"
#include "rpcjob/operator/errors.h"
#include "rpcjob/operator/object.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace r = rpcjob::kube::resources;

constexpr int kGpusPerNode = 8;
constexpr double kTargetRssMiB = 256;

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(item);
  return out;
}

// VmRSS or VmHWM of a process, in MiB; 0 when gone.
double memoryMiB(pid_t pid, const std::string& key) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stod(line.substr(key.size() + 1)) / 1024.0;
  }
  return 0;
}

pid_t startOperator(const std::string& kubeconfig, const std::string& ns, const std::string& log) {
  std::fflush(stdout);  // else the child writes our buffered lines again
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* f = std::freopen(log.c_str(), "w", stdout);
    if (f) dup2(fileno(stdout), 2);
    execl(RPCJOB_OPERATOR_BINARY, "rpcjob-operator", "--kubeconfig", kubeconfig.c_str(),
          "--namespace", ns.c_str(), "--metrics-port", "-1", static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

void stopOperator(pid_t pid) {
  kill(pid, SIGTERM);
  for (int i = 0; i < 100; ++i) {
    if (waitpid(pid, nullptr, WNOHANG) == pid) return;
    std::this_thread::sleep_for(100ms);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

std::string jobJson(const std::string& name, const std::string& ns, int workers,
                    const std::string& layout) {
  const std::string tmpl = R"({"spec":{"nodeSelector":{"rpcjob.test/ns":")" + ns +
                           R"("},"containers":[{"name":"worker","image":"rpcjob-worker",)"
                           R"("command":["rpcjob-worker"],"args":["serve"]}]}})";
  return R"({"apiVersion":"rpcjob.dev/v1alpha1","kind":"RpcJob","metadata":{"name":")" + name +
         R"("},"spec":{"workers":[{"name":"worker","replicas":)" + std::to_string(workers) +
         R"(,"gpusPerWorker":1,"template":)" + tmpl + R"(}],"placement":{"workersPerPod":")" +
         layout + R"("}}})";
}

size_t podCount(rpcjob::kube::Client& client, const std::string& ns, const std::string& job) {
  rpcjob::kube::ListOptions o;
  o.labelSelector = "rpcjob.dev/job-name=" + job;
  return client.list(r::kPods, ns, o).items.size();
}

bool waitFor(const std::function<bool()>& done, std::chrono::seconds timeout) {
  const auto end = Clock::now() + timeout;
  while (Clock::now() < end) {
    try {
      if (done()) return true;
    } catch (const rpcjob::kube::ApiError&) {
    }
    std::this_thread::sleep_for(50ms);
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> sizes = {"64", "256", "1024"};
  std::vector<std::string> layouts = {"1", "Auto"};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i];
    if (arg == "--workers")
      sizes = split(argv[i + 1]);
    else if (arg == "--layouts")
      layouts = split(argv[i + 1]);
    else {
      std::cerr << "usage: rpcjob-scale-bench [--workers 64,256,1024] [--layouts 1,Auto]\n";
      return 2;
    }
  }
  const std::string unavailable = rpcjob::testing::ControlPlane::unavailableReason();
  if (!unavailable.empty()) {
    std::cerr << "rpcjob-scale-bench: " << unavailable << "\n";
    return 2;
  }
  std::cerr << "starting the control plane...\n";
  rpcjob::testing::ControlPlane plane;
  auto client = plane.adminClient();
  {
    std::ifstream in(std::string(RPCJOB_SOURCE_DIR) + "/crds/rpcjob.yaml");
    std::stringstream yaml;
    yaml << in.rdbuf();
    client->create(r::kCustomResourceDefinitions, "", rpcjob::kube::yamlToJson(yaml.str()));
    // Served once the CRD is established (a list that does not throw).
    waitFor(
        [&] {
          client->list(r::kRpcJobs, "default");
          return true;
        },
        30s);
  }

  std::printf("%-8s %-6s %6s %6s %22s %20s %14s\n", "workers", "layout", "nodes", "pods",
              "create -> all pods (s)", "operator peak RSS", "target RSS");
  int caseNo = 0;
  for (const auto& layout : layouts) {
    for (const auto& size : sizes) {
      const int workers = std::stoi(size);
      const int nodes = (workers + kGpusPerNode - 1) / kGpusPerNode;
      const std::string ns = "scale-" + std::to_string(++caseNo);
      client->create(r::kNamespaces, "",
                     R"({"apiVersion":"v1","kind":"Namespace","metadata":{"name":")" + ns + "\"}}");
      waitFor([&] { return rpcjob::testing::podsAdmittedIn(*client, ns); }, 60s);
      std::vector<std::string> nodeNames;
      for (int n = 0; n < nodes; ++n) {
        const std::string name = ns + "-node-" + std::to_string(n);
        client->create(r::kNodes, "",
                       R"({"apiVersion":"v1","kind":"Node","metadata":{"name":")" + name +
                           R"(","labels":{"kubernetes.io/hostname":")" + name +
                           R"(","rpcjob.test/ns":")" + ns + R"("}}})");
        client->patchStatus(
            r::kNodes, "", name,
            R"({"status":{"capacity":{"nvidia.com/gpu":"8","cpu":"64","memory":"512Gi","pods":"110"},)"
            R"("allocatable":{"nvidia.com/gpu":"8","cpu":"64","memory":"512Gi","pods":"110"},)"
            R"("conditions":[{"type":"Ready","status":"True","reason":"KubeletReady"}]}})");
        nodeNames.push_back(name);
      }
      // kube-controller-manager taints a new node not-ready (NoSchedule) until it
      // has seen it Ready: wait for that, so the time below is the operator's.
      waitFor(
          [&] {
            rpcjob::kube::ListOptions o;
            o.labelSelector = "rpcjob.test/ns=" + ns;
            const auto list = client->list(r::kNodes, "", o).items;
            return list.size() == nodeNames.size() &&
                   std::none_of(list.begin(), list.end(), [](const rpcjob::kube::Object& n) {
                     return rpcjob::kube::jsonString(n.json, "/spec/taints/0/key").has_value();
                   });
          },
          120s);
      const std::string log = plane.dir() + "/operator-" + ns + ".log";
      const pid_t op = startOperator(plane.kubeconfig(), ns, log);
      // Warm up: the operator's caches synced and a first job reconciled.
      client->create(r::kRpcJobs, ns, jobJson("warmup", ns, 1, layout));
      const bool warm = waitFor([&] { return podCount(*client, ns, "warmup") == 1; }, 60s);

      const size_t pods = layout == "Auto" ? static_cast<size_t>(nodes) : workers;
      double peak = 0;
      const auto start = Clock::now();
      client->create(r::kRpcJobs, ns, jobJson("big", ns, workers, layout));
      const bool done = warm && waitFor(
                                    [&] {
                                      peak = std::max(peak, memoryMiB(op, "VmRSS"));
                                      return podCount(*client, ns, "big") == pods;
                                    },
                                    300s);
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      peak = std::max(peak, memoryMiB(op, "VmHWM"));
      char timeText[32], rssText[32], target[32];
      std::snprintf(timeText, sizeof timeText, done ? "%.2f" : "timeout (%.0f)", seconds);
      std::snprintf(rssText, sizeof rssText, "%.1f MiB", peak);
      std::snprintf(target, sizeof target, "< %.0f MiB", kTargetRssMiB);
      std::printf("%-8d %-6s %6d %6zu %22s %20s %14s\n", workers, layout.c_str(), nodes, pods,
                  timeText, rssText, target);
      std::fflush(stdout);
      stopOperator(op);
      for (const auto& n : nodeNames) client->removeIfExists(r::kNodes, "", n);
    }
  }
  return 0;
}
