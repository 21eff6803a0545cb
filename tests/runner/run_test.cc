// `rpcjob run` end to end, with real processes: every example with the real
// rpcjob-worker, the restart policy, the deadline, Ctrl-C / SIGTERM leaving no
// process behind, a job that needs more GPUs than the machine has.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <regex>

#include "process.h"
#include "rpcjob/api/names.h"
#include "rpcjob/api/parse.h"
#include "rpcjob/runner/local_machine.h"

namespace rpcjob::runner {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using testing::processesWithEnv;
using testing::runProgram;
using testing::TempDir;

// A job of shell workers: group name -> (replicas, shell script).
std::string shellJob(const std::string& name,
                     const std::vector<std::pair<std::string, std::string>>& groups,
                     const std::string& runPolicy, int replicas = 1) {
  std::string out = "apiVersion: rpcjob.dev/v1alpha1\nkind: RpcJob\nmetadata: {name: " + name +
                    "}\nspec:\n  workers:\n";
  for (const auto& [group, script] : groups) {
    out += "    - name: " + group + "\n      replicas: " + std::to_string(replicas) +
           "\n      template:\n        spec:\n          containers:\n            - name: w\n"
           "              command: [sh, -c]\n              args: ['" +
           script + "']\n";
  }
  return out + "  runPolicy: " + runPolicy + "\n";
}

std::string uniqueName(const std::string& base) {
  return base + "-" + std::to_string(getpid()) + "-" +
         std::to_string(::testing::UnitTest::GetInstance()->random_seed());
}

// How many times `what` stands in `text` (not overlapping).
size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = 0; (at = text.find(what, at)) != std::string::npos; at += what.size()) ++n;
  return n;
}

std::vector<std::string> runArgs(const std::string& manifest, const TempDir& dir) {
  std::vector<std::string> args = {
      RPCJOB_BINARY, "run", manifest, "--run-dir", dir.path() + "/run", "--grace-period", "2"};
#ifdef RPCJOB_WORKER_BINARY
  args.insert(args.end(), {"--worker-binary", RPCJOB_WORKER_BINARY});
#endif
  return args;
}

// The summary row of a worker: "name  rank  exit  restarts ...".
void expectSummaryRow(const std::string& output, const std::string& worker, int rank,
                      const std::string& exit, int restarts) {
  const std::regex row("\n" + worker + " +" + std::to_string(rank) + " +" + exit + " +" +
                       std::to_string(restarts) + " ");
  EXPECT_TRUE(std::regex_search(output, row)) << "no summary row for " << worker << "\n" << output;
}

#ifdef RPCJOB_WORKER_BINARY
TEST(Run, EveryExampleRunsWithTheRealWorker) {
  int ran = 0;
  // An example whose workers need more GPUs than this machine has (NVML, as
  // `rpcjob run` counts them) is skipped, and said so: on a machine without GPUs
  // that is every example with gpusPerWorker > 0 (model-split-cuda.yaml).
  std::string noGpusWhy;
  const int machineGpus = nvmlGpuCount(noGpusWhy);
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(RPCJOB_SOURCE_DIR) + "/examples")) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    std::ifstream in(entry.path());
    const api::ParseResult parsed =
        api::parseRpcJob(std::string(std::istreambuf_iterator<char>(in), {}));
    ASSERT_TRUE(parsed.ok());
    // A program of its own (the seeds' programs, examples/<name>/) is not built
    // here: tests/sdk builds it against the installed rpcjob and runs its manifest.
    bool ownProgram = false;
    for (const auto& group : parsed.job.spec.workers) {
      for (const auto& c : group.podTemplate.containers)
        ownProgram = ownProgram || c.command.empty() || c.command.front() != "rpcjob-worker";
    }
    if (ownProgram) {
      std::cout << "[  SKIPPED ] " << entry.path().filename().string()
                << ": runs a program of its own (tests/sdk runs it)\n";
      continue;
    }
    int jobGpus = 0;
    for (const auto& group : parsed.job.spec.workers)
      jobGpus += group.replicas * group.gpusPerWorker;
    if (jobGpus > machineGpus) {
      std::cout << "[  SKIPPED ] " << entry.path().filename().string() << ": needs " << jobGpus
                << " GPUs, this machine has " << machineGpus
                << (noGpusWhy.empty() ? "" : " (" + noGpusWhy + ")") << "\n";
      continue;
    }
    TempDir dir;
    const auto r = runProgram(runArgs(entry.path().string(), dir), {"", SIGINT, 240});
    EXPECT_EQ(r.exitCode, 0) << r.output;
    EXPECT_THAT(r.output, HasSubstr("Succeeded"));
    int rank = 0;  // the examples' groups are in rank order
    for (const auto& name : api::workerNames(parsed.job.spec))
      expectSummaryRow(r.output, name, rank++, "0", 0);
    EXPECT_TRUE(std::filesystem::exists(dir.path() + "/run/assignment.yaml"));
    const std::string stem = entry.path().stem().string();
    if (stem == "transfer-bench") {
      // rank 0 prints a row of figures per pair of workers and channel: every
      // pair over basic at least (always usable), with the transport.
      const std::vector<std::string> names = {"bench", "peer0", "peer1", "peer2"};
      for (size_t i = 0; i < names.size(); ++i) {
        for (size_t j = i + 1; j < names.size(); ++j) {
          EXPECT_TRUE(
              std::regex_search(r.output, std::regex("\\[bench\\] " + names[i] + " +" + names[j] +
                                                     " +basic +[a-z]+ +[0-9.]+ +[0-9.]+ +[0-9]+ ")))
              << names[i] << " -> " << names[j] << "\n"
              << r.output;
        }
      }
      EXPECT_THAT(r.output, HasSubstr("GB/s"));
      // The summary counts what the channel passes moved (their runtimes keep
      // the worker's decorators): every worker's first channel row is basic's,
      // with bytes both ways, never "0 B".
      for (size_t rank = 0; rank < names.size(); ++rank) {
        EXPECT_TRUE(std::regex_search(
            r.output, std::regex("\n" + names[rank] + " +" + std::to_string(rank) +
                                 " +0 +0 +basic +[0-9.]+ (KiB|MiB|GiB) +[0-9.]+ (KiB|MiB|GiB)\n")))
            << names[rank] << "\n"
            << r.output;
      }
    }
    ++ran;
  }
  EXPECT_GE(ran, 1);
}
#endif

#ifdef RPCJOB_WORKER_BINARY
// A job of `rpcjob-worker send` workers (CPU) with these arguments after "send".
std::string sendJob(const std::string& name, int replicas, const std::string& args) {
  return "apiVersion: rpcjob.dev/v1alpha1\nkind: RpcJob\nmetadata: {name: " + name +
         "}\nspec:\n  workers:\n    - name: w\n      replicas: " + std::to_string(replicas) +
         "\n      template:\n        spec:\n          containers:\n            - name: w\n"
         "              command: [rpcjob-worker]\n              args: [send, " +
         args + "]\n  runPolicy: {backoffLimit: 0}\n";
}

// What tests/gpu/run-all.sh topology does on a GPU machine, on the CPU: every
// worker sends to every other, and benchmarks/gpu/channel_matrix.py reads the
// channel of each ordered pair from the workers' metrics files.
TEST(Run, EveryRankSendsToEveryPeerAndTheMatrixShowsEachPair) {
  TempDir dir;
  const std::string manifest = dir.write(
      "matrix.yaml", sendJob(uniqueName("matrix"), 3,
                             "--bytes, \"1048576\", --count, \"3\", --verify, --every-rank"));
  const auto r = runProgram(runArgs(manifest, dir), {"", SIGINT, 120});
  ASSERT_EQ(r.exitCode, 0) << r.output;
  EXPECT_EQ(occurrences(r.output, "x 1048576 bytes to w"), 6u) << r.output;
  EXPECT_EQ(occurrences(r.output, "values exact: yes"), 6u) << r.output;
  const std::string script = std::string(RPCJOB_SOURCE_DIR) + "/benchmarks/gpu/channel_matrix.py";
  const auto matrix = runProgram({"/usr/bin/env", "python3", script, dir.path() + "/run"});
  EXPECT_EQ(matrix.exitCode, 0) << matrix.output;
  EXPECT_THAT(matrix.output, HasSubstr("6 of 6 ordered pairs carried bytes"));
  EXPECT_TRUE(
      std::regex_search(matrix.output, std::regex("\\| w1 \\(cpu\\) \\| [a-z_]+ 3 MiB \\| - \\|")))
      << matrix.output;
  // The same run held to GPU channels it could not use: every pair named, exit 1.
  const auto held = runProgram({"/usr/bin/env", "python3", script, dir.path() + "/run", "--require",
                                "cuda_nvlink,cuda_ipc"});
  EXPECT_EQ(held.exitCode, 1) << held.output;
  EXPECT_THAT(held.output, HasSubstr("0 of 6 ordered pairs as required"));
  EXPECT_THAT(held.output, HasSubstr("w2 -> w0:"));
}

TEST(Run, SendFromTheWorkersGpuWithoutOneIsAClearError) {
  TempDir dir;
  const std::string manifest =
      dir.write("nogpu.yaml", sendJob(uniqueName("nogpu"), 2, "--device, gpu"));
  const auto r = runProgram(runArgs(manifest, dir), {"", SIGINT, 60});
  EXPECT_EQ(r.exitCode, 1) << r.output;
  // Whichever worker says it first: the runner then stops the other one.
  EXPECT_THAT(r.output, ContainsRegex("--device gpu: the assignment gives worker 'w[01]' no GPU"));
}
#endif

TEST(Run, CrashingWorkerRestartsTheJobUntilBackoffLimit) {
  TempDir dir;
  const std::string manifest = dir.write(
      "crash.yaml", shellJob("crash", {{"crasher", "echo boom; exit 3"}, {"sleeper", "sleep 30"}},
                             "{backoffLimit: 2}"));
  const auto r = runProgram(runArgs(manifest, dir));
  EXPECT_EQ(r.exitCode, 1) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("worker crasher ended with exit 3; restarting the job (restart 1 of 2)"));
  EXPECT_THAT(r.output, HasSubstr("restart 2 of 2: launching every worker again"));
  EXPECT_THAT(r.output, HasSubstr("job crash Failed (BackoffLimitExceeded)"));
  EXPECT_THAT(r.output, HasSubstr("backoffLimit 2 reached after 2 restart(s)"));
  EXPECT_EQ(occurrences(r.output, "[crasher] boom\n"), 3u);
  expectSummaryRow(r.output, "crasher", 0, "exit 3", 2);
  expectSummaryRow(r.output, "sleeper", 1, "signal 15 \\(TERM\\)", 2);
  EXPECT_LT(r.seconds, 30);
}

TEST(Run, WorkersGetThePodEnvironmentAndTheAssignmentFile) {
  TempDir dir;
  const std::string script =
      "echo name=$RPCJOB_WORKER_NAME rank=$RPCJOB_RANK of $RPCJOB_WORLD_SIZE job=$RPCJOB_JOB_NAME "
      "ns=$RPCJOB_NAMESPACE metrics=$RPCJOB_METRICS_FILE; grep -q \"name: $RPCJOB_WORKER_NAME\" "
      "$RPCJOB_ASSIGNMENT";
  const std::string manifest =
      dir.write("env.yaml", shellJob("envjob", {{"w", script}}, "{backoffLimit: 0}", 2));
  const auto r = runProgram(runArgs(manifest, dir));
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[w1] name=w1 rank=1 of 2 job=envjob ns=default metrics=" +
                                  dir.path() + "/run/w1.metrics"));
  EXPECT_THAT(r.output, HasSubstr("(no metrics file)"));
}

// Several workers on one machine each get their share of its cores as
// OMP_NUM_THREADS (rpcjob/assignment/intra_op_threads.h), announced by the
// runner; a value set in the shell that runs `rpcjob run` is left alone.
TEST(Run, WorkersGetTheirShareOfTheCoresAsIntraOpThreads) {
  TempDir dir;
  const std::string manifest = dir.write(
      "omp.yaml",
      shellJob("ompjob", {{"w", "echo threads=$OMP_NUM_THREADS"}}, "{backoffLimit: 0}", 2));
  const char* inherited = std::getenv("OMP_NUM_THREADS");
  const std::string saved = inherited ? inherited : "";
  unsetenv("OMP_NUM_THREADS");
  const auto shared = runProgram(runArgs(manifest, dir));
  setenv("OMP_NUM_THREADS", "3", 1);
  const auto chosen = runProgram(runArgs(manifest, dir));
  if (inherited) {
    setenv("OMP_NUM_THREADS", saved.c_str(), 1);
  } else {
    unsetenv("OMP_NUM_THREADS");
  }
  EXPECT_EQ(shared.exitCode, 0) << shared.output;
  std::smatch share;
  ASSERT_TRUE(
      std::regex_search(shared.output, share,
                        std::regex("intra-op threads: ([0-9]+) per worker \\(([0-9]+) cores "
                                   "shared by 2 workers")))
      << shared.output;
  const int threads = std::stoi(share[1]);
  EXPECT_EQ(threads, std::max(std::stoi(share[2]) / 2, 1));
  EXPECT_THAT(shared.output, HasSubstr("[w0] threads=" + std::to_string(threads)));
  EXPECT_THAT(shared.output, HasSubstr("[w1] threads=" + std::to_string(threads)));
  EXPECT_EQ(chosen.exitCode, 0) << chosen.output;
  EXPECT_THAT(chosen.output, Not(HasSubstr("intra-op threads:")));
  EXPECT_THAT(chosen.output, HasSubstr("[w0] threads=3"));
  EXPECT_THAT(chosen.output, HasSubstr("[w1] threads=3"));
}

// A program of the user's own, named by a path relative to the manifest (not to
// the directory `rpcjob run` is started from), gets the same identity.
TEST(Run, RunsAUserProgramNamedRelativeToTheManifest) {
  TempDir dir;
  std::filesystem::create_directories(dir.path() + "/bin");
  const std::string program = dir.write(
      "bin/my-program", "#!/bin/sh\necho \"$0 $1 as $RPCJOB_WORKER_NAME of $RPCJOB_WORLD_SIZE\"\n");
  std::filesystem::permissions(program, std::filesystem::perms::owner_exec,
                               std::filesystem::perm_options::add);
  const std::string manifest = dir.write("mine.yaml", R"(apiVersion: rpcjob.dev/v1alpha1
kind: RpcJob
metadata: {name: mine}
spec:
  workers:
    - name: w
      replicas: 2
      template:
        spec:
          containers: [{name: w, command: [bin/my-program], args: [hi]}]
)");
  ASSERT_NE(std::filesystem::current_path(), std::filesystem::path(dir.path()));
  const auto r = runProgram(runArgs(manifest, dir));
  EXPECT_EQ(r.exitCode, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[w0] " + program + " hi as w0 of 2"));
  EXPECT_THAT(r.output, HasSubstr("[w1] " + program + " hi as w1 of 2"));
}

TEST(Run, DeadlineStopsAJobOfSleepers) {
  TempDir dir;
  const std::string manifest =
      dir.write("deadline.yaml", shellJob("deadline", {{"a", "sleep 60"}, {"b", "sleep 60"}},
                                          "{backoffLimit: 3, activeDeadlineSeconds: 2}"));
  const auto r = runProgram(runArgs(manifest, dir));
  EXPECT_EQ(r.exitCode, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("job deadline Failed (DeadlineExceeded)"));
  EXPECT_THAT(r.output, HasSubstr("activeDeadlineSeconds (2 s)"));
  EXPECT_LT(r.seconds, 15) << r.output;
}

class Interrupt : public ::testing::TestWithParam<int> {};

TEST_P(Interrupt, StopsEverythingAndLeavesNoProcessBehind) {
  const int signal = GetParam();
  TempDir dir;
  const std::string name = uniqueName(signal == SIGINT ? "sigint" : "sigterm");
  // A background child too: the whole process group must go.
  const std::string manifest =
      dir.write("sleepers.yaml",
                shellJob(name, {{"a", "sleep 60 & sleep 60"}, {"b", "trap \"\" TERM; sleep 60"}},
                         "{backoffLimit: 3}", 2));
  const auto r = runProgram(runArgs(manifest, dir), {"4 running", signal, 60});
  EXPECT_EQ(r.exitCode, 128 + signal) << r.output;
  EXPECT_THAT(r.output, HasSubstr("(Interrupted)"));
  EXPECT_LT(r.seconds, 20) << r.output;
  EXPECT_THAT(processesWithEnv("RPCJOB_JOB_NAME=" + name), IsEmpty()) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Signals, Interrupt, ::testing::Values(SIGINT, SIGTERM),
                         [](const auto& info) {
                           return info.param == SIGINT ? "Sigint" : "Sigterm";
                         });

TEST(Run, MoreGpusThanTheMachineHasIsAClearError) {
  TempDir dir;
  const std::string manifest = dir.write(
      "gpus.yaml",
      "apiVersion: rpcjob.dev/v1alpha1\nkind: RpcJob\nmetadata: {name: gpus}\nspec:\n  workers:\n"
      "    - {name: w, replicas: 2, gpusPerWorker: 2, template: {spec: {containers: [{name: "
      "w}]}}}\n");
  const auto r =
      runProgram({RPCJOB_BINARY, "run", manifest, "--gpus", "1", "--run-dir", dir.path()});
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cannot run gpus on this machine: Unschedulable"));
  EXPECT_THAT(r.output, HasSubstr("nvidia.com/gpu"));
}

// The GPU example, on a machine without GPUs (--gpus 0 stands for one): refused
// before anything starts.
TEST(Run, CudaExampleWithoutGpusIsUnschedulable) {
  TempDir dir;
  const auto r = runProgram({RPCJOB_BINARY, "run",
                             std::string(RPCJOB_SOURCE_DIR) + "/examples/model-split-cuda.yaml",
                             "--gpus", "0", "--run-dir", dir.path()});
  EXPECT_EQ(r.exitCode, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cannot run model-split-cuda on this machine: Unschedulable"));
}

TEST(Run, InvalidManifestIsRefusedBeforeAnythingStarts) {
  TempDir dir;
  const std::string manifest =
      dir.write("bad.yaml",
                "apiVersion: rpcjob.dev/v1alpha1\nkind: RpcJob\nmetadata: {name: bad}\nspec:\n"
                "  workers:\n    - {name: w, replicas: -1}\n");
  const auto r = runProgram({RPCJOB_BINARY, "run", manifest});
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_THAT(r.output, HasSubstr("spec.workers[0].replicas (line 6)"));
}

TEST(Run, ProgramThatCannotStartFailsTheJob) {
  TempDir dir;
  std::string job = shellJob("noexec", {{"w", "x"}}, "{backoffLimit: 0}");
  job.replace(job.find("[sh, -c]"), 8, "[/nonexistent/program]");
  const auto r = runProgram(runArgs(dir.write("noexec.yaml", job), dir));
  EXPECT_EQ(r.exitCode, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[w] rpcjob: cannot run /nonexistent/program: No such file"));
  expectSummaryRow(r.output, "w", 0, "exit 127", 0);
}

}  // namespace
}  // namespace rpcjob::runner
