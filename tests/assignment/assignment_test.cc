#include "rpcjob/assignment/assignment.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "rpcjob/assignment/environment.h"

namespace rpcjob {
namespace {

using ::testing::HasSubstr;

// The per-pair table of earlier releases (read for compatibility, see assignment.h).
const char* kTwoWorkers = R"(
apiVersion: rpcjob.dev/v1alpha1
kind: Assignment
job: {name: pipe, namespace: ml}
transports: [shm, uv]
channels: [cma, basic]
workers:
  - name: worker0
    rank: 1
    address: 10.0.0.2:29500
    gpus: [1]
    deviceMaps:
      master: {"cuda:1": "cuda:0"}
  - name: master
    rank: 0
    group: master
    address: 10.0.0.1:29500
    metricsPort: 9400
    node: a
    pod: pipe-master-0
    gpus: [0]
    deviceMaps:
      worker0: {"cuda:0": "cuda:1", cpu: "cuda:1x"}
    channels:
      worker0: [cuda_ipc, cma]
)";

TEST(AssignmentTest, RejectsMalformedDeviceInMap) {
  EXPECT_THAT(
      [] {
        try {
          parseAssignment(kTwoWorkers);
        } catch (const AssignmentError& e) {
          return std::string(e.what());
        }
        return std::string("no error");
      }(),
      HasSubstr("'cuda:1x' is not a device"));
}

std::string errorOf(const std::string& text) {
  try {
    parseAssignment(text);
  } catch (const AssignmentError& e) {
    return e.what();
  }
  return "no error";
}

Assignment twoWorkers() {
  Assignment a;
  a.jobName = "pipe";
  a.jobNamespace = "ml";
  a.transports = {"shm", "uv"};
  a.deviceMapMode = DeviceMapMode::Explicit;
  a.nodes["n"] = NodeLinks{true, false};
  a.nodes["o"] = NodeLinks{false, true};
  WorkerEntry m{"master", 0, "master", "127.0.0.1:1000", 9400, "n", "p", {0}, {}};
  m.explicitDeviceMaps["worker0"] = {{"cuda:0", "cuda:1"}, {"cpu", "cpu"}};
  WorkerEntry w{"worker0", 1, "worker", "127.0.0.1:1001", 0, "o", "", {1}, {}};
  a.workers = {m, w};
  return a;
}

TEST(AssignmentTest, RoundTripsThroughYaml) {
  const Assignment a = twoWorkers();
  const Assignment b = parseAssignment(toYaml(a));
  EXPECT_TRUE(a == b) << toYaml(b);
}

TEST(AssignmentTest, SortsByRankAndLooksUp) {
  std::string text = kTwoWorkers;
  text.replace(text.find("cpu: \"cuda:1x\""), 14, "cpu: \"cpu\"");
  const Assignment a = parseAssignment(text);
  ASSERT_EQ(a.worldSize(), 2);
  EXPECT_EQ(a.workers[0].name, "master");
  EXPECT_EQ(a.byName("worker0")->rank, 1);
  EXPECT_EQ(a.byRank(0)->metricsPort, 9400);
  EXPECT_EQ(a.byName("nobody"), nullptr);
  EXPECT_EQ(a.byRank(7), nullptr);
  EXPECT_EQ(a.workers[0].explicitDeviceMaps.at("worker0").at("cuda:0"), "cuda:1");
  EXPECT_EQ(a.jobNamespace, "ml");
  // An old table's maps are every map there is.
  EXPECT_EQ(a.deviceMapMode, DeviceMapMode::Explicit);
}

TEST(AssignmentTest, GrowsLinearlyWithTheWorkers) {
  // 1024 single-GPU workers on 128 nodes, addresses as the operator writes them.
  Assignment a;
  a.jobName = "big-training-job";
  a.jobNamespace = "research";
  for (int i = 0; i < 1024; ++i) {
    const std::string node = "gpu-node-" + std::to_string(i / 8);
    a.nodes[node] = NodeLinks{true, true};
    const std::string pod = "big-training-job-trainer-" + std::to_string(i);
    a.workers.push_back({"trainer" + std::to_string(i),
                         i,
                         "trainer",
                         pod + ".big-training-job.research.svc:29500",
                         9400,
                         node,
                         pod,
                         {0},
                         {}});
  }
  const std::string text = toYaml(a);
  // About 210 bytes a worker with these names, most of them the address.
  EXPECT_LT(text.size(), 1024u * 256) << "a quarter of the object limit at most";
  EXPECT_LT(text.size(), 1u << 20) << "a ConfigMap holds at most 1 MiB";
  EXPECT_TRUE(parseAssignment(text) == a);
}

TEST(AssignmentTest, RefusesPerPairFieldsInTheCurrentVersion) {
  const std::string one = "\n  - {name: a, rank: 0, address: 'h:1'";
  EXPECT_THAT(errorOf("apiVersion: rpcjob.dev/v1alpha2\nworkers:" + one + ", deviceMaps: {}}\n"),
              HasSubstr("workers[0].deviceMaps (line 3): per-pair tables are apiVersion "
                        "rpcjob.dev/v1alpha1"));
  EXPECT_THAT(errorOf("workers:" + one + ", channels: {}}\n"),
              HasSubstr("per-pair tables are apiVersion rpcjob.dev/v1alpha1"));
  EXPECT_THAT(errorOf("apiVersion: rpcjob.dev/v1alpha1\nnodes: {}\nworkers:" + one + "}\n"),
              HasSubstr("nodes (line 2): unknown field"));
  EXPECT_THAT(
      errorOf("apiVersion: rpcjob.dev/v1alpha1\nworkers:" + one + ", explicitDeviceMaps: {}}\n"),
      HasSubstr("unknown field"));
  EXPECT_THAT(errorOf("deviceMapMode: Sometimes\nworkers:" + one + "}\n"),
              HasSubstr("deviceMapMode (line 1): expected Auto or Explicit, got 'Sometimes'"));
  EXPECT_THAT(errorOf("nodes: {a: [rdma, warp]}\nworkers:" + one + "}\n"),
              HasSubstr("nodes.a (line 1): unknown capability 'warp'"));
}

TEST(AssignmentTest, NamesTheBadField) {
  Assignment a = twoWorkers();
  a.workers[1].rank = 0;
  EXPECT_THAT(errorOf(toYaml(a)), HasSubstr("rank 0 is used twice"));
  a = twoWorkers();
  a.workers[1].rank = 2;
  EXPECT_THAT(errorOf(toYaml(a)), HasSubstr("workers[1].rank: rank 2 is outside 0..1"));
  a = twoWorkers();
  a.workers[1].name = "master";
  EXPECT_THAT(errorOf(toYaml(a)), HasSubstr("duplicate worker name 'master'"));
  a = twoWorkers();
  a.workers[1].name = "Worker_0";
  EXPECT_THAT(errorOf(toYaml(a)), HasSubstr("is not a DNS label"));
  a = twoWorkers();
  a.workers[0].address = "nohost";
  EXPECT_THAT(errorOf(toYaml(a)), HasSubstr("workers[0].address: 'nohost' is not host:port"));
  a = twoWorkers();
  a.workers[0].explicitDeviceMaps["ghost"] = {{"cpu", "cpu"}};
  EXPECT_THAT(errorOf(toYaml(a)), HasSubstr("unknown peer 'ghost'"));
  a = twoWorkers();
  a.workers[0].explicitDeviceMaps["worker0"] = {{"cuda:0", "cuda:1"}, {"cuda:1", "cuda:1"}};
  EXPECT_THAT(errorOf(toYaml(a)), HasSubstr("one-to-one"));
  a = twoWorkers();
  a.workers[0].explicitDeviceMaps["master"] = {{"cpu", "cpu"}};
  EXPECT_THAT(errorOf(toYaml(a)), HasSubstr("no device map to itself"));
  a = twoWorkers();
  a.workers[1].explicitDeviceMaps["master"] = {{"cuda:1", "cuda:0"}};  // cpu is missing
  EXPECT_THAT(errorOf(toYaml(a)),
              HasSubstr("workers[0].explicitDeviceMaps.worker0: not the inverse of worker0's map"));
  a.workers[1].explicitDeviceMaps["master"] = {{"cuda:1", "cuda:0"}, {"cpu", "cpu"}};
  EXPECT_EQ(errorOf(toYaml(a)), "no error");
}

TEST(AssignmentTest, RejectsBadDocuments) {
  EXPECT_THAT(errorOf("workers: [ {name: a"), HasSubstr("not valid YAML"));
  EXPECT_THAT(errorOf("- 1\n- 2\n"), HasSubstr("expected a mapping"));
  EXPECT_THAT(errorOf("job: {name: x}\n"), HasSubstr("workers: missing"));
  EXPECT_THAT(errorOf("workers: []\n"), HasSubstr("at least one worker"));
  EXPECT_THAT(errorOf("workers:\n  - name: a\n    rank: zero\n    address: h:1\n"),
              HasSubstr("workers[0].rank (line 3): expected an integer, got 'zero'"));
  EXPECT_THAT(errorOf("workers:\n  - name: a\n    rank: 0\n    address: h:1\n    colour: red\n"),
              HasSubstr("workers[0].colour (line 5): unknown field"));
  EXPECT_THAT(errorOf("apiVersion: v9\nworkers: []\n"), HasSubstr("unsupported version"));
  EXPECT_THAT(errorOf("workers:\n  - rank: 0\n    address: h:1\n"),
              HasSubstr("missing field 'name'"));
  EXPECT_THAT(errorOf("workers:\n  - {name: a, rank: 0, address: 'h:99999'}\n"),
              HasSubstr("is not host:port"));
}

TEST(AssignmentTest, ParsesDevices) {
  EXPECT_EQ(parseDevice("cpu"), -1);
  EXPECT_EQ(parseDevice("cuda:0"), 0);
  EXPECT_EQ(parseDevice("cuda:12"), 12);
  EXPECT_FALSE(parseDevice("cuda:"));
  EXPECT_FALSE(parseDevice("cuda:-1"));
  EXPECT_FALSE(parseDevice("gpu:0"));
  EXPECT_FALSE(parseDevice("cuda:99999999999"));
}

TEST(AssignmentTest, PeerListGivesRanksInOrder) {
  const Assignment a = assignmentFromPeerList("a@127.0.0.1:1,b@127.0.0.1:2,c@host:3");
  ASSERT_EQ(a.worldSize(), 3);
  EXPECT_EQ(a.byName("c")->rank, 2);
  EXPECT_EQ(a.byRank(1)->address, "127.0.0.1:2");
  EXPECT_THROW(assignmentFromPeerList("a@h:1,b"), AssignmentError);
  EXPECT_THROW(assignmentFromPeerList("a@h:1,a@h:2"), AssignmentError);
}

class EnvironmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {kEnvWorkerName, kEnvRank, kEnvWorldSize, kEnvAssignmentPath, kEnvPeers}) {
      unsetenv(v);
    }
  }
  void TearDown() override { SetUp(); }
};

TEST_F(EnvironmentTest, ReadsTheFileAndFindsItself) {
  char path[] = "/tmp/rpcjob-assignment-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  writeAssignmentFile(twoWorkers(), path);
  setenv(kEnvAssignmentPath, path, 1);
  setenv(kEnvWorkerName, "worker0", 1);
  setenv(kEnvWorldSize, "2", 1);
  Identity id = identityFromEnvironment();
  EXPECT_EQ(id.name, "worker0");
  EXPECT_EQ(id.rank, 1);
  EXPECT_EQ(id.assignment.worldSize(), 2);
  setenv(kEnvRank, "0", 1);
  EXPECT_THAT(
      [] {
        try {
          identityFromEnvironment();
        } catch (const AssignmentError& e) {
          return std::string(e.what());
        }
        return std::string();
      }(),
      HasSubstr("RPCJOB_RANK=0 but the table gives 'worker0' rank 1"));
  std::remove(path);
}

TEST_F(EnvironmentTest, FallsBackToThePeerListAndRank) {
  setenv(kEnvPeers, "a@127.0.0.1:1,b@127.0.0.1:2", 1);
  setenv(kEnvRank, "1", 1);
  EXPECT_EQ(identityFromEnvironment().name, "b");
  setenv(kEnvWorldSize, "3", 1);
  EXPECT_THROW(identityFromEnvironment(), AssignmentError);
}

TEST_F(EnvironmentTest, SaysWhatIsMissing) {
  EXPECT_THROW(identityFromEnvironment(), AssignmentError);
  setenv(kEnvPeers, "a@127.0.0.1:1", 1);
  EXPECT_THROW(identityFromEnvironment(), AssignmentError);
  setenv(kEnvAssignmentPath, "/nonexistent/assignment.yaml", 1);
  setenv(kEnvWorkerName, "a", 1);
  EXPECT_THROW(identityFromEnvironment(), AssignmentError);
}

}  // namespace
}  // namespace rpcjob
