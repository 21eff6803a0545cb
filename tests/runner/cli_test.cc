// The rpcjob binary's validate and plan commands: bad manifests give clear errors
// (field and line) and exit 2; plans on described clusters of several shapes.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include "process.h"
#include "rpcjob/runner/local_machine.h"

namespace rpcjob::runner {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::runProgram;
using testing::TempDir;

std::string gpuJob(const std::string& name, int masters, int workers, int gpus,
                   const std::string& extraTemplate = "") {
  return "apiVersion: rpcjob.dev/v1alpha1\nkind: RpcJob\nmetadata: {name: " + name +
         "}\nspec:\n  workers:\n"
         "    - name: master\n      replicas: " +
         std::to_string(masters) + "\n      gpusPerWorker: " + std::to_string(gpus) +
         "\n      template: {spec: {containers: [{name: w}]" + extraTemplate +
         "}}\n"
         "    - name: worker\n      replicas: " +
         std::to_string(workers) + "\n      gpusPerWorker: " + std::to_string(gpus) +
         "\n      template: {spec: {containers: [{name: w}]" + extraTemplate +
         "}}\n"
         "  placement: {policy: Pack, workersPerPod: Auto}\n";
}

TEST(Cli, VersionAndUsage) {
  const auto v = runProgram({RPCJOB_BINARY, "--version"});
  EXPECT_EQ(v.exitCode, 0);
  EXPECT_THAT(v.output, HasSubstr("rpcjob "));
  EXPECT_EQ(runProgram({RPCJOB_BINARY}).exitCode, 2);
  const auto bad = runProgram({RPCJOB_BINARY, "frobnicate"});
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_THAT(bad.output, HasSubstr("unknown command frobnicate"));
  EXPECT_EQ(runProgram({RPCJOB_BINARY, "run", "x.yaml", "--bogus", "1"}).exitCode, 2);
}

// Hand-picked ports are not reserved: inside the ephemeral range the workers'
// own connections took some before their owners listened (a 40-worker job
// failed with "Address already in use"), so run refuses them up front.
TEST(Cli, RunRefusesFirstPortInTheEphemeralRange) {
  const auto range = rpcjob::runner::ephemeralPortRange();
  if (!range) GTEST_SKIP() << "no /proc/sys/net/ipv4/ip_local_port_range here";
  const std::string job = std::string(RPCJOB_SOURCE_DIR) + "/examples/transfer-bench.yaml";
  const auto r =
      runProgram({RPCJOB_BINARY, "run", job, "--first-port", std::to_string(range->first + 10)});
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("ephemeral port range"));
  EXPECT_THAT(r.output, HasSubstr("choose ports below " + std::to_string(range->first)));
}

TEST(Cli, ValidateAcceptsTheExamples) {
  for (const char* example : {"transfer-bench.yaml", "model-split.yaml"}) {
    const auto r = runProgram(
        {RPCJOB_BINARY, "validate", std::string(RPCJOB_SOURCE_DIR) + "/examples/" + example});
    EXPECT_EQ(r.exitCode, 0) << r.output;
    EXPECT_THAT(r.output, HasSubstr("valid RpcJob"));
  }
}

struct BadCase {
  const char* what;
  std::string manifest;
  std::vector<std::string> expected;  // substrings of the error output
};

TEST(Cli, ValidateRejectsBadManifestsNamingFieldAndLine) {
  const std::string head =
      "apiVersion: rpcjob.dev/v1alpha1\nkind: RpcJob\nmetadata: {name: bad}\nspec:\n";
  const std::vector<BadCase> cases = {
      {"unknown field",
       head + "  workers:\n    - name: w\n      replicaz: 2\n",
       {"spec.workers[0].replicaz (line 7)", "unknown field"}},
      {"wrong type",
       head + "  workers:\n    - name: w\n      replicas: two\n",
       {"spec.workers[0].replicas (line 7)"}},
      {"negative replicas",
       head + "  workers:\n    - name: w\n      replicas: -2\n",
       {"spec.workers[0].replicas (line 7)", ">= 1"}},
      {"duplicate names",
       head + "  workers:\n    - name: w\n    - name: w\n",
       {"spec.workers[1].name (line 7)", "duplicate group name"}},
      {"not YAML", "spec: [unclosed\n", {"invalid RpcJob"}},
  };
  TempDir dir;
  for (const auto& c : cases) {
    const auto r = runProgram({RPCJOB_BINARY, "validate", dir.write("bad.yaml", c.manifest)});
    EXPECT_EQ(r.exitCode, 2) << c.what << "\n" << r.output;
    EXPECT_THAT(r.output, HasSubstr("invalid RpcJob")) << c.what;
    for (const auto& e : c.expected)
      EXPECT_THAT(r.output, HasSubstr(e)) << c.what << "\n" << r.output;
  }
  const auto missing = runProgram({RPCJOB_BINARY, "validate", dir.path() + "/none.yaml"});
  EXPECT_EQ(missing.exitCode, 2);
  EXPECT_THAT(missing.output, HasSubstr("cannot read"));
}

class Plan : public ::testing::Test {
 protected:
  testing::Ran plan(const std::string& job, const std::string& nodes,
                    const std::string& output = "table") {
    return runProgram({RPCJOB_BINARY, "plan", dir_.write("job.yaml", job), "--nodes",
                       dir_.write("nodes.yaml", nodes), "--output", output});
  }
  TempDir dir_;
};

TEST_F(Plan, SingleNodeEightGpusOnePodOverNvlink) {
  const auto r = plan(gpuJob("pipe", 1, 7, 1), "nodes:\n  - {name: dgx, gpus: 8, nvlink: true}\n");
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("Planned: 8 workers on 1 node(s) in 1 pod(s)"));
  EXPECT_THAT(r.output, HasSubstr("0     master   master  dgx   pipe-pod0  0"));
  EXPECT_THAT(r.output, HasSubstr("7     worker6  worker  dgx   pipe-pod0  7"));
  EXPECT_THAT(r.output,
              HasSubstr("master   worker0  cuda_nvlink,cuda_ipc,cuda_basic,rpcjob_cma,cma,basic  "
                        "cuda:0->cuda:1"));
}

TEST_F(Plan, TwoNodesWithAndWithoutRdma) {
  const std::string job = gpuJob("split", 1, 1, 1);
  const std::string withRdma =
      "nodes:\n  - {name: a, gpus: 1, rdma: true}\n  - {name: b, gpus: 1, rdma: true}\n";
  const auto r = plan(job, withRdma);
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("Planned: 2 workers on 2 node(s)"));
  EXPECT_THAT(r.output, HasSubstr("cuda_gdr"));
  EXPECT_THAT(r.output, HasSubstr("cap:IPC_LOCK"));

  const auto plain = plan(job, "nodes:\n  - {name: a, gpus: 1}\n  - {name: b, gpus: 1}\n");
  ASSERT_EQ(plain.exitCode, 0) << plain.output;
  EXPECT_THAT(plain.output, Not(HasSubstr("cuda_gdr")));
  EXPECT_THAT(plain.output, HasSubstr("master  worker  cuda_basic,mpt,basic  cuda:0->cuda:0"));

  const auto yaml = plan(job, withRdma, "yaml");
  ASSERT_EQ(yaml.exitCode, 0) << yaml.output;
  const YAML::Node y = YAML::Load(yaml.output);
  EXPECT_EQ(y["outcome"].as<std::string>(), "Planned");
  EXPECT_EQ(y["assignment"]["workers"].size(), 2u);
  EXPECT_EQ(y["assignment"]["workers"][0]["name"].as<std::string>(), "master");
  // The table is compact; the per-pair view is derived beside it.
  EXPECT_FALSE(y["assignment"]["workers"][0]["deviceMaps"]);
  EXPECT_EQ(y["assignment"]["nodes"]["a"][0].as<std::string>(), "rdma");
  ASSERT_EQ(y["pairs"].size(), 2u);
  EXPECT_EQ(y["pairs"][0]["from"].as<std::string>(), "master");
  EXPECT_EQ(y["pairs"][0]["to"].as<std::string>(), "worker");
  EXPECT_EQ(y["pairs"][0]["channels"][0].as<std::string>(), "cuda_gdr");
  EXPECT_EQ(y["pairs"][0]["deviceMap"]["cuda:0"].as<std::string>(), "cuda:0");
}

TEST_F(Plan, TaintedNodesNeedTolerations) {
  const std::string nodes =
      "nodes:\n"
      "  - {name: tainted, gpus: 8, taints: [{key: dedicated, value: ml, effect: NoSchedule}]}\n"
      "  - {name: small, gpus: 1}\n";
  const auto refused = plan(gpuJob("t", 1, 1, 2), nodes);
  EXPECT_EQ(refused.exitCode, 2) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("Unschedulable"));

  const auto tolerated = plan(
      gpuJob("t", 1, 1, 2,
             ", tolerations: [{key: dedicated, operator: Equal, value: ml, effect: NoSchedule}]"),
      nodes);
  ASSERT_EQ(tolerated.exitCode, 0) << tolerated.output;
  EXPECT_THAT(tolerated.output, HasSubstr("master  master  tainted"));
}

TEST_F(Plan, NotEnoughGpusIsUnschedulable) {
  const auto r =
      plan(gpuJob("big", 1, 3, 4), "nodes:\n  - {name: a, gpus: 8}\n  - {name: b, gpus: 4}\n");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_THAT(r.output, HasSubstr("Unschedulable"));
  EXPECT_THAT(r.output, HasSubstr("nvidia.com/gpu"));
}

// `rpcjob plan --local`: what `rpcjob run` would do here, with a recorded topology.
TEST_F(Plan, LocalWithARecordedTopologyShowsItAndUsesIt) {
  const std::string topo =
      std::string(RPCJOB_SOURCE_DIR) + "/tests/planner/topologies/pcie-4gpu-bridged.txt";
  const auto r = runProgram({RPCJOB_BINARY, "plan",
                             std::string(RPCJOB_SOURCE_DIR) + "/examples/model-split-cuda.yaml",
                             "--local", "--gpu-topology", topo});
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("# GPU topology: 4 GPU(s)"));
  EXPECT_THAT(r.output, HasSubstr("NVLink 0-2 NV4, 1-3 NV4"));
  EXPECT_THAT(r.output, HasSubstr("cuda:0->cuda:2"));  // the bridged pair
  const auto shared = runProgram(
      {RPCJOB_BINARY, "plan", std::string(RPCJOB_SOURCE_DIR) + "/examples/model-split-one-gpu.yaml",
       "--local", "--gpus", "1"});
  EXPECT_EQ(shared.exitCode, 0) << shared.output;
  EXPECT_THAT(shared.output, HasSubstr("cuda:0->cuda:0"));
  EXPECT_THAT(shared.output, HasSubstr("share GPU 0"));
  const auto twoOnOne = runProgram(
      {RPCJOB_BINARY, "plan", std::string(RPCJOB_SOURCE_DIR) + "/examples/model-split-cuda.yaml",
       "--local", "--gpus", "1"});
  EXPECT_EQ(twoOnOne.exitCode, 2);
  EXPECT_THAT(twoOnOne.output, HasSubstr("Unschedulable"));
  const auto bad = runProgram({RPCJOB_BINARY, "plan",
                               std::string(RPCJOB_SOURCE_DIR) + "/examples/model-split-cuda.yaml",
                               "--local", "--gpu-topology", dir_.write("t.txt", "not a matrix\n")});
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_THAT(bad.output, HasSubstr("not a GPU topology"));
  const auto both = runProgram({RPCJOB_BINARY, "plan",
                                std::string(RPCJOB_SOURCE_DIR) + "/examples/model-split-cuda.yaml",
                                "--local", "--nodes", dir_.write("n.yaml", "nodes: []\n")});
  EXPECT_EQ(both.exitCode, 2);
}

TEST_F(Plan, BadNodesFileNamesTheField) {
  const auto r = plan(gpuJob("x", 1, 1, 0), "nodes:\n  - {name: a, gpuz: 8}\n");
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_THAT(r.output, HasSubstr("invalid cluster description"));
  EXPECT_THAT(r.output, HasSubstr("gpuz"));
}

}  // namespace
}  // namespace rpcjob::runner
