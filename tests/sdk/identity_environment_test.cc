// A user's program learns who it is from its environment (Runtime::fromEnvironment),
// so `rpcjob run` must give a process what the operator gives a pod's worker
// container: the same variables with the same values, for every worker, with one
// pod per worker and with workers sharing a pod (one container whose
// rpcjob-launch starts them: what it starts is compared, command line
// included). Three documented differences: the
// assignment file's path (the run directory locally, the mounted ConfigMap in a
// pod), the job secret's path likewise (the run directory, the mounted
// Secret) and RPCJOB_METRICS_FILE, which only `rpcjob run` sets (it reads the file
// back for its summary).

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <string>

#include "rpcjob/api/parse.h"
#include "rpcjob/assignment/environment.h"
#include "rpcjob/assignment/pod_launch.h"
#include "rpcjob/operator/children.h"
#include "rpcjob/operator/job_security.h"
#include "rpcjob/planner/cluster.h"
#include "rpcjob/planner/endpoints.h"
#include "rpcjob/planner/plan.h"
#include "rpcjob/runner/launch.h"
#include "rpcjob/runner/pod_launcher.h"

namespace rpcjob {
namespace {

using Env = std::map<std::string, std::string>;

std::string job(const std::string& workersPerPod) {
  return R"yaml(apiVersion: rpcjob.dev/v1alpha1
kind: RpcJob
metadata: {name: envjob, namespace: team}
spec:
  workers:
    - name: master
      template:
        spec:
          containers:
            - name: main
              image: registry.example.com/mine:1
              command: [my-program]
              env:
                - {name: MODE, value: train}
                - {name: RPCJOB_RANK, value: "99"}
    - name: worker
      replicas: 3
      template:
        spec:
          containers:
            - {name: main, image: registry.example.com/mine:1, command: [my-program]}
  placement: {workersPerPod: )yaml" +
         workersPerPod + R"yaml(}
  metrics: {port: 9400}
)yaml";
}

planner::Plan plan(const api::RpcJob& job, planner::Target target) {
  planner::PlanOptions options{target, planner::localEndpoints(30000, 9400)};
  planner::Plan p =
      planner::planJob(job, planner::localCluster(0, 8000, int64_t{16} << 30), options);
  EXPECT_TRUE(p.planned()) << p.message;
  return p;
}

struct Started {
  Env env;
  std::vector<std::string> argv;
};

// Worker name -> what it starts with in a pod: the container's env and command
// for a pod of one worker; for a pod of several, what rpcjob-launch makes of the
// container's env and launch spec (the launcher's own functions).
std::map<std::string, Started> podEnvironments(const api::RpcJob& job, const planner::Plan& plan) {
  std::map<std::string, Started> out;
  for (const auto& pod : plan.pods) {
    const YAML::Node json = YAML::Load(op::podJson(
        {job.metadata.name, job.metadata.namespaceName, "uid"}, job.spec, plan, pod, "local", 0));
    const YAML::Node containers = json["spec"]["containers"];
    EXPECT_EQ(containers.size(), 1u) << "one container runs the pod's workers";
    std::vector<std::pair<std::string, std::string>> containerEnv;
    for (const auto& e : containers[0]["env"]) {
      containerEnv.emplace_back(e["name"].Scalar(), e["value"].Scalar());
    }
    if (pod.workers.size() == 1) {
      Started s;
      for (const auto& [name, value] : containerEnv) s.env[name] = value;
      for (const auto& part : containers[0]["command"]) s.argv.push_back(part.Scalar());
      for (const auto& part : containers[0]["args"]) s.argv.push_back(part.Scalar());
      out[pod.workers[0]] = s;
      continue;
    }
    EXPECT_EQ(containers[0]["command"][0].Scalar(), op::kLaunchProgram);
    std::string spec;
    std::vector<std::pair<std::string, std::string>> inherited;
    for (const auto& [name, value] : containerEnv) {
      if (name == kEnvPodWorkers)
        spec = value;
      else
        inherited.emplace_back(name, value);
    }
    const auto launches = runner::podWorkerLaunches(parsePodLaunch(spec), inherited);
    EXPECT_EQ(launches.size(), pod.workers.size());
    for (const auto& w : launches) {
      Started s;
      for (const auto& [name, value] : inherited) s.env[name] = value;
      for (const auto& [name, value] : w.env) s.env[name] = value;  // the last one wins
      s.argv = w.argv;
      out[w.name] = s;
    }
  }
  return out;
}

std::map<std::string, Started> localEnvironments(const api::RpcJob& job,
                                                 const planner::Plan& plan) {
  std::map<std::string, Started> out;
  const runner::Launches launches = runner::buildLaunches(
      job, plan, {"/b/rpcjob-worker", "/run", "/run/assignment.yaml", "/m", "/run/secret"});
  for (const auto& w : launches.workers) {
    Started s;
    for (const auto& [name, value] : w.env) s.env[name] = value;  // the last one wins
    s.argv = w.argv;
    out[w.name] = s;
  }
  return out;
}

class IdentityEnvironment : public ::testing::TestWithParam<std::string> {};

TEST_P(IdentityEnvironment, IsThePodsUnderRpcjobRun) {
  const api::ParseResult parsed = api::parseRpcJob(job(GetParam()));
  ASSERT_TRUE(parsed.ok()) << api::formatErrors(parsed.errors);
  const planner::Plan kube = plan(parsed.job, planner::Target::Kubernetes);
  const planner::Plan local = plan(parsed.job, planner::Target::Local);
  ASSERT_FALSE(kube.pods.empty());
  EXPECT_EQ(kube.pods.size(), GetParam() == "Auto" ? 1u : 4u) << "one node: one shared pod";

  std::map<std::string, Started> pods = podEnvironments(parsed.job, kube);
  std::map<std::string, Started> processes = localEnvironments(parsed.job, local);
  ASSERT_EQ(pods.size(), 4u);
  ASSERT_EQ(processes.size(), 4u);
  for (auto& [worker, podStart] : pods) {
    SCOPED_TRACE(worker);
    ASSERT_TRUE(processes.count(worker));
    EXPECT_EQ(podStart.argv, processes[worker].argv);
    Env& podEnv = podStart.env;
    Env& processEnv = processes[worker].env;
    EXPECT_EQ(podEnv[kEnvAssignmentPath], op::kAssignmentPath);
    EXPECT_EQ(processEnv[kEnvAssignmentPath], "/run/assignment.yaml");
    EXPECT_EQ(processEnv[kEnvMetricsFile], "/run/" + worker + ".metrics");
    EXPECT_EQ(podEnv[kEnvSecretFile], op::kSecretPath);
    EXPECT_EQ(processEnv[kEnvSecretFile], "/run/secret");
    podEnv.erase(kEnvAssignmentPath);
    processEnv.erase(kEnvAssignmentPath);
    podEnv.erase(kEnvSecretFile);
    processEnv.erase(kEnvSecretFile);
    processEnv.erase(kEnvMetricsFile);
    EXPECT_EQ(processEnv, podEnv);
    // What every worker must have, with the plan's values (not the template's).
    const WorkerEntry* entry = kube.assignment.byName(worker);
    ASSERT_NE(entry, nullptr);
    EXPECT_EQ(podEnv[kEnvWorkerName], worker);
    EXPECT_EQ(podEnv[kEnvRank], std::to_string(entry->rank));
    EXPECT_EQ(podEnv[kEnvWorldSize], "4");
    EXPECT_EQ(podEnv[kEnvJobName], "envjob");
    EXPECT_EQ(podEnv[kEnvNamespace], "team");
    EXPECT_EQ(podEnv[kEnvMetricsPort], std::to_string(entry->metricsPort));
  }
  EXPECT_EQ(pods["master"].env["MODE"], "train");
}

INSTANTIATE_TEST_SUITE_P(WorkersPerPod, IdentityEnvironment, ::testing::Values("1", "Auto"));

}  // namespace
}  // namespace rpcjob
