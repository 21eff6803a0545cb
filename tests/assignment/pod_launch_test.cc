// The launch spec and the launcher's report: the contract between the operator
// (writer of the spec, reader of the report) and rpcjob-launch.

#include "rpcjob/assignment/pod_launch.h"

#include <gtest/gtest.h>

#include "rpcjob/assignment/assignment.h"

namespace rpcjob {
namespace {

TEST(PodLaunch, RoundTripsAnyText) {
  const PodLaunch launch{
      {{"master",
        {"rpcjob-worker", "model-split", "--flag=\"quoted\" \\ back"},
        {{"RPCJOB_RANK", "0"}, {"MULTI", "line one\nline\ttwo \x01"}, {"EMPTY", ""}}},
       {"shard", {"/bin/prog", "$(RPCJOB_RANK)", "ünïcode"}, {}}}};
  const std::string json = toJson(launch);
  EXPECT_EQ(json.find('\n'), std::string::npos) << "one line";
  EXPECT_EQ(parsePodLaunch(json), launch);
}

void expectError(const std::string& text, const std::string& part) {
  try {
    parsePodLaunch(text);
    ADD_FAILURE() << "accepted: " << text;
  } catch (const AssignmentError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(PodLaunch, BadSpecsAreClearErrors) {
  expectError("", "not a JSON object");
  expectError("[1, 2]", "not a JSON object");
  expectError("{\"workers\": [", "not JSON");
  expectError("{}", "no workers");
  expectError(R"({"workers": []})", "no workers");
  expectError(R"({"workers": [7]})", "workers[0]: not an object");
  expectError(R"({"workers": [{"argv": ["a"]}]})", "workers[0].name");
  expectError(R"({"workers": [{"name": "a"}]})", "workers[0].argv: no command");
  expectError(R"({"workers": [{"name": "a", "argv": [["x"]]}]})", "argv[0]");
  expectError(R"({"workers": [{"name": "a", "argv": ["x"]}, {"name": "a", "argv": ["y"]}]})",
              "worker a twice");
  expectError(R"({"workers": [{"name": "a", "argv": ["x"], "env": {"A": "b"}}]})",
              "env: not a list");
  expectError(R"({"workers": [{"name": "a", "argv": ["x"], "env": [{"value": "b"}]}]})",
              "env[0].name");
}

TEST(PodReport, RoundTripsWithTheFailedWorkerFirst) {
  const PodReport report{{{"a", 143, 15, 0}, {"b", 3, 0, 2}}, "b"};
  const PodReport back = parsePodReport(toJson(report));
  EXPECT_EQ(back.failed, "b");
  ASSERT_EQ(back.workers.size(), 2u);
  EXPECT_EQ(back.workers[0], report.workers[1]) << "the failed worker first";
  EXPECT_EQ(back.workers[1], report.workers[0]);
}

TEST(PodReport, StaysUnderTheKubeletsLimitKeepingTheFailedWorker) {
  PodReport report;
  for (int i = 0; i < 200; ++i)
    report.workers.push_back({"worker" + std::to_string(i), 143, 15, 0});
  report.workers[150].exitCode = 3;
  report.workers[150].signal = 0;
  report.failed = "worker150";
  const std::string json = toJson(report);
  EXPECT_LE(json.size(), 4096u);
  const PodReport back = parsePodReport(json);
  ASSERT_FALSE(back.workers.empty());
  EXPECT_LT(back.workers.size(), 200u);
  EXPECT_EQ(back.workers[0].name, "worker150");
  EXPECT_EQ(back.workers[0].exitCode, 3);
}

TEST(PodReport, BadReportsAreErrors) {
  EXPECT_THROW(parsePodReport("segfault"), AssignmentError);
  EXPECT_THROW(parsePodReport(R"({"failed": "a"})"), AssignmentError);
  EXPECT_THROW(parsePodReport(R"({"workers": [{"name": "a", "exitCode": "x"}]})"), AssignmentError);
}

}  // namespace
}  // namespace rpcjob
