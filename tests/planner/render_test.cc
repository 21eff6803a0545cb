#include "rpcjob/planner/render.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "test_support.h"

namespace rpcjob::planner {
namespace {

using ::testing::HasSubstr;
using namespace rpcjob::planner::testing;

TEST(Render, TableShowsWorkersPodsAndPairs) {
  api::RpcJob j = job({group("master", 1, 1), group("worker", 1, 1)});
  j.spec.placement.workersPerPod = api::WorkersPerPod::Auto;
  const Plan plan = planJob(j, cluster({gpuNode("a", 2)}));
  ASSERT_TRUE(plan.planned());
  const std::string text = renderTable(plan);
  EXPECT_THAT(text, HasSubstr("Planned: 2 workers on 1 node(s) in 1 pod(s)"));
  EXPECT_THAT(text, HasSubstr("RANK  NAME    GROUP   NODE  POD       GPUS  ADDRESS"));
  EXPECT_THAT(text,
              HasSubstr("0     master  master  a     job-pod0  0     job-pod0.job.ml.svc:29500"));
  EXPECT_THAT(text, HasSubstr("shm-volume shareProcessNamespace cap:SYS_PTRACE"));
  EXPECT_THAT(
      text,
      HasSubstr(
          "master  worker  cuda_nvlink,cuda_ipc,cuda_basic,rpcjob_cma,cma,basic  cuda:0->cuda:1"));
}

TEST(Render, UnschedulableShowsTheReason) {
  const Plan plan = planJob(job({group("w", 1, 2)}), cluster({gpuNode("a", 1)}));
  EXPECT_THAT(renderTable(plan),
              HasSubstr("Unschedulable: each 'w' worker needs 2 nvidia.com/gpu"));
  const YAML::Node y = YAML::Load(renderYaml(plan));
  EXPECT_EQ(y["outcome"].as<std::string>(), "Unschedulable");
  EXPECT_FALSE(y["assignment"]);
}

TEST(Render, YamlCarriesTheAssignment) {
  const Plan plan = planJob(job({group("w", 2, 1)}), cluster({gpuNode("a", 2, true)}));
  ASSERT_TRUE(plan.planned());
  const YAML::Node y = YAML::Load(renderYaml(plan));
  EXPECT_EQ(y["outcome"].as<std::string>(), "Planned");
  EXPECT_EQ(y["pods"].size(), 2u);
  EXPECT_EQ(y["pods"][0]["gpus"].as<int>(), 1);
  YAML::Emitter out;
  out << y["assignment"];
  EXPECT_TRUE(parseAssignment(out.c_str()) == plan.assignment);
}

TEST(Render, YamlListsTheDerivedPairsUpToALimit) {
  const Plan small = planJob(job({group("w", 2, 1)}), cluster({gpuNode("a", 2, true)}));
  ASSERT_TRUE(small.planned());
  const YAML::Node y = YAML::Load(renderYaml(small));
  ASSERT_EQ(y["pairs"].size(), 2u);
  EXPECT_EQ(y["pairs"][1]["from"].as<std::string>(), "w1");
  EXPECT_EQ(y["pairs"][1]["to"].as<std::string>(), "w0");
  EXPECT_EQ(y["pairs"][1]["deviceMap"]["cuda:0"].as<std::string>(), "cuda:0");
  EXPECT_FALSE(y["morePairs"]);
  // 101 CPU workers: 10100 ordered pairs, 10000 listed.
  const Plan big = planJob(job({group("w", 101, 0)}), cluster({gpuNode("a", 0)}));
  ASSERT_TRUE(big.planned()) << big.message;
  const YAML::Node b = YAML::Load(renderYaml(big));
  EXPECT_EQ(b["pairs"].size(), 10000u);
  EXPECT_EQ(b["morePairs"].as<int>(), 100);
  EXPECT_THAT(renderTable(big), HasSubstr("... and 9900 more pairs"));
}

}  // namespace
}  // namespace rpcjob::planner
