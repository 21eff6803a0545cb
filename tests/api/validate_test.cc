#include "rpcjob/api/validate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "rpcjob/api/names.h"
#include "rpcjob/api/parse.h"

namespace rpcjob::api {
namespace {

using ::testing::HasSubstr;

RpcJob jobWith(std::vector<WorkerGroup> groups, const std::string& name = "job") {
  RpcJob job;
  job.metadata.name = name;
  job.spec.workers = std::move(groups);
  return job;
}

WorkerGroup group(const std::string& name, int replicas, int gpus = 0) {
  WorkerGroup g;
  g.name = name;
  g.replicas = replicas;
  g.gpusPerWorker = gpus;
  return g;
}

std::string errorsOf(const RpcJob& job) {
  return formatErrors(validateRpcJob(job));
}

TEST(Validate, AValidJobHasNoErrors) {
  EXPECT_TRUE(validateRpcJob(jobWith({group("master", 1, 1), group("worker", 3, 2)})).empty());
}

TEST(Validate, WorkersPerGpu) {
  RpcJob shared = jobWith({group("master", 1, 1), group("shard", 1, 1)});
  shared.spec.placement.workersPerPod = WorkersPerPod::Auto;
  shared.spec.placement.workersPerGpu = 2;
  EXPECT_TRUE(validateRpcJob(shared).empty()) << errorsOf(shared);

  RpcJob onePerPod = shared;
  onePerPod.spec.placement.workersPerPod = WorkersPerPod::One;
  EXPECT_THAT(errorsOf(onePerPod),
              HasSubstr("spec.placement.workersPerGpu: workers share a GPU only inside one pod"));

  RpcJob twoGpus = shared;
  twoGpus.spec.workers[1].gpusPerWorker = 2;
  EXPECT_THAT(errorsOf(twoGpus), HasSubstr("spec.workers[1].gpusPerWorker: must be 0 or 1"));

  for (int bad : {0, -1, 17}) {
    RpcJob j = shared;
    j.spec.placement.workersPerGpu = bad;
    EXPECT_THAT(errorsOf(j), HasSubstr("spec.placement.workersPerGpu: must be 1..16")) << bad;
  }
}

TEST(Validate, WorkersPerGpuParsedAndDefaulted) {
  const char* yaml = R"(apiVersion: rpcjob.dev/v1alpha1
kind: RpcJob
metadata: {name: j}
spec:
  workers: [{name: a, gpusPerWorker: 1}, {name: b, gpusPerWorker: 1}]
  placement: {workersPerPod: Auto, workersPerGpu: 2}
)";
  const auto parsed = parseRpcJob(yaml);
  ASSERT_TRUE(parsed.ok()) << formatErrors(parsed.errors);
  EXPECT_EQ(parsed.job.spec.placement.workersPerGpu, 2);
  EXPECT_EQ(RpcJob().spec.placement.workersPerGpu, 1);
}

TEST(Validate, ReturnsEveryError) {
  RpcJob job = jobWith({group("Bad_Name", 0, -1), group("ok", 1)}, "9job");
  job.spec.transports = {"tcp"};
  job.spec.runPolicy.backoffLimit = -1;
  const auto errors = validateRpcJob(job);
  const std::string e = formatErrors(errors);
  EXPECT_THAT(e, HasSubstr("metadata.name: '9job' is not a DNS label starting with a letter"));
  EXPECT_THAT(e, HasSubstr("spec.workers[0].name: 'Bad_Name' is not a DNS label"));
  EXPECT_THAT(e, HasSubstr("spec.workers[0].replicas: must be >= 1, got 0"));
  EXPECT_THAT(e, HasSubstr("spec.workers[0].gpusPerWorker: must be >= 0, got -1"));
  EXPECT_THAT(e, HasSubstr("spec.transports[0]: unknown transport 'tcp'"));
  EXPECT_THAT(e, HasSubstr("spec.runPolicy.backoffLimit: must be >= 0, got -1"));
  EXPECT_EQ(errors.size(), 6u) << e;
}

TEST(Validate, DuplicateGroupAndWorkerNames) {
  EXPECT_THAT(errorsOf(jobWith({group("a", 1), group("a", 1)})),
              HasSubstr("spec.workers[1].name: duplicate group name 'a'"));
  // "worker" x2 gives worker0, worker1; a group named worker1 collides.
  EXPECT_THAT(errorsOf(jobWith({group("worker", 2), group("worker1", 1)})),
              HasSubstr("worker name 'worker1' is also a worker of spec.workers[0]"));
}

TEST(Validate, PodNamesFitInALabel) {
  const std::string longJob(40, 'j');
  const std::string longGroup(20, 'g');
  EXPECT_THAT(errorsOf(jobWith({group(longGroup, 100)}, longJob)),
              HasSubstr("would be longer than 63 characters"));
  EXPECT_TRUE(validateRpcJob(jobWith({group(longGroup, 10)}, std::string(39, 'j'))).empty());
  RpcJob autoPods = jobWith({group("w", 100)}, std::string(58, 'j'));
  autoPods.spec.placement.workersPerPod = WorkersPerPod::Auto;
  EXPECT_THAT(errorsOf(autoPods), HasSubstr("metadata.name: pod name"));
}

TEST(Validate, BoundsTotalWorkers) {
  EXPECT_THAT(errorsOf(jobWith({group("a", kMaxWorkers), group("b", 1)})),
              HasSubstr("the job has 1025 workers; at most 1024"));
  EXPECT_TRUE(validateRpcJob(jobWith({group("a", kMaxWorkers)})).empty());
}

TEST(Validate, ChannelsKnownAndUnique) {
  RpcJob job = jobWith({group("a", 1)});
  job.spec.channels = {"cma", "nvlink", "cma"};
  const std::string e = errorsOf(job);
  EXPECT_THAT(e, HasSubstr("spec.channels[1]: unknown channel 'nvlink'"));
  EXPECT_THAT(e, HasSubstr("spec.channels[2]: 'cma' is listed twice"));
}

TEST(Validate, Quantities) {
  WorkerGroup g = group("a", 1);
  Container c;
  c.cpuRequest = "1.5x";
  c.memoryRequest = "-1Gi";
  g.podTemplate.containers.push_back(c);
  const std::string e = errorsOf(jobWith({g}));
  EXPECT_THAT(e, HasSubstr("containers[0].resources.requests.cpu: '1.5x' is not a quantity"));
  EXPECT_THAT(e, HasSubstr("containers[0].resources.requests.memory: must not be negative"));
}

TEST(Validate, ExplicitDeviceMaps) {
  RpcJob job = jobWith({group("master", 1, 2), group("worker", 2, 1), group("cpu", 1, 0)});
  job.spec.deviceMaps.mode = DeviceMapMode::Explicit;
  job.spec.deviceMaps.maps = {
      {"master", "worker0", {{"cuda:0", "cuda:0"}}},                        // fine
      {"worker0", "master", {{"cuda:0", "cuda:1"}}},                        // not the inverse
      {"master", "worker1", {{"cuda:0", "cuda:0"}, {"cuda:1", "cuda:0"}}},  // not one-to-one
      {"master", "nobody", {{"cuda:0", "cuda:0"}}},                         // unknown worker
      {"master", "cpu", {{"cuda:0", "cuda:0"}}},                            // no GPUs there
      {"worker1", "master", {{"cuda:3", "gpu0"}}},                          // malformed
      {"worker1", "worker1", {{"cuda:0", "cuda:0"}}},                       // itself
  };
  const std::string e = errorsOf(job);
  EXPECT_THAT(e,
              HasSubstr("maps[1].devices: the map from 'worker0' to 'master' must be the inverse"));
  EXPECT_THAT(e, HasSubstr("maps[2].devices.cuda:1: two devices map to cuda:0"));
  EXPECT_THAT(e, HasSubstr("maps[3].to: no worker named 'nobody'"));
  EXPECT_THAT(e, HasSubstr("maps[4].to: worker 'cpu' has no GPUs"));
  EXPECT_THAT(e, HasSubstr("maps[5].devices.cuda:3: devices are cuda:k"));
  EXPECT_THAT(e, HasSubstr("maps[6].to: a worker has no device map to itself"));
  EXPECT_EQ(validateRpcJob(job).size(), 6u) << e;
}

TEST(Validate, DeviceOutOfRange) {
  RpcJob job = jobWith({group("a", 1, 1), group("b", 1, 1)});
  job.spec.deviceMaps.maps = {{"a", "b", {{"cuda:1", "cuda:0"}}}};
  EXPECT_THAT(errorsOf(job), HasSubstr("maps[0].devices.cuda:1: 'a' has 1 GPU(s); no cuda:1"));
}

TEST(Validate, LinesComeFromTheSourceMap) {
  RpcJob job = jobWith({group("a", 1)});
  job.spec.metrics.port = 70000;
  const auto errors = validateRpcJob(job, {{"spec.metrics", 9}});
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].toString(),
            "spec.metrics.port (line 9): must be 0 (off) or a port 1..65535, got 70000");
}

TEST(Names, WorkerAndPodNames) {
  EXPECT_EQ(workerName(group("master", 1), 0), "master");
  EXPECT_EQ(workerName(group("worker", 3), 2), "worker2");
  EXPECT_EQ(workerNames(jobWith({group("m", 1), group("w", 2)}).spec),
            (std::vector<std::string>{"m", "w0", "w1"}));
  EXPECT_EQ(workerPodName("job", "w", 1), "job-w-1");
  EXPECT_EQ(sharedPodName("job", 0), "job-pod0");
  EXPECT_TRUE(isDnsLabel("a-1"));
  EXPECT_FALSE(isDnsLabel("-a"));
  EXPECT_FALSE(isDnsLabel(std::string(64, 'a')));
  EXPECT_FALSE(isDns1035Label("1a"));
}

}  // namespace
}  // namespace rpcjob::api
