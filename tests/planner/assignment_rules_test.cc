// From placement to the worker table: ranks, names, pods, GPUs, channels, device
// maps, pod settings, addresses.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "rpcjob/assignment/pair_links.h"
#include "rpcjob/planner/plan.h"
#include "test_support.h"

namespace rpcjob::planner {
namespace {

using ::testing::ElementsAre;
using namespace rpcjob::planner::testing;

std::vector<std::string> namesByRank(const Plan& plan) {
  std::vector<std::string> names;
  for (const auto& w : plan.assignment.workers) names.push_back(w.name);
  return names;
}

TEST(Ranks, FirstWorkerIsRankZeroAndNeighboursAreAdjacent) {
  api::RpcJob j = job({group("w", 4, 1)});
  j.spec.placement.policy = api::PlacementPolicy::Spread;  // w0:a w1:b w2:a w3:b
  const Plan plan = planJob(j, cluster({gpuNode("a", 8), gpuNode("b", 8)}));
  ASSERT_TRUE(plan.planned()) << plan.message;
  EXPECT_THAT(namesByRank(plan), ElementsAre("w0", "w2", "w1", "w3"));
  EXPECT_EQ(plan.assignment.workers[0].node, "a");
  EXPECT_EQ(plan.assignment.workers[1].node, "a");
}

TEST(Names, GroupOfOneIsItsNameElseIndexed) {
  const Plan plan =
      planJob(job({group("master", 1, 0), group("worker", 2, 0)}), cluster({gpuNode("a", 0)}));
  ASSERT_TRUE(plan.planned());
  EXPECT_THAT(namesByRank(plan), ElementsAre("master", "worker0", "worker1"));
  EXPECT_EQ(plan.assignment.workers[1].pod, "job-worker-0");
  EXPECT_EQ(plan.assignment.workers[1].group, "worker");
}

TEST(Pods, OnePerWorkerSeesItsGpusFromZero) {
  const Plan plan = planJob(job({group("w", 2, 2)}), cluster({gpuNode("a", 8)}));
  ASSERT_TRUE(plan.planned());
  ASSERT_EQ(plan.pods.size(), 2u);
  EXPECT_EQ(plan.assignment.workers[0].gpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(plan.assignment.workers[1].gpus, (std::vector<int>{0, 1}));
  // Different pods: no shm or cma, so no pod settings for them.
  EXPECT_FALSE(plan.pods[0].shmVolume);
  EXPECT_FALSE(plan.pods[0].shareProcessNamespace);
  EXPECT_TRUE(plan.pods[0].capabilities.empty());
  EXPECT_EQ(plan.pods[0].requests.gpus, 2);
  EXPECT_EQ(channelsOf(plan.assignment, plan.assignment.workers[0].name).at("w1"),
            (std::vector<std::string>{"cuda_basic", "mpt", "basic"}));
  EXPECT_EQ(deviceMapsOf(plan.assignment, plan.assignment.workers[0].name).at("w1"),
            (DeviceMap{{"cuda:0", "cuda:0"}, {"cuda:1", "cuda:1"}}));
}

TEST(Pods, AutoSharesAPodPerNodeWithNvlinkAndShm) {
  api::RpcJob j = job({group("master", 1, 1), group("worker", 2, 1)});
  j.spec.placement.workersPerPod = api::WorkersPerPod::Auto;
  Node a = gpuNode("a", 2);
  a.labels[kNvlinkLabel] = "true";
  const Plan plan = planJob(j, cluster({a, gpuNode("b", 2)}));
  ASSERT_TRUE(plan.planned()) << plan.message;
  ASSERT_EQ(plan.pods.size(), 2u);
  EXPECT_EQ(plan.pods[0].name, "job-pod0");
  EXPECT_THAT(plan.pods[0].workers, ElementsAre("master", "worker0"));
  EXPECT_THAT(plan.pods[1].workers, ElementsAre("worker1"));
  const auto& master = plan.assignment.workers[0];
  const auto& worker0 = plan.assignment.workers[1];
  EXPECT_EQ(master.gpus, std::vector<int>{0});
  EXPECT_EQ(worker0.gpus, std::vector<int>{1});  // same pod: distinct devices
  EXPECT_EQ(channelsOf(plan.assignment, master.name).at("worker0"),
            (std::vector<std::string>{"cuda_nvlink", "cuda_ipc", "cuda_basic", "rpcjob_cma", "cma",
                                      "basic"}));
  EXPECT_EQ(deviceMapsOf(plan.assignment, master.name).at("worker0"),
            (DeviceMap{{"cuda:0", "cuda:1"}}));
  EXPECT_EQ(deviceMapsOf(plan.assignment, worker0.name).at("master"),
            (DeviceMap{{"cuda:1", "cuda:0"}}));
  EXPECT_TRUE(plan.pods[0].shmVolume);
  EXPECT_TRUE(plan.pods[0].shareProcessNamespace);
  EXPECT_THAT(plan.pods[0].capabilities, ElementsAre("SYS_PTRACE"));
  EXPECT_FALSE(plan.pods[1].shmVolume);  // one worker: nobody to share with
  EXPECT_EQ(master.address, "job-pod0.job.ml.svc:29500");
  EXPECT_EQ(worker0.address, "job-pod0.job.ml.svc:29501");
  EXPECT_EQ(worker0.metricsPort, 9401);
  EXPECT_THAT(plan.notes, ElementsAre(::testing::HasSubstr("NVLink")));
}

TEST(Channels, RdmaAcrossNodes) {
  api::RpcJob j = job({group("w", 2, 1)});
  j.spec.placement.policy = api::PlacementPolicy::Spread;
  Node a = gpuNode("a", 1, true);
  Node b = gpuNode("b", 1);
  b.allocatable.rdma = 10;  // RDMA through the device plugin's resource
  const Plan plan = planJob(j, cluster({a, b}));
  ASSERT_TRUE(plan.planned());
  EXPECT_EQ(channelsOf(plan.assignment, plan.assignment.workers[0].name).at("w1"),
            (std::vector<std::string>{"cuda_gdr", "cuda_basic", "mpt", "basic"}));
  EXPECT_THAT(plan.pods[0].capabilities, ElementsAre("IPC_LOCK"));
  EXPECT_EQ(plan.pods[0].requests.rdma, 0);  // node a has the label, not the resource
  EXPECT_EQ(plan.pods[1].requests.rdma, 1);
}

TEST(Channels, NoRdmaOnOneSideMeansStagedCopies) {
  api::RpcJob j = job({group("w", 2, 1)});
  j.spec.placement.policy = api::PlacementPolicy::Spread;
  const Plan plan = planJob(j, cluster({gpuNode("a", 1, true), gpuNode("b", 1)}));
  ASSERT_TRUE(plan.planned());
  EXPECT_EQ(channelsOf(plan.assignment, plan.assignment.workers[0].name).at("w1"),
            (std::vector<std::string>{"cuda_basic", "mpt", "basic"}));
  EXPECT_TRUE(plan.pods[0].capabilities.empty());
}

TEST(Channels, SpecFiltersAndOrders) {
  api::RpcJob j = job({group("w", 2, 1)});
  j.spec.placement.workersPerPod = api::WorkersPerPod::Auto;
  j.spec.channels = {"basic", "cuda_basic", "cma"};
  j.spec.transports = {"uv"};
  const Plan plan = planJob(j, cluster({gpuNode("a", 2)}));
  ASSERT_TRUE(plan.planned());
  EXPECT_EQ(channelsOf(plan.assignment, plan.assignment.workers[0].name).at("w1"),
            (std::vector<std::string>{"basic", "cuda_basic", "cma"}));
  EXPECT_FALSE(plan.pods[0].shmVolume);  // shm not allowed
  EXPECT_TRUE(plan.pods[0].shareProcessNamespace);
  EXPECT_EQ(plan.assignment.transports, std::vector<std::string>{"uv"});
}

TEST(Channels, NoTransportBetweenPods) {
  api::RpcJob j = job({group("w", 2, 0)});
  j.spec.transports = {"shm"};
  const Plan plan = planJob(j, cluster({gpuNode("a", 0)}));
  EXPECT_EQ(plan.outcome, PlanOutcome::Unschedulable);
  EXPECT_EQ(plan.reason, "NoTransport");
  EXPECT_THAT(plan.message, ::testing::HasSubstr("workersPerPod: Auto"));
  j.spec.placement.workersPerPod = api::WorkersPerPod::Auto;
  EXPECT_TRUE(planJob(j, cluster({gpuNode("a", 0)})).planned());
}

TEST(Channels, NoCudaChannelNoDeviceMap) {
  api::RpcJob j = job({group("w", 2, 1)});
  j.spec.channels = {"basic"};
  const Plan plan = planJob(j, cluster({gpuNode("a", 2)}));
  ASSERT_TRUE(plan.planned());
  EXPECT_TRUE(deviceMapsOf(plan.assignment, plan.assignment.workers[0].name).empty());
  EXPECT_FALSE(plan.notes.empty());
}

TEST(DeviceMaps, CpuWorkersHaveNone) {
  const Plan plan = planJob(job({group("m", 1, 0), group("w", 1, 1)}), cluster({gpuNode("a", 1)}));
  ASSERT_TRUE(plan.planned());
  EXPECT_TRUE(deviceMapsOf(plan.assignment, plan.assignment.workers[0].name).empty());
  EXPECT_EQ(channelsOf(plan.assignment, plan.assignment.workers[0].name).at("w"),
            (std::vector<std::string>{"mpt", "basic"}));
}

TEST(DeviceMaps, UnequalGpuCountsMapTheCommonPart) {
  api::RpcJob j = job({group("m", 1, 2), group("w", 1, 1)});
  j.spec.placement.workersPerPod = api::WorkersPerPod::Auto;
  const Plan plan = planJob(j, cluster({gpuNode("a", 4)}));
  ASSERT_TRUE(plan.planned());
  EXPECT_EQ(deviceMapsOf(plan.assignment, plan.assignment.workers[0].name).at("w"),
            (DeviceMap{{"cuda:0", "cuda:2"}}));
  EXPECT_EQ(deviceMapsOf(plan.assignment, plan.assignment.workers[1].name).at("m"),
            (DeviceMap{{"cuda:2", "cuda:0"}}));
}

TEST(DeviceMaps, ExplicitMapsAreTranslatedAndOverride) {
  api::RpcJob j = job({group("m", 1, 2), group("w", 1, 2), group("x", 1, 1)});
  j.spec.placement.workersPerPod = api::WorkersPerPod::Auto;
  j.spec.deviceMaps.maps = {{"m", "w", {{"cuda:0", "cuda:1"}, {"cuda:1", "cuda:0"}}}};
  Plan plan = planJob(j, cluster({gpuNode("a", 8)}));
  ASSERT_TRUE(plan.planned()) << plan.message;
  // m has devices 0,1 and w 2,3 in the shared pod.
  EXPECT_EQ(deviceMapsOf(plan.assignment, plan.assignment.workers[0].name).at("w"),
            (DeviceMap{{"cuda:0", "cuda:3"}, {"cuda:1", "cuda:2"}}));
  EXPECT_EQ(deviceMapsOf(plan.assignment, plan.assignment.workers[1].name).at("m"),
            (DeviceMap{{"cuda:3", "cuda:0"}, {"cuda:2", "cuda:1"}}));
  EXPECT_EQ(deviceMapsOf(plan.assignment, plan.assignment.workers[0].name).count("x"),
            1u);  // Auto keeps the rest

  j.spec.deviceMaps.mode = api::DeviceMapMode::Explicit;
  plan = planJob(j, cluster({gpuNode("a", 8)}));
  ASSERT_TRUE(plan.planned());
  EXPECT_EQ(deviceMapsOf(plan.assignment, plan.assignment.workers[0].name).count("x"), 0u);
  EXPECT_EQ(deviceMapsOf(plan.assignment, plan.assignment.workers[1].name).count("m"), 1u);
}

TEST(Local, ProcessesOnOneMachine) {
  api::RpcJob j = job({group("w", 3, 1)});
  j.spec.metrics.port = 9400;
  PlanOptions options;
  options.target = Target::Local;
  const Plan plan = planJob(j, localCluster(4, 8000, int64_t{16} << 30), options);
  ASSERT_TRUE(plan.planned()) << plan.message;
  EXPECT_TRUE(plan.pods.empty());
  const auto& w = plan.assignment.workers;
  EXPECT_EQ(w[0].gpus, std::vector<int>{0});
  EXPECT_EQ(w[2].gpus, std::vector<int>{2});  // node-wide device indices
  EXPECT_EQ(w[1].address, "127.0.0.1:29501");
  EXPECT_EQ(w[2].metricsPort, 9402);
  EXPECT_EQ(w[0].pod, "");
  EXPECT_EQ(channelsOf(plan.assignment, w[0].name).at("w1"),
            (std::vector<std::string>{"cuda_nvlink", "cuda_ipc", "cuda_basic", "rpcjob_cma", "cma",
                                      "basic"}));
  EXPECT_THAT(planJob(job({group("w", 5, 1)}), localCluster(4, 8000, 1 << 30), options).message,
              ::testing::HasSubstr("needs 1 more nvidia.com/gpu"));
}

TEST(Endpoints, Pluggable) {
  PlanOptions options;
  options.endpoints = [](const WorkerPlacement& w) {
    return Endpoint{"10.0.0." + std::to_string(w.rank + 1) + ":7000", 0};
  };
  const Plan plan = planJob(job({group("w", 2, 0)}), cluster({gpuNode("a", 0)}), options);
  ASSERT_TRUE(plan.planned());
  EXPECT_EQ(plan.assignment.workers[1].address, "10.0.0.2:7000");
  EXPECT_EQ(plan.assignment.workers[1].metricsPort, 0);
  const EndpointFn headless = headlessServiceEndpoints(job({}), 1234, "cluster.local");
  WorkerPlacement w;
  w.pod = "job-w-0";
  EXPECT_EQ(headless(w).address, "job-w-0.job.ml.svc.cluster.local:1234");
}

TEST(Assignment, IsAValidWorkerTable) {
  api::RpcJob j = job({group("master", 1, 1), group("worker", 3, 2)});
  j.spec.placement.workersPerPod = api::WorkersPerPod::Auto;
  const Plan plan = planJob(j, cluster({gpuNode("a", 4, true), gpuNode("b", 4, true)}));
  ASSERT_TRUE(plan.planned()) << plan.message;
  EXPECT_EQ(plan.assignment.jobName, "job");
  EXPECT_EQ(plan.assignment.jobNamespace, "ml");
  const Assignment back = parseAssignment(toYaml(plan.assignment));
  EXPECT_TRUE(back == plan.assignment);
}

}  // namespace
}  // namespace rpcjob::planner
