#include "rpcjob/api/parse.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "rpcjob/api/defaults.h"

namespace rpcjob::api {
namespace {

using ::testing::HasSubstr;

const char* const kJob = R"(apiVersion: rpcjob.dev/v1alpha1
kind: RpcJob
metadata:
  name: pipeline
  namespace: ml
  labels: {team: infra}
spec:
  workers:
    - name: master
      gpusPerWorker: 1
      template:
        spec:
          nodeSelector: {gpu: a100}
          tolerations:
            - {key: dedicated, operator: Equal, value: ml, effect: NoSchedule}
          affinity:
            nodeAffinity:
              requiredDuringSchedulingIgnoredDuringExecution:
                nodeSelectorTerms:
                  - matchExpressions:
                      - {key: zone, operator: In, values: [a, b]}
                      - {key: spot, operator: DoesNotExist}
          containers:
            - name: worker
              image: rpcjob/worker:1
              command: [rpcjob-worker]
              args: [bench]
              resources:
                requests: {cpu: 500m, memory: 1Gi}
    - name: worker
      replicas: 2
      gpusPerWorker: 2
  placement: {policy: Spread, workersPerPod: Auto}
  transports: [shm, uv]
  channels: [cuda_ipc, basic]
  runPolicy: {backoffLimit: 5, activeDeadlineSeconds: 600, suspend: true, cleanPodPolicy: All}
  metrics: {port: 9500, perPeerLabels: false}
)";

std::string errorsOf(const ParseResult& r) {
  return formatErrors(r.errors);
}

TEST(Parse, ReadsEveryField) {
  const ParseResult r = parseRpcJob(kJob);
  ASSERT_TRUE(r.ok()) << errorsOf(r);
  const RpcJob& job = r.job;
  EXPECT_EQ(job.metadata.name, "pipeline");
  EXPECT_EQ(job.metadata.namespaceName, "ml");
  EXPECT_EQ(job.metadata.labels.at("team"), "infra");
  ASSERT_EQ(job.spec.workers.size(), 2u);
  const WorkerGroup& master = job.spec.workers[0];
  EXPECT_EQ(master.replicas, 1);
  EXPECT_EQ(master.gpusPerWorker, 1);
  EXPECT_EQ(master.podTemplate.nodeSelector.at("gpu"), "a100");
  ASSERT_EQ(master.podTemplate.tolerations.size(), 1u);
  EXPECT_EQ(master.podTemplate.tolerations[0].effect, "NoSchedule");
  ASSERT_EQ(master.podTemplate.requiredNodeAffinity.size(), 1u);
  const auto& exprs = master.podTemplate.requiredNodeAffinity[0].matchExpressions;
  ASSERT_EQ(exprs.size(), 2u);
  EXPECT_EQ(exprs[0].op, SelectorOperator::In);
  EXPECT_EQ(exprs[0].values, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(exprs[1].op, SelectorOperator::DoesNotExist);
  ASSERT_EQ(master.podTemplate.containers.size(), 1u);
  EXPECT_EQ(master.podTemplate.containers[0].command, std::vector<std::string>{"rpcjob-worker"});
  EXPECT_EQ(master.podTemplate.containers[0].cpuRequest, "500m");
  EXPECT_EQ(master.podTemplate.containers[0].memoryRequest, "1Gi");
  EXPECT_THAT(master.podTemplate.json, HasSubstr("\"image\":\"rpcjob/worker:1\""));
  EXPECT_EQ(job.spec.workers[1].replicas, 2);
  EXPECT_EQ(job.spec.placement.policy, PlacementPolicy::Spread);
  EXPECT_EQ(job.spec.placement.workersPerPod, WorkersPerPod::Auto);
  EXPECT_EQ(job.spec.transports, (std::vector<std::string>{"shm", "uv"}));
  EXPECT_EQ(job.spec.runPolicy.backoffLimit, 5);
  EXPECT_EQ(job.spec.runPolicy.activeDeadlineSeconds, 600);
  EXPECT_FALSE(job.spec.runPolicy.ttlSecondsAfterFinished.has_value());
  EXPECT_TRUE(job.spec.runPolicy.suspend);
  EXPECT_EQ(job.spec.runPolicy.cleanPodPolicy, CleanPodPolicy::All);
  EXPECT_EQ(job.spec.metrics.port, 9500);
  EXPECT_FALSE(job.spec.metrics.perPeerLabels);
  EXPECT_FALSE(job.status.has_value());
}

TEST(Parse, AppliesDefaults) {
  const ParseResult r = parseRpcJob(
      "apiVersion: rpcjob.dev/v1alpha1\nkind: RpcJob\nmetadata: {name: j}\n"
      "spec:\n  workers:\n    - name: w\n");
  ASSERT_TRUE(r.ok()) << errorsOf(r);
  const RpcJobSpec& s = r.job.spec;
  EXPECT_EQ(s.workers[0].replicas, kDefaultReplicas);
  EXPECT_EQ(s.workers[0].gpusPerWorker, kDefaultGpusPerWorker);
  EXPECT_STREQ(toString(s.placement.policy), kDefaultPlacementPolicy);
  EXPECT_STREQ(toString(s.placement.workersPerPod), kDefaultWorkersPerPod);
  EXPECT_STREQ(toString(s.deviceMaps.mode), kDefaultDeviceMapMode);
  EXPECT_EQ(s.runPolicy.backoffLimit, kDefaultBackoffLimit);
  EXPECT_EQ(s.runPolicy.suspend, kDefaultSuspend);
  EXPECT_STREQ(toString(s.runPolicy.cleanPodPolicy), kDefaultCleanPodPolicy);
  EXPECT_EQ(s.metrics.port, kDefaultMetricsPort);
  EXPECT_EQ(s.metrics.perPeerLabels, kDefaultPerPeerLabels);
  EXPECT_TRUE(s.transports.empty());
}

TEST(Parse, ErrorsNameFieldAndLine) {
  const ParseResult r = parseRpcJob(R"(apiVersion: rpcjob.dev/v1alpha1
kind: RpcJob
metadata: {name: j}
spec:
  workers:
    - name: a
    - name: b
      replicas: -2
)");
  ASSERT_EQ(r.errors.size(), 1u) << errorsOf(r);
  EXPECT_EQ(r.errors[0].toString(), "spec.workers[1].replicas (line 8): must be >= 1, got -2");
}

TEST(Parse, UnknownFieldsAreErrors) {
  const ParseResult r = parseRpcJob(R"(apiVersion: rpcjob.dev/v1alpha1
kind: RpcJob
metadata: {name: j}
spec:
  workers:
    - name: a
      replica: 2
  placement: {polcy: Pack}
  extra: 1
)");
  EXPECT_THAT(errorsOf(r), HasSubstr("spec.workers[0].replica (line 7): unknown field 'replica'"));
  EXPECT_THAT(errorsOf(r), HasSubstr("spec.placement.polcy (line 8): unknown field"));
  EXPECT_THAT(errorsOf(r), HasSubstr("spec.extra (line 9): unknown field"));
  EXPECT_EQ(r.errors.size(), 3u);
}

TEST(Parse, WrongTypesAreErrors) {
  const ParseResult r = parseRpcJob(R"(apiVersion: rpcjob.dev/v1alpha1
kind: RpcJob
metadata: {name: j}
spec:
  workers:
    - name: a
      replicas: two
      gpusPerWorker: "1"
      template:
        spec:
          nodeSelector: {rdma: true}
  runPolicy: {suspend: maybe}
  transports: uv
)");
  const std::string e = errorsOf(r);
  EXPECT_THAT(e, HasSubstr("spec.workers[0].replicas (line 7): expected an integer, got 'two'"));
  EXPECT_THAT(e, HasSubstr("spec.workers[0].gpusPerWorker (line 8): expected an integer"));
  EXPECT_THAT(e, HasSubstr("template.spec.nodeSelector.rdma (line 11): expected a string, got a "
                           "boolean"));
  EXPECT_THAT(e, HasSubstr("spec.runPolicy.suspend (line 12): expected true or false"));
  EXPECT_THAT(e, HasSubstr("spec.transports (line 13): expected a list"));
  EXPECT_EQ(r.errors.size(), 5u) << e;
}

TEST(Parse, BadEnumsListTheChoices) {
  const ParseResult r = parseRpcJob(
      "apiVersion: rpcjob.dev/v1alpha1\nkind: RpcJob\nmetadata: {name: j}\n"
      "spec:\n  workers: [{name: w}]\n  placement: {policy: Fill, workersPerPod: 2}\n");
  EXPECT_THAT(errorsOf(r), HasSubstr("spec.placement.policy (line 6): must be one of Pack, Spread, "
                                     "got 'Fill'"));
  EXPECT_THAT(errorsOf(r),
              HasSubstr("spec.placement.workersPerPod (line 6): must be one of 1, Auto"));
}

TEST(Parse, RequiresTheEnvelope) {
  const ParseResult r = parseRpcJob("apiVersion: v1\nkind: Pod\nspec: {workers: [{name: w}]}\n");
  const std::string e = errorsOf(r);
  EXPECT_THAT(e, HasSubstr("apiVersion (line 1): unsupported version 'v1'"));
  EXPECT_THAT(e, HasSubstr("kind (line 2): expected RpcJob, got 'Pod'"));
  EXPECT_THAT(e, HasSubstr("metadata (line 1): required"));
}

TEST(Parse, NotYaml) {
  const ParseResult r = parseRpcJob("spec: [unclosed\n");
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_THAT(r.errors[0].message, HasSubstr("not valid YAML"));
  EXPECT_GT(r.errors[0].line, 0);
}

TEST(Parse, ReadsJsonFromTheApiServer) {
  // As the API server sends it: metadata full of fields rpcjob does not model.
  const ParseResult r = parseRpcJob(R"({"apiVersion":"rpcjob.dev/v1alpha1","kind":"RpcJob",
    "metadata":{"name":"j","namespace":"default","uid":"0d1e","generation":3,
      "resourceVersion":"42","managedFields":[{"manager":"kubectl"}]},
    "spec":{"workers":[{"name":"w","replicas":2,"gpusPerWorker":1,
      "template":{"spec":{"containers":[{"name":"worker","resources":{"requests":{"cpu":"1"}}}]}}}],
      "placement":{"policy":"Pack","workersPerPod":1}},
    "status":{"phase":"Running","observedGeneration":3,"workerCount":2,"readyWorkers":1,
      "conditions":[{"type":"Running","status":"True","reason":"PodsRunning"}],
      "workers":[{"name":"w0","rank":0,"gpus":[0],"deviceMaps":{"w1":{"cuda:0":"cuda:0"}},
        "channels":{"w1":["cuda_basic","basic"]}}]}})");
  ASSERT_TRUE(r.ok()) << errorsOf(r);
  EXPECT_EQ(r.job.metadata.uid, "0d1e");
  EXPECT_EQ(r.job.metadata.generation, 3);
  EXPECT_EQ(r.job.spec.workers[0].podTemplate.containers[0].cpuRequest, "1");
  ASSERT_TRUE(r.job.status.has_value());
  EXPECT_EQ(r.job.status->phase, "Running");
  EXPECT_EQ(r.job.status->readyWorkers, 1);
  EXPECT_EQ(r.job.status->conditions[0].reason, "PodsRunning");
  EXPECT_EQ(r.job.status->workers[0].deviceMaps.at("w1").at("cuda:0"), "cuda:0");
}

TEST(Parse, GpuResourceInTemplateIsAnError) {
  const ParseResult r = parseRpcJob(R"(apiVersion: rpcjob.dev/v1alpha1
kind: RpcJob
metadata: {name: j}
spec:
  workers:
    - name: w
      template:
        spec:
          containers:
            - resources: {limits: {nvidia.com/gpu: 1}}
)");
  EXPECT_THAT(errorsOf(r), HasSubstr("limits.nvidia.com/gpu (line 10): set "
                                     "spec.workers[].gpusPerWorker instead"));
}

TEST(Parse, AffinityOperatorsAreChecked) {
  const ParseResult r = parseRpcJob(R"(apiVersion: rpcjob.dev/v1alpha1
kind: RpcJob
metadata: {name: j}
spec:
  workers:
    - name: w
      template:
        spec:
          affinity:
            nodeAffinity:
              requiredDuringSchedulingIgnoredDuringExecution:
                nodeSelectorTerms:
                  - matchExpressions:
                      - {key: a, operator: In}
                      - {key: b, operator: Exists, values: [x]}
                      - {key: c, operator: Gt, values: ["1"]}
                    matchFields:
                      - {key: metadata.name, operator: In, values: [n1]}
)");
  const std::string e = errorsOf(r);
  EXPECT_THAT(e, HasSubstr("matchExpressions[0].values (line 14): operator In needs at least one"));
  EXPECT_THAT(e,
              HasSubstr("matchExpressions[1].values (line 15): operator Exists takes no values"));
  EXPECT_THAT(e, HasSubstr("matchExpressions[2].operator (line 16): must be one of"));
  EXPECT_THAT(e, HasSubstr("nodeSelectorTerms[0].matchFields (line 17): unknown field"));
}

}  // namespace
}  // namespace rpcjob::api
