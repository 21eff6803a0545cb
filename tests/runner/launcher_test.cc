// rpcjob-launch with real processes, run the way a pod runs it: the spec in
// RPCJOB_POD_WORKERS (or --spec), the report to a file (the container's
// termination message). Workers are small shell programs.

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <fstream>
#include <sstream>
#include <string>

#include "process.h"
#include "rpcjob/assignment/environment.h"
#include "rpcjob/assignment/intra_op_threads.h"
#include "rpcjob/assignment/pod_launch.h"
#include "rpcjob/runner/pod_launcher.h"

namespace rpcjob::runner {
namespace {

using testing::runProgram;
using testing::TempDir;

PodWorker shell(const std::string& name, int rank, const std::string& script) {
  return {name,
          {"/bin/sh", "-c", script},
          {{kEnvWorkerName, name}, {kEnvRank, std::to_string(rank)}, {"GREETING", "hello"}}};
}

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Launched {
  testing::Ran ran;
  PodReport report;
  bool reported = false;
};

Launched launch(const PodLaunch& spec, const testing::RunOptions& options = {}) {
  TempDir dir;
  const std::string specFile = dir.write("spec.json", toJson(spec));
  const std::string reportFile = dir.path() + "/termination-log";
  Launched out;
  out.ran = runProgram(
      {RPCJOB_LAUNCH_BINARY, "--spec", specFile, "--report", reportFile, "--grace-period", "5"},
      options);
  const std::string report = readFile(reportFile);
  if (!report.empty()) {
    out.report = parsePodReport(report);
    out.reported = true;
  }
  return out;
}

const WorkerExit* exitOf(const PodReport& report, const std::string& name) {
  for (const auto& w : report.workers) {
    if (w.name == name) return &w;
  }
  return nullptr;
}

TEST(Launcher, RunsEveryWorkerWithItsIdentityAndPrefixedOutput) {
  // $(VAR) in argv expands from the worker's env, as the kubelet would for a container.
  const PodLaunch spec{
      {shell("master", 0, "echo \"$GREETING from $RPCJOB_WORKER_NAME rank $RPCJOB_RANK\""),
       shell("shard", 1,
             "echo \"$GREETING from $RPCJOB_WORKER_NAME\"; echo arg $(RPCJOB_RANK) >&2")}};
  const Launched l = launch(spec);
  EXPECT_EQ(l.ran.exitCode, 0) << l.ran.output;
  EXPECT_NE(l.ran.output.find("[master] hello from master rank 0\n"), std::string::npos)
      << l.ran.output;
  EXPECT_NE(l.ran.output.find("[shard] hello from shard\n"), std::string::npos) << l.ran.output;
  EXPECT_NE(l.ran.output.find("[shard] arg 1\n"), std::string::npos) << l.ran.output;
  ASSERT_TRUE(l.reported);
  EXPECT_EQ(l.report.failed, "");
  ASSERT_EQ(l.report.workers.size(), 2u);
  EXPECT_EQ(exitOf(l.report, "master")->exitCode, 0);
  EXPECT_EQ(exitOf(l.report, "shard")->exitCode, 0);
}

TEST(Launcher, AFailedWorkerStopsThePodWithItsCodeAndReport) {
  const PodLaunch spec{{shell("master", 0, "echo up; exec sleep 60"),
                        shell("shard", 1, "sleep 0.3; echo giving up; exit 3")}};
  const Launched l = launch(spec);
  EXPECT_EQ(l.ran.exitCode, 3) << l.ran.output;
  EXPECT_LT(l.ran.seconds, 5) << "the other worker is stopped with SIGTERM, not waited for";
  EXPECT_NE(l.ran.output.find("[shard] giving up"), std::string::npos) << l.ran.output;
  ASSERT_TRUE(l.reported);
  EXPECT_EQ(l.report.failed, "shard");
  ASSERT_NE(exitOf(l.report, "shard"), nullptr);
  EXPECT_EQ(exitOf(l.report, "shard")->exitCode, 3);
  ASSERT_NE(exitOf(l.report, "master"), nullptr);
  EXPECT_EQ(exitOf(l.report, "master")->signal, SIGTERM);
  EXPECT_EQ(exitOf(l.report, "master")->exitCode, 128 + SIGTERM);
  EXPECT_NE(l.ran.output.find("rpcjob-launch: {\"failed\":\"shard\""), std::string::npos)
      << "the report is in the log too";
}

TEST(Launcher, AWorkerKilledByASignalExitsTheLauncherWith128PlusIt) {
  const PodLaunch spec{{shell("master", 0, "exec sleep 60"), shell("shard", 1, "kill -9 0")}};
  const Launched l = launch(spec);
  EXPECT_EQ(l.ran.exitCode, 128 + SIGKILL) << l.ran.output;
  ASSERT_TRUE(l.reported);
  EXPECT_EQ(l.report.failed, "shard");
  EXPECT_EQ(exitOf(l.report, "shard")->signal, SIGKILL);
}

TEST(Launcher, SigtermFromTheKubeletStopsEveryWorker) {
  const PodLaunch spec{
      {shell("master", 0, "echo ready; exec sleep 60"), shell("shard", 1, "exec sleep 60")}};
  testing::RunOptions options;
  options.interruptWhen = "[master] ready";
  options.signal = SIGTERM;
  const Launched l = launch(spec, options);
  EXPECT_EQ(l.ran.exitCode, 128 + SIGTERM) << l.ran.output;
  EXPECT_LT(l.ran.seconds, 5);
  ASSERT_TRUE(l.reported);
  EXPECT_EQ(l.report.failed, "") << "nobody failed: the pod was stopped";
  EXPECT_EQ(exitOf(l.report, "shard")->signal, SIGTERM);
}

TEST(Launcher, ReadsTheSpecFromTheEnvironmentAndHidesItFromWorkers) {
  TempDir dir;
  const PodLaunch spec{{shell("a", 0, "echo spec=${RPCJOB_POD_WORKERS:-none}")}};
  setenv(kEnvPodWorkers, toJson(spec).c_str(), 1);
  setenv(kEnvTerminationLog, (dir.path() + "/log").c_str(), 1);
  const testing::Ran ran = runProgram({RPCJOB_LAUNCH_BINARY});
  unsetenv(kEnvPodWorkers);
  unsetenv(kEnvTerminationLog);
  EXPECT_EQ(ran.exitCode, 0) << ran.output;
  EXPECT_NE(ran.output.find("[a] spec=none"), std::string::npos) << ran.output;
  EXPECT_EQ(parsePodReport(readFile(dir.path() + "/log")).workers.size(), 1u);
}

TEST(Launcher, BadSpecsAreClearErrors) {
  TempDir dir;
  for (const std::string& bad : {std::string("not json ["), std::string(R"({"workers":[]})"),
                                 std::string(R"({"workers":[{"name":"a"}]})")}) {
    const testing::Ran ran =
        runProgram({RPCJOB_LAUNCH_BINARY, "--spec", dir.write("bad.json", bad)});
    EXPECT_EQ(ran.exitCode, 2) << bad << "\n" << ran.output;
    EXPECT_NE(ran.output.find("rpcjob-launch: RPCJOB_POD_WORKERS"), std::string::npos)
        << ran.output;
  }
  const testing::Ran none = runProgram({RPCJOB_LAUNCH_BINARY});
  EXPECT_EQ(none.exitCode, 2);
  EXPECT_NE(none.output.find("no spec"), std::string::npos) << none.output;
  EXPECT_EQ(runProgram({RPCJOB_LAUNCH_BINARY, "--bogus"}).exitCode, 2);
  const testing::Ran missing = launch(PodLaunch{{{"a", {"/nonexistent/program"}, {}}}}).ran;
  EXPECT_EQ(missing.exitCode, 127) << missing.output;
  EXPECT_NE(missing.output.find("[a] rpcjob: cannot run /nonexistent/program"), std::string::npos)
      << missing.output;
}

// The pure part: exit codes from supervisor results.
TEST(PodLauncher, ExitCodes) {
  SupervisorResult r;
  r.workers = {{"a", 0, ExitStatus::exited(0), 0}, {"b", 1, ExitStatus::signaled(SIGSEGV), 0}};
  r.phase = JobPhase::Failed;
  r.failedWorker = 1;
  EXPECT_EQ(podExitCode(r), 128 + SIGSEGV);
  EXPECT_EQ(podReportOf(r).failed, "b");
  r.failedWorker = -1;
  r.interruptSignal = SIGTERM;
  EXPECT_EQ(podExitCode(r), 128 + SIGTERM);
  r.interruptSignal = 0;
  EXPECT_EQ(podExitCode(r), 1) << "failed without a worker to blame (a deadline)";
  r.phase = JobPhase::Succeeded;
  EXPECT_EQ(podExitCode(r), 0);
  const auto launches = podWorkerLaunches(
      PodLaunch{{{"w", {"$(HOME)/bin", "$(RPCJOB_RANK)", "$(NOPE)"}, {{kEnvRank, "4"}}}}},
      {{"HOME", "/home/x"}, {kEnvRank, "9"}});
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].rank, 4);
  EXPECT_EQ(launches[0].argv, (std::vector<std::string>{"/home/x/bin", "4", "$(NOPE)"}));
}

// The pod's cores are shared among its workers as OMP_NUM_THREADS, except where a
// worker's spec or the container's environment already sets it.
TEST(PodLauncher, WorkersShareThePodsCoresAsIntraOpThreads) {
  auto threads = [](const WorkerLaunch& w) {
    std::string value = "<unset>";
    for (const auto& [name, v] : w.env) {
      if (name == kEnvOmpNumThreads) value = v;
    }
    return value;
  };
  PodLaunch pod{{shell("a", 0, "true"), shell("b", 1, "true"), shell("c", 2, "true")}};
  pod.workers[2].env.push_back({kEnvOmpNumThreads, "7"});
  const auto shared = podWorkerLaunches(pod, {{"HOME", "/home/x"}}, 16);
  ASSERT_EQ(shared.size(), 3u);
  EXPECT_EQ(threads(shared[0]), "5");
  EXPECT_EQ(threads(shared[1]), "5");
  EXPECT_EQ(threads(shared[2]), "7");
  int passive = 0;
  for (const auto& [name, value] : shared[0].env)
    passive += name == kEnvOmpWaitPolicy && value == "PASSIVE";
  EXPECT_EQ(passive, 1);
  const auto inherited = podWorkerLaunches(pod, {{kEnvOmpNumThreads, "2"}}, 16);
  EXPECT_EQ(threads(inherited[0]), "<unset>") << "the container's own value reaches it";
  const PodLaunch alone{{shell("a", 0, "true")}};
  EXPECT_EQ(threads(podWorkerLaunches(alone, {}, 16)[0]), "<unset>") << "libtorch's default fits";
}

}  // namespace
}  // namespace rpcjob::runner
