// A user's program learns who it is from its environment (Runtime::fromEnvironment),
// so `rpcjob run` must give a process what the operator gives a pod's worker
// container: the same variables with the same values, for every worker, with one
// pod per worker and with workers sharing a pod. Three documented differences: the
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
#include "rpcjob/operator/children.h"
#include "rpcjob/operator/job_security.h"
#include "rpcjob/planner/cluster.h"
#include "rpcjob/planner/endpoints.h"
#include "rpcjob/planner/plan.h"
#include "rpcjob/runner/launch.h"

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

// Worker name -> its container's env (pods: the container running it).
std::map<std::string, Env> podEnvironments(const api::RpcJob& job, const planner::Plan& plan) {
  std::map<std::string, Env> out;
  for (const auto& pod : plan.pods) {
    const YAML::Node json = YAML::Load(op::podJson(
        {job.metadata.name, job.metadata.namespaceName, "uid"}, job.spec, plan, pod, "local", 0));
    const YAML::Node containers = json["spec"]["containers"];
    EXPECT_GE(containers.size(), pod.workers.size());
    for (std::size_t k = 0; k < pod.workers.size(); ++k) {
      Env env;
      for (const auto& e : containers[k]["env"]) env[e["name"].Scalar()] = e["value"].Scalar();
      out[pod.workers[k]] = env;
    }
  }
  return out;
}

std::map<std::string, Env> localEnvironments(const api::RpcJob& job, const planner::Plan& plan) {
  std::map<std::string, Env> out;
  const runner::Launches launches = runner::buildLaunches(
      job, plan, {"/b/rpcjob-worker", "/run", "/run/assignment.yaml", "/m", "/run/secret"});
  for (const auto& w : launches.workers) {
    Env env;
    for (const auto& [name, value] : w.env) env[name] = value;  // the last one wins
    out[w.name] = env;
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

  std::map<std::string, Env> pods = podEnvironments(parsed.job, kube);
  std::map<std::string, Env> processes = localEnvironments(parsed.job, local);
  ASSERT_EQ(pods.size(), 4u);
  ASSERT_EQ(processes.size(), 4u);
  for (auto& [worker, podEnv] : pods) {
    SCOPED_TRACE(worker);
    ASSERT_TRUE(processes.count(worker));
    Env& processEnv = processes[worker];
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
  EXPECT_EQ(pods["master"]["MODE"], "train");
}

INSTANTIATE_TEST_SUITE_P(WorkersPerPod, IdentityEnvironment, ::testing::Values("1", "Auto"));

}  // namespace
}  // namespace rpcjob
