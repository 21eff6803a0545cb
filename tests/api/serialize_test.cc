#include "rpcjob/api/serialize.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "rpcjob/api/parse.h"

namespace rpcjob::api {
namespace {

using ::testing::HasSubstr;

const char* const kJob = R"(apiVersion: rpcjob.dev/v1alpha1
kind: RpcJob
metadata: {name: pipeline, namespace: ml, generation: 2}
spec:
  workers:
    - name: master
      gpusPerWorker: 1
      template:
        metadata: {labels: {app: "true"}}
        spec:
          containers: [{name: worker, image: "img:1", args: ["--size", "8"]}]
    - {name: worker, replicas: 2, gpusPerWorker: 1}
  placement: {workersPerPod: Auto}
  deviceMaps:
    maps: [{from: master, to: worker0, devices: {"cuda:0": "cuda:0"}}]
  channels: [cuda_ipc, cma, basic]
  runPolicy: {ttlSecondsAfterFinished: 60}
)";

TEST(Serialize, YamlRoundTrips) {
  const ParseResult first = parseRpcJob(kJob);
  ASSERT_TRUE(first.ok()) << formatErrors(first.errors);
  const std::string yaml = toYaml(first.job);
  const ParseResult second = parseRpcJob(yaml);
  ASSERT_TRUE(second.ok()) << formatErrors(second.errors) << yaml;
  EXPECT_EQ(toYaml(second.job), yaml);
  EXPECT_EQ(specToJson(second.job.spec), specToJson(first.job.spec));
  // Strings that look like other kinds stay strings.
  EXPECT_EQ(second.job.spec.workers[0].podTemplate.containers[0].args,
            (std::vector<std::string>{"--size", "8"}));
  EXPECT_EQ(second.job.spec.runPolicy.ttlSecondsAfterFinished, 60);
  EXPECT_EQ(second.job.spec.placement.workersPerPod, WorkersPerPod::Auto);
}

TEST(Serialize, StatusJsonParsesBack) {
  RpcJobStatus status;
  status.phase = "Running";
  status.observedGeneration = 4;
  status.workerCount = 2;
  status.readyWorkers = 2;
  status.startTime = "2026-01-01T00:00:00Z";
  status.conditions.push_back({"Running", "True", "PodsRunning", "2/2 \"ready\"\n", "t", 4});
  WorkerStatus w;
  w.name = "master";
  w.rank = 0;
  w.gpus = {0, 1};
  w.deviceMaps["worker0"] = {{"cuda:0", "cuda:1"}};
  w.channels["worker0"] = {"cuda_ipc", "cma"};
  status.workers.push_back(w);
  const std::string json = statusToJson(status);
  EXPECT_THAT(json, HasSubstr("\"message\":\"2/2 \\\"ready\\\"\\n\""));
  const std::string doc = std::string(R"({"apiVersion":"rpcjob.dev/v1alpha1","kind":"RpcJob",)") +
                          R"("metadata":{"name":"j"},"spec":{"workers":[{"name":"w"}]},"status":)" +
                          json + "}";
  const ParseResult r = parseRpcJob(doc);
  ASSERT_TRUE(r.ok()) << formatErrors(r.errors);
  ASSERT_TRUE(r.job.status.has_value());
  EXPECT_EQ(statusToJson(*r.job.status), json);
  EXPECT_EQ(r.job.status->conditions[0].message, "2/2 \"ready\"\n");
  EXPECT_EQ(r.job.status->workers[0].gpus, (std::vector<int>{0, 1}));
}

}  // namespace
}  // namespace rpcjob::api
