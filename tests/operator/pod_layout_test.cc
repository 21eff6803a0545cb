// The pods the operator builds, checked the way the NVIDIA device plugin and the
// runtime will see them: the device plugin shows a container only the GPUs that
// container asks for, as cuda:0..k-1 (CUDA_VISIBLE_DEVICES), so
//  - a pod's GPUs are all asked for by the one container that runs its workers,
//    ceil(shares / workersPerGpu) of them, and nothing else in the pod asks;
//  - every worker's GPUs and every device map it uses (local and peer side) name
//    devices its own container, and the peer's, sees;
//  - every worker of the pod is started by that container (itself, or once in
//    rpcjob-launch's spec), with the job secret's path, which that container mounts;
//  - channels are reported truthfully: CUDA IPC/NVLink only inside one pod;
//  - the GPUs the pods of a node ask for fit the node.
// Over examples/*.yaml and a grid of synthetic jobs (workersPerPod 1 and Auto,
// workersPerGpu 1..3, 0..2 GPUs per worker). Also the launcher's report as the
// operator reads it back (termination_report.h).

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "restricted_check.h"
#include "rpcjob/api/parse.h"
#include "rpcjob/assignment/environment.h"
#include "rpcjob/assignment/intra_op_threads.h"
#include "rpcjob/assignment/pair_links.h"
#include "rpcjob/assignment/pod_launch.h"
#include "rpcjob/operator/children.h"
#include "rpcjob/operator/job_security.h"
#include "rpcjob/operator/termination_report.h"
#include "rpcjob/planner/cluster.h"
#include "rpcjob/planner/plan.h"

namespace rpcjob::op {
namespace {

planner::Node gpuNode(const std::string& name, int gpus) {
  planner::Node n;
  n.name = name;
  n.allocatable.gpus = gpus;
  n.allocatable.cpuMilli = 64000;
  n.allocatable.memoryBytes = int64_t{256} << 30;
  return n;
}

planner::ClusterView cluster(int nodes, int gpusPerNode) {
  planner::ClusterView c;
  for (int i = 0; i < nodes; ++i)
    c.nodes.push_back(gpuNode("node-" + std::to_string(i), gpusPerNode));
  return c;
}

int gpuLimit(const YAML::Node& container) {
  const YAML::Node resources = container["resources"];
  if (!resources || !resources["limits"]) return 0;
  const YAML::Node limit = resources["limits"][planner::kGpuResource];
  return limit ? std::stoi(limit.Scalar()) : 0;
}

std::string envOf(const YAML::Node& container, const std::string& name) {
  for (const auto& e : container["env"]) {
    if (e["name"].Scalar() == name) return e["value"] ? e["value"].Scalar() : "";
  }
  return "";
}

// The first pod the operator makes for `manifest` (a job named `job`) on one CPU
// node, as YAML; the plan must have `pods` pods.
YAML::Node firstPod(const std::string& manifest, const std::string& job, size_t pods = 1) {
  const api::ParseResult parsed = api::parseRpcJob(manifest);
  EXPECT_TRUE(parsed.ok()) << api::formatErrors(parsed.errors);
  const planner::Plan plan = planner::planJob(parsed.job, cluster(1, 0), {});
  EXPECT_TRUE(plan.planned()) << plan.message;
  EXPECT_EQ(plan.pods.size(), pods);
  return YAML::Load(
      podJson({job, "ns", "uid"}, parsed.job.spec, plan, plan.pods.at(0), "node-0", 0));
}

// Whether the pod has the job's Secret as a volume and `container` mounts it,
// read-only, where RPCJOB_SECRET_FILE points.
bool mountsJobSecret(const YAML::Node& pod, const YAML::Node& container, const std::string& job) {
  bool volume = false;
  for (const auto& v : pod["spec"]["volumes"]) {
    volume |= v["name"].Scalar() == kSecretVolume && v["secret"] &&
              v["secret"]["secretName"].Scalar() == jobSecretName(job);
  }
  for (const auto& m : container["volumeMounts"]) {
    if (m["name"].Scalar() == kSecretVolume) {
      return volume && m["mountPath"].Scalar() == kSecretDir && m["readOnly"] &&
             m["readOnly"].as<bool>();
    }
  }
  return false;
}

bool hasCudaIpc(const std::vector<std::string>& channels) {
  for (const auto& c : channels) {
    if (c == "cuda_ipc" || c == "cuda_nvlink") return true;
  }
  return false;
}

// Checks every property above for one planned job; returns how many workers it
// checked (so a caller can tell the job was not empty).
int checkPods(const api::RpcJob& job, const planner::Plan& plan,
              const planner::ClusterView* cluster = nullptr) {
  const int sharing = std::max(1, job.spec.placement.workersPerGpu);
  std::map<std::string, int> visible;  // worker -> GPUs its container sees
  std::map<std::string, int> asked;    // node -> GPUs its pods ask for
  for (const auto& pod : plan.pods) {
    SCOPED_TRACE("pod " + pod.name);
    const YAML::Node json =
        YAML::Load(podJson({job.metadata.name, "ns", "uid"}, job.spec, plan, pod, pod.node, 0));
    const YAML::Node containers = json["spec"]["containers"];
    EXPECT_GE(containers.size(), 1u);
    int shares = 0;
    for (const auto& w : pod.workers)
      shares += static_cast<int>(plan.assignment.byName(w)->gpus.size());
    const int expected = (shares + sharing - 1) / sharing;
    EXPECT_EQ(gpuLimit(containers[0]), expected) << "the pod's GPUs, in its worker container";
    for (std::size_t i = 1; i < containers.size(); ++i) EXPECT_EQ(gpuLimit(containers[i]), 0);
    EXPECT_EQ(pod.requests.gpus, expected);

    std::vector<std::string> started;
    if (pod.workers.size() == 1) {
      started.push_back(envOf(containers[0], kEnvWorkerName));
      EXPECT_EQ(envOf(containers[0], kEnvSecretFile), kSecretPath);
    } else {
      EXPECT_EQ(containers[0]["command"][0].Scalar(), kLaunchProgram);
      for (const auto& w : parsePodLaunch(envOf(containers[0], kEnvPodWorkers)).workers) {
        started.push_back(w.name);
        int secretFiles = 0;
        for (const auto& [name, value] : w.env) {
          if (name != kEnvSecretFile) continue;
          ++secretFiles;
          EXPECT_EQ(value, kSecretPath) << w.name;
        }
        EXPECT_EQ(secretFiles, 1) << w.name << ": the job secret's path, once";
      }
    }
    EXPECT_TRUE(mountsJobSecret(json, containers[0], job.metadata.name))
        << "the container that starts the workers mounts the job's Secret";
    EXPECT_EQ(started, pod.workers) << "each worker started once, by its pod's container";
    for (const auto& w : pod.workers) visible[w] = gpuLimit(containers[0]);
    asked[pod.node] += gpuLimit(containers[0]);
  }
  // What the pods ask for fits the nodes (else the scheduler rejects one).
  for (std::size_t n = 0; cluster && n < cluster->nodes.size(); ++n) {
    EXPECT_LE(asked[cluster->nodes[n].name], cluster->nodes[n].allocatable.gpus)
        << "node " << cluster->nodes[n].name;
  }

  int checked = 0;
  for (const auto& e : plan.assignment.workers) {
    SCOPED_TRACE("worker " + e.name);
    ++checked;
    for (int g : e.gpus) {
      EXPECT_GE(g, 0);
      EXPECT_LT(g, visible[e.name]) << "a GPU its container does not see";
    }
    for (const auto& [peer, map] : deviceMapsOf(plan.assignment, e.name)) {
      for (const auto& [local, remote] : map) {
        const auto l = parseDevice(local);
        const auto r = parseDevice(remote);
        EXPECT_TRUE(l && r) << local << " -> " << remote;
        if (!l || !r) continue;
        EXPECT_LT(*l, visible[e.name]) << "map to " << peer << " names a local " << local;
        EXPECT_LT(*r, visible[peer]) << "map to " << peer << " names its " << remote;
      }
    }
    for (const auto& [peer, channels] : channelsOf(plan.assignment, e.name)) {
      const bool samePod = plan.assignment.byName(peer)->pod == e.pod;
      if (!samePod) {
        EXPECT_FALSE(hasCudaIpc(channels)) << "CUDA IPC across pods to " << peer;
      }
      if (samePod && !e.gpus.empty() && !plan.assignment.byName(peer)->gpus.empty()) {
        EXPECT_TRUE(hasCudaIpc(channels)) << "no CUDA IPC inside the pod to " << peer;
      }
    }
  }
  return checked;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(PodLayout, ModelSplitCudaAsksForBothGpusInOneContainer) {
  const api::ParseResult parsed = api::parseRpcJob(
      readFile(std::string(RPCJOB_SOURCE_DIR) + "/examples/model-split-cuda.yaml"));
  ASSERT_TRUE(parsed.ok()) << api::formatErrors(parsed.errors);
  const planner::Plan plan = planner::planJob(parsed.job, cluster(1, 8), {});
  ASSERT_TRUE(plan.planned()) << plan.message;
  ASSERT_EQ(plan.pods.size(), 1u);
  const YAML::Node pod = YAML::Load(
      podJson({"model-split-cuda", "ns", "uid"}, parsed.job.spec, plan, plan.pods[0], "node-0", 0));
  ASSERT_EQ(pod["spec"]["containers"].size(), 1u);
  EXPECT_EQ(gpuLimit(pod["spec"]["containers"][0]), 2);
  const PodLaunch launch = parsePodLaunch(envOf(pod["spec"]["containers"][0], kEnvPodWorkers));
  ASSERT_EQ(launch.workers.size(), 2u);
  EXPECT_EQ(launch.workers[1].name, "shard");
  EXPECT_EQ(launch.workers[1].argv, (std::vector<std::string>{"rpcjob-model-split", "--size",
                                                              "1000", "--iterations", "10"}));
  // The shard's map back to the master: its cuda:1 is the second GPU the container sees.
  const DeviceMap toShard = deviceMapsOf(plan.assignment, "master").at("shard");
  EXPECT_EQ(toShard, (DeviceMap{{"cuda:0", "cuda:1"}}));
  EXPECT_EQ(checkPods(parsed.job, plan), 2);
}

TEST(PodLayout, EveryExamplePlansPodsWhoseDeviceMapsTheirContainersSee) {
  int examples = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(RPCJOB_SOURCE_DIR) + "/examples")) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    const api::ParseResult parsed = api::parseRpcJob(readFile(entry.path()));
    ASSERT_TRUE(parsed.ok()) << api::formatErrors(parsed.errors);
    for (int nodes : {1, 2}) {
      for (int gpus : {1, 2, 8}) {
        const planner::ClusterView c = cluster(nodes, gpus);
        const planner::Plan plan = planner::planJob(parsed.job, c, {});
        if (!plan.planned()) continue;  // more GPUs than this cluster has
        EXPECT_GT(checkPods(parsed.job, plan, &c), 0);
        ++examples;
      }
    }
  }
  EXPECT_GE(examples, 4 * 3) << "each example plans on some of the clusters";
}

// Every example's pods, in a namespace of each Pod Security level: restricted in
// baseline and restricted namespaces; in a privileged one, restricted but for
// the capabilities the plan asks for (SYS_PTRACE for cma in a pod of several
// workers, IPC_LOCK for ibv/cuda_gdr), which are then added.
TEST(PodLayout, EveryExamplesPodsPassTheRestrictedChecks) {
  int pods = 0, withCapabilities = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(RPCJOB_SOURCE_DIR) + "/examples")) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    const api::ParseResult parsed = api::parseRpcJob(readFile(entry.path()));
    ASSERT_TRUE(parsed.ok()) << api::formatErrors(parsed.errors);
    for (int nodes : {1, 2}) {
      planner::ClusterView c = cluster(nodes, 8);
      for (auto& n : c.nodes) n.labels[planner::kRdmaLabel] = "true";  // ibv, cuda_gdr across pods
      const planner::Plan plan = planner::planJob(parsed.job, c, {});
      if (!plan.planned()) continue;
      for (const auto& pod : plan.pods) {
        for (PodSecurityLevel level : {PodSecurityLevel::Privileged, PodSecurityLevel::Baseline,
                                       PodSecurityLevel::Restricted}) {
          SCOPED_TRACE(pod.name + " in a " + toString(level) + " namespace");
          const YAML::Node json =
              YAML::Load(podJson({parsed.job.metadata.name, "ns", "uid"}, parsed.job.spec, plan,
                                 pod, pod.node, 0, level));
          const auto violations = testing::restrictedViolations(json);
          if (level != PodSecurityLevel::Privileged) {
            EXPECT_EQ(violations, std::vector<std::string>{});
            continue;
          }
          ++pods;
          std::vector<std::string> expected;
          for (const auto& cap : pod.capabilities) {
            expected.push_back("container " + json["spec"]["containers"][0]["name"].Scalar() +
                               " adds " + cap);
          }
          withCapabilities += expected.empty() ? 0 : 1;
          EXPECT_EQ(violations, expected);
        }
      }
    }
  }
  EXPECT_GT(pods, 8);
  EXPECT_GT(withCapabilities, 0) << "some example needs a capability (cma inside a pod)";
}

std::string syntheticJob(int gpusMaster, int replicas, int gpusWorker, const std::string& perPod,
                         int perGpu) {
  auto container = [](const std::string& args) {
    return "{spec: {containers: [{name: w, image: i, command: [rpcjob-worker], args: [" + args +
           "]}]}}";
  };
  return "apiVersion: rpcjob.dev/v1alpha1\nkind: RpcJob\nmetadata: {name: syn}\nspec:\n"
         "  workers:\n"
         "    - {name: master, gpusPerWorker: " +
         std::to_string(gpusMaster) + ", template: " + container("train") +
         "}\n"
         "    - {name: worker, replicas: " +
         std::to_string(replicas) + ", gpusPerWorker: " + std::to_string(gpusWorker) +
         ", template: " + container("serve") +
         "}\n"
         "  placement: {workersPerPod: " +
         perPod + ", workersPerGpu: " + std::to_string(perGpu) + "}\n";
}

TEST(PodLayout, SyntheticJobsWithAndWithoutGpuSharing) {
  int planned = 0;
  for (const char* perPod : {"1", "Auto"}) {
    for (int perGpu : {1, 2, 3}) {
      for (int gpusMaster : {0, 1, 2}) {
        for (int gpusWorker : {0, 1, 2}) {
          for (int replicas : {1, 3, 6}) {
            const std::string text = syntheticJob(gpusMaster, replicas, gpusWorker, perPod, perGpu);
            SCOPED_TRACE(text);
            const api::ParseResult parsed = api::parseRpcJob(text);
            if (!parsed.ok()) continue;  // combinations the CRD refuses (sharing > 1 GPU)
            for (int gpusPerNode : {2, 4, 8}) {
              const planner::ClusterView c = cluster(3, gpusPerNode);
              const planner::Plan plan = planner::planJob(parsed.job, c, {});
              if (!plan.planned()) continue;
              EXPECT_EQ(checkPods(parsed.job, plan, &c), 1 + replicas);
              ++planned;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(planned, 200) << "the grid plans most of its jobs";
}

TEST(PodLayout, WorkersSharingAGpuAskForItOnce) {
  const api::ParseResult parsed = api::parseRpcJob(syntheticJob(1, 3, 1, "Auto", 2));
  ASSERT_TRUE(parsed.ok()) << api::formatErrors(parsed.errors);
  const planner::Plan plan = planner::planJob(parsed.job, cluster(1, 8), {});
  ASSERT_TRUE(plan.planned()) << plan.message;
  ASSERT_EQ(plan.pods.size(), 1u);
  const YAML::Node pod =
      YAML::Load(podJson({"syn", "ns", "uid"}, parsed.job.spec, plan, plan.pods[0], "node-0", 0));
  EXPECT_EQ(gpuLimit(pod["spec"]["containers"][0]), 2) << "4 workers, 2 per GPU";
  EXPECT_EQ(plan.assignment.byName("master")->gpus, std::vector<int>{0});
  EXPECT_EQ(plan.assignment.byName("worker2")->gpus, std::vector<int>{1});
}

TEST(PodLayout, OneWorkerPodsKeepTheTemplateContainerAndReportCudaBasic) {
  const api::ParseResult parsed = api::parseRpcJob(syntheticJob(1, 1, 1, "1", 1));
  ASSERT_TRUE(parsed.ok()) << api::formatErrors(parsed.errors);
  const planner::Plan plan = planner::planJob(parsed.job, cluster(1, 8), {});
  ASSERT_TRUE(plan.planned()) << plan.message;
  ASSERT_EQ(plan.pods.size(), 2u);
  const YAML::Node pod =
      YAML::Load(podJson({"syn", "ns", "uid"}, parsed.job.spec, plan, plan.pods[1], "node-0", 0));
  const YAML::Node c = pod["spec"]["containers"][0];
  EXPECT_EQ(c["command"][0].Scalar(), "rpcjob-worker");
  EXPECT_EQ(envOf(c, kEnvWorkerName), "worker");
  EXPECT_EQ(gpuLimit(c), 1);
  EXPECT_EQ(plan.assignment.byName("worker")->gpus, std::vector<int>{0});
  const auto channels = channelsOf(plan.assignment, "master").at("worker");
  EXPECT_THAT(channels, ::testing::Contains("cuda_basic"));
  EXPECT_FALSE(hasCudaIpc(channels)) << "two pods on one node: no CUDA IPC between containers";
}

TEST(PodLayout, LauncherContainerSumsCpuAndMemory) {
  const std::string text =
      "apiVersion: rpcjob.dev/v1alpha1\nkind: RpcJob\nmetadata: {name: sum}\nspec:\n"
      "  workers:\n"
      "    - name: a\n"
      "      template: {spec: {containers: [{name: w, image: i, resources: {requests: {cpu: 500m, "
      "memory: 1Gi}, limits: {cpu: '1', memory: 2Gi}}, terminationMessagePath: /tmp/report, "
      "env: [{name: A, value: a}, {name: S, "
      "valueFrom: {secretKeyRef: {name: s, key: k}}}]}]}}\n"
      "    - name: b\n"
      "      replicas: 2\n"
      "      template: {spec: {containers: [{name: w, image: i, resources: {requests: {cpu: '1', "
      "memory: 1Gi}, limits: {cpu: '2', memory: 1Gi}}, env: [{name: B, value: b}]}]}}\n"
      "  placement: {workersPerPod: Auto}\n";
  const YAML::Node c = firstPod(text, "sum")["spec"]["containers"][0];
  EXPECT_EQ(c["resources"]["requests"]["cpu"].Scalar(), "2500m");
  EXPECT_EQ(c["resources"]["requests"]["memory"].Scalar(), std::to_string(int64_t{3} << 30));
  EXPECT_EQ(c["resources"]["limits"]["cpu"].Scalar(), "5000m");
  EXPECT_EQ(c["resources"]["limits"]["memory"].Scalar(), std::to_string(int64_t{4} << 30));
  EXPECT_FALSE(c["resources"]["limits"][planner::kGpuResource]) << "a CPU job asks for no GPU";
  // Literal env per worker (a group's own reach only its workers), valueFrom on the container.
  EXPECT_EQ(envOf(c, "A"), "");
  EXPECT_TRUE(c["env"][2]["valueFrom"]) << "the first group's secret stays with the kubelet";
  EXPECT_EQ(envOf(c, kEnvTerminationLog), "/tmp/report") << "the report where the kubelet reads";
  const PodLaunch launch = parsePodLaunch(envOf(c, kEnvPodWorkers));
  ASSERT_EQ(launch.workers.size(), 3u);
  EXPECT_EQ(launch.workers[0].env.front(), std::make_pair(std::string("A"), std::string("a")));
  EXPECT_EQ(launch.workers[2].env.front(), std::make_pair(std::string("B"), std::string("b")));
  EXPECT_EQ(launch.workers[2].argv, (std::vector<std::string>{"rpcjob-worker", "serve"}))
      << "no command: the worker program, as rpcjob run does";
}

// A one-worker pod with a CPU limit sizes libtorch's pool to it (intra_op_threads.h);
// without a limit, or with the template's own value, nothing is added.
TEST(PodLayout, OneWorkerPodsWithACpuLimitGetThatManyIntraOpThreads) {
  auto podOf = [](const std::string& container) {
    return firstPod(
        "apiVersion: rpcjob.dev/v1alpha1\nkind: RpcJob\nmetadata: {name: omp}\nspec:\n"
        "  workers:\n    - name: a\n      template: {spec: {containers: [" +
            container + "]}}\n",
        "omp")["spec"]["containers"][0];
  };
  const YAML::Node limited = podOf("{name: w, image: i, resources: {limits: {cpu: 4500m}}}");
  EXPECT_EQ(envOf(limited, kEnvOmpNumThreads), "4");
  EXPECT_EQ(envOf(limited, kEnvOmpWaitPolicy), "PASSIVE");
  EXPECT_EQ(
      envOf(podOf("{name: w, image: i, resources: {limits: {cpu: 200m}}}"), kEnvOmpNumThreads),
      "1");
  EXPECT_EQ(
      envOf(podOf("{name: w, image: i, resources: {requests: {cpu: '8'}}}"), kEnvOmpNumThreads),
      "");
  const YAML::Node own = podOf(
      "{name: w, image: i, resources: {limits: {cpu: '4'}}, env: [{name: OMP_NUM_THREADS, "
      "value: '2'}]}");
  EXPECT_EQ(envOf(own, kEnvOmpNumThreads), "2");
  int entries = 0;
  for (const auto& e : own["env"]) entries += e["name"].Scalar() == kEnvOmpNumThreads ? 1 : 0;
  EXPECT_EQ(entries, 1);
}

TEST(PodLayout, EveryWorkerOfASharedPodGetsTheJobSecretAndItsContainerMountsIt) {
  const std::string text =
      "apiVersion: rpcjob.dev/v1alpha1\nkind: RpcJob\nmetadata: {name: sec}\nspec:\n"
      "  workers:\n"
      "    - name: a\n"
      "      template: {spec: {containers: [{name: w, image: i, env: [{name: RPCJOB_SECRET_FILE, "
      "value: /elsewhere}]}]}}\n"
      "    - name: b\n"
      "      replicas: 2\n"
      "      template: {spec: {containers: [{name: w, image: i}]}}\n"
      "  placement: {workersPerPod: Auto}\n";
  const YAML::Node pod = firstPod(text, "sec");
  const YAML::Node c = pod["spec"]["containers"][0];
  EXPECT_TRUE(mountsJobSecret(pod, c, "sec"));
  EXPECT_EQ(envOf(c, kEnvSecretFile), "") << "per worker, in the launch spec";
  const PodLaunch launch = parsePodLaunch(envOf(c, kEnvPodWorkers));
  ASSERT_EQ(launch.workers.size(), 3u);
  for (const auto& w : launch.workers) {
    std::vector<std::string> paths;
    for (const auto& [name, value] : w.env) {
      if (name == kEnvSecretFile) paths.push_back(value);
    }
    EXPECT_EQ(paths, std::vector<std::string>{kSecretPath})
        << w.name << ": the operator's path, not the template's";
  }
  // A pod of one worker: its container's env names the operator's path only.
  std::string one = text;
  one.replace(one.find("workersPerPod: Auto"), 19, "workersPerPod: 1");
  const YAML::Node first = firstPod(one, "sec", 3);
  std::vector<std::string> paths;
  for (const auto& e : first["spec"]["containers"][0]["env"]) {
    if (e["name"].Scalar() == kEnvSecretFile) paths.push_back(e["value"].Scalar());
  }
  EXPECT_EQ(paths, std::vector<std::string>{kSecretPath});
  EXPECT_TRUE(mountsJobSecret(first, first["spec"]["containers"][0], "sec"));
}

std::string failedPod(const std::string& message) {
  return R"({"status":{"phase":"Failed","containerStatuses":[{"name":"w","state":{"terminated":)"
         R"({"exitCode":3,"message":)" +
         message + "}}}]}}";
}

TEST(TerminationReport, NamesTheFailedWorkerAndEveryCode) {
  PodReport report{{{"master", 143, 0, 0}, {"shard", 137, 9, 0}, {"w2", 3, 0, 1}}, "w2"};
  std::string text = toJson(report);
  // As the API server stores it: a JSON string inside the pod's JSON.
  std::string quoted = "\"";
  for (char ch : text) quoted += ch == '"' ? std::string("\\\"") : std::string(1, ch);
  quoted += "\"";
  const auto back = podReportOf(failedPod(quoted));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->failed, "w2");
  EXPECT_EQ(back->workers.size(), 3u);
  EXPECT_EQ(workerFailureOf(failedPod(quoted)),
            "worker w2 exited with code 3 (pod workers: w2 3, master 143, shard signal 9)");
}

TEST(TerminationReport, AbsentOrForeignMessagesAreNoReport) {
  EXPECT_FALSE(podReportOf(failedPod("\"segfault in main\"")));
  EXPECT_FALSE(podReportOf(failedPod(R"("{\"workers\": 7}")")));
  EXPECT_FALSE(podReportOf(R"({"status":{"phase":"Running"}})"));
  EXPECT_FALSE(podReportOf("not json"));
  EXPECT_FALSE(workerFailureOf(failedPod(R"("{\"failed\":\"\",\"workers\":[]}")")))
      << "a report of a pod that was stopped names no worker";
}

}  // namespace
}  // namespace rpcjob::op
