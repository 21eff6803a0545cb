// The pure pieces of the runner: output prefixer, metrics-file parser, summary
// table, run policy, launch commands and environment, machine-description parsers;
// and supervise() on `sh` workers, for the promise that nothing of a worker's
// process group outlives it.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "rpcjob/api/parse.h"
#include "rpcjob/assignment/environment.h"
#include "rpcjob/assignment/intra_op_threads.h"
#include "rpcjob/planner/plan.h"
#include "rpcjob/runner/gpu_topology_nvml.h"
#include "rpcjob/runner/job_secret.h"
#include "rpcjob/runner/launch.h"
#include "rpcjob/runner/line_prefixer.h"
#include "rpcjob/runner/local_machine.h"
#include "rpcjob/runner/metrics_file.h"
#include "rpcjob/runner/run_policy.h"
#include "rpcjob/runner/summary.h"
#include "rpcjob/runner/supervisor.h"

namespace rpcjob::runner {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using Action = RunPolicy::Action;

TEST(LinePrefixer, PrefixesCompleteLinesAcrossChunks) {
  LinePrefixer p("[w0] ");
  EXPECT_EQ(p.feed("hel"), "");
  EXPECT_EQ(p.feed("lo\nwor"), "[w0] hello\n");
  EXPECT_EQ(p.feed("ld\n\nx"), "[w0] world\n[w0] \n");
  EXPECT_EQ(p.flush(), "[w0] x\n");
  EXPECT_EQ(p.flush(), "");
}

TEST(LinePrefixer, CutsOverlongLines) {
  LinePrefixer p("> ");
  const std::string out = p.feed(std::string(LinePrefixer::kMaxLine + 10, 'a'));
  EXPECT_EQ(out, "> " + std::string(LinePrefixer::kMaxLine, 'a') + "\n");
  EXPECT_EQ(p.flush(), "> " + std::string(10, 'a') + "\n");
}

TEST(MetricsFile, SumsBytesPerChannelAndDirection) {
  const ChannelTraffic t = parseChannelTraffic(
      "# HELP rpcjob_channel_bytes_total bytes\n"
      "# TYPE rpcjob_channel_bytes_total counter\n"
      "rpcjob_channel_bytes_total{channel=\"cma\",direction=\"send\",peer=\"w1\"} 1000\n"
      "rpcjob_channel_bytes_total{channel=\"cma\",direction=\"send\",peer=\"w2\"} 24\n"
      "rpcjob_channel_bytes_total{direction=\"recv\",channel=\"cma\",peer=\"w1\",} 5e2 1700000\n"
      "rpcjob_channel_bytes_total{channel=\"basic\",direction=\"recv\",worker=\"a\\\"b\"} 7\n"
      "rpcjob_channel_bytes_totalx{channel=\"basic\",direction=\"recv\"} 99\n"
      "rpcjob_channel_transfers_total{channel=\"cma\",direction=\"send\"} 3\n");
  EXPECT_TRUE(t.found);
  EXPECT_TRUE(t.warnings.empty()) << t.warnings[0];
  ASSERT_EQ(t.bytes.size(), 2u);
  EXPECT_EQ(t.bytes.at("cma").sent, 1024);
  EXPECT_EQ(t.bytes.at("cma").received, 500);
  EXPECT_EQ(t.bytes.at("basic").received, 7);
}

TEST(MetricsFile, MalformedLinesAreWarningsNotCrashes) {
  const ChannelTraffic t = parseChannelTraffic(
      "rpcjob_channel_bytes_total{channel=\"cma\",direction=\"send\"} 10\n"
      "rpcjob_channel_bytes_total{channel=\"cma\",direction=\"send\"\n"
      "rpcjob_channel_bytes_total{channel=\"cma\",direction=\"send\"} abc\n"
      "rpcjob_channel_bytes_total{channel=\"cma\"} 5\n"
      "rpcjob_channel_bytes_total{channel=\"cma\",direction=\"sideways\"} 5\n"
      "rpcjob_channel_bytes_total{channel=\"cma\",direction=\"send\"} -4\n"
      "rpcjob_channel_bytes_total{channel=\"cma\",direction=\"send\"}\n"
      "rpcjob_channel_bytes_total{channel=\"unterminated,direction=\"send\"} 1\n");
  EXPECT_EQ(t.bytes.at("cma").sent, 10);
  EXPECT_EQ(t.warnings.size(), 7u);
  EXPECT_THAT(t.warnings[0], HasSubstr("line 2"));
  EXPECT_THAT(t.warnings[1], HasSubstr("not a number"));
}

TEST(MetricsFile, MissingFileIsNotFound) {
  const ChannelTraffic t = readChannelTraffic("/nonexistent/rpcjob/w.metrics");
  EXPECT_FALSE(t.found);
  EXPECT_TRUE(t.warnings.empty());
}

TEST(Summary, RowsPerWorkerAndChannel) {
  ChannelTraffic traffic = parseChannelTraffic(
      "rpcjob_channel_bytes_total{channel=\"cma\",direction=\"send\"} 419430400\n"
      "rpcjob_channel_bytes_total{channel=\"cma\",direction=\"recv\"} 1536\n"
      "rpcjob_channel_bytes_total{channel=\"basic\",direction=\"send\"} 12\n"
      "garbage{\n");
  traffic.warnings = {"line 4: expected a metric name"};
  const std::string text = renderSummary({
      {"master", 0, ExitStatus::exited(0), 0, traffic},
      {"worker0", 1, ExitStatus::signaled(SIGKILL), 2, ChannelTraffic{}},
      {"worker1", 2, ExitStatus::exited(3), 2, parseChannelTraffic("")},
  });
  EXPECT_EQ(
      text,
      "WORKER   RANK  EXIT             RESTARTS  CHANNEL  SENT       RECEIVED\n"
      "master   0     0                0         basic    12 B       0 B\n"
      "                                          cma      400.0 MiB  1.50 KiB\n"
      "worker0  1     signal 9 (KILL)  2         -        -          -         (no metrics file)\n"
      "worker1  2     exit 3           2         -        0 B        0 B\n"
      "warning: master metrics file: line 4: expected a metric name\n");
}

TEST(Summary, FormatsBytes) {
  EXPECT_EQ(formatBytes(0), "0 B");
  EXPECT_EQ(formatBytes(1023), "1023 B");
  EXPECT_EQ(formatBytes(1024), "1.00 KiB");
  EXPECT_EQ(formatBytes(1.5 * (1 << 30)), "1.50 GiB");
}

TEST(RunPolicy, SucceedsWhenEveryWorkerExitsZero) {
  RunPolicy p({"a", "b"}, 3);
  EXPECT_EQ(p.onExit(1, ExitStatus::exited(0)), Action::None);
  EXPECT_EQ(p.running(), 1);
  EXPECT_EQ(p.onExit(0, ExitStatus::exited(0)), Action::Succeed);
  EXPECT_EQ(p.phase(), JobPhase::Succeeded);
  EXPECT_EQ(p.restarts(), 0);
}

TEST(RunPolicy, RestartsUpToBackoffLimitThenFails) {
  RunPolicy p({"a", "b"}, 2);
  EXPECT_EQ(p.onExit(1, ExitStatus::exited(3)), Action::StopAndRestart);
  EXPECT_EQ(p.phase(), JobPhase::Restarting);
  EXPECT_THAT(p.message(),
              HasSubstr("worker b ended with exit 3; restarting the job (restart 1 of 2)"));
  // The stop's own casualties are not failures.
  EXPECT_EQ(p.onExit(0, ExitStatus::signaled(SIGTERM)), Action::None);
  p.restarted();
  EXPECT_EQ(p.phase(), JobPhase::Running);
  EXPECT_EQ(p.restarts(), 1);
  EXPECT_EQ(p.running(), 2);
  EXPECT_EQ(p.onExit(0, ExitStatus::signaled(SIGSEGV)), Action::StopAndRestart);
  p.restarted();
  EXPECT_EQ(p.onExit(1, ExitStatus::exited(0)), Action::None);
  EXPECT_EQ(p.onExit(0, ExitStatus::exited(1)), Action::StopAndFail);
  EXPECT_EQ(p.phase(), JobPhase::Failed);
  EXPECT_EQ(p.reason(), "BackoffLimitExceeded");
  EXPECT_THAT(p.message(), HasSubstr("backoffLimit 2 reached after 2 restart(s)"));
  EXPECT_EQ(p.restarts(), 2);
}

TEST(RunPolicy, BackoffLimitZeroFailsAtOnce) {
  RunPolicy p({"a"}, 0);
  EXPECT_EQ(p.onExit(0, ExitStatus::exited(2)), Action::StopAndFail);
  EXPECT_EQ(p.reason(), "BackoffLimitExceeded");
}

TEST(RunPolicy, DeadlineAndInterruptFailTheJobOnce) {
  RunPolicy p({"a", "b"}, 5);
  EXPECT_EQ(p.onDeadline(30), Action::StopAndFail);
  EXPECT_EQ(p.reason(), "DeadlineExceeded");
  EXPECT_THAT(p.message(), HasSubstr("activeDeadlineSeconds (30 s)"));
  EXPECT_EQ(p.onInterrupt(SIGINT), Action::None);
  EXPECT_EQ(p.onExit(0, ExitStatus::signaled(SIGTERM)), Action::None);
  EXPECT_EQ(p.reason(), "DeadlineExceeded");

  RunPolicy q({"a"}, 5);
  EXPECT_EQ(q.onExit(0, ExitStatus::exited(1)), Action::StopAndRestart);
  EXPECT_EQ(q.onInterrupt(SIGTERM), Action::StopAndFail);  // while restarting
  EXPECT_EQ(q.reason(), "Interrupted");
  EXPECT_THAT(q.message(), HasSubstr("SIGTERM"));
}

TEST(ExitStatus, Strings) {
  EXPECT_EQ(ExitStatus::exited(0).toString(), "0");
  EXPECT_EQ(ExitStatus::exited(3).toString(), "exit 3");
  EXPECT_EQ(ExitStatus::signaled(SIGTERM).toString(), "signal 15 (TERM)");
  EXPECT_EQ(ExitStatus::fromWaitStatus(3 << 8).toString(), "exit 3");
}

const char* const kJob = R"yaml(apiVersion: rpcjob.dev/v1alpha1
kind: RpcJob
metadata: {name: demo, namespace: team}
spec:
  workers:
    - name: master
      template:
        spec:
          containers:
            - name: w
              command: [/usr/bin/rpcjob-worker]
              args: [bench, "--tag=$(TAG)", "$$(TAG)", "$(UNKNOWN)"]
              env:
                - {name: TAG, value: t1}
                - {name: RPCJOB_RANK, value: "99"}
                - name: FROM_API
                  valueFrom: {fieldRef: {fieldPath: metadata.name}}
    - name: worker
      replicas: 2
      template:
        spec:
          containers: [{name: w}]
)yaml";

// The local plan every launch test starts from: a 4-CPU machine, ports from 30000.
planner::Plan planOnAFourCpuMachine(const api::RpcJob& job) {
  planner::PlanOptions options{planner::Target::Local, planner::localEndpoints(30000, 9400)};
  return planner::planJob(job, planner::localCluster(0, 4000, int64_t{8} << 30), options);
}

TEST(Launch, CommandsAndEnvironmentAsPodsGetThem) {
  const api::ParseResult parsed = api::parseRpcJob(kJob);
  ASSERT_TRUE(parsed.ok()) << api::formatErrors(parsed.errors);
  const planner::Plan plan = planOnAFourCpuMachine(parsed.job);
  ASSERT_TRUE(plan.planned()) << plan.message;
  const Launches l =
      buildLaunches(parsed.job, plan, {"/b/rpcjob-worker", "/run", "/run/a.yaml", "", "/run/s"});
  ASSERT_EQ(l.workers.size(), 3u);
  const WorkerLaunch& m = l.workers[0];
  EXPECT_EQ(m.name, "master");
  EXPECT_THAT(m.argv, ElementsAre("/b/rpcjob-worker", "bench", "--tag=t1", "$(TAG)", "$(UNKNOWN)"));
  auto env = [](const WorkerLaunch& w, const std::string& k) {
    std::string v = "<unset>";
    for (const auto& [name, value] : w.env) {
      if (name == k) v = value;  // the last entry wins, as in a pod
    }
    return v;
  };
  EXPECT_EQ(env(m, "TAG"), "t1");
  EXPECT_EQ(env(m, kEnvRank), "0");
  EXPECT_EQ(env(m, kEnvWorldSize), "3");
  EXPECT_EQ(env(m, kEnvJobName), "demo");
  EXPECT_EQ(env(m, kEnvNamespace), "team");
  EXPECT_EQ(env(m, kEnvAssignmentPath), "/run/a.yaml");
  EXPECT_EQ(env(m, kEnvMetricsPort), "9400");
  EXPECT_EQ(env(m, kEnvMetricsFile), "/run/master.metrics");
  EXPECT_EQ(env(m, "FROM_API"), "<unset>");
  ASSERT_EQ(l.notes.size(), 1u);
  EXPECT_THAT(l.notes[0], HasSubstr("FROM_API uses valueFrom"));
  const WorkerLaunch& w1 = l.workers[2];
  EXPECT_EQ(w1.name, "worker1");
  EXPECT_EQ(w1.address, "127.0.0.1:30002");
  EXPECT_THAT(w1.argv, ElementsAre("/b/rpcjob-worker", "serve"));
  EXPECT_EQ(env(w1, kEnvWorkerName), "worker1");
  for (const auto& w : l.workers) EXPECT_EQ(env(w, kEnvSecretFile), "/run/s") << w.name;
}

// The runner's share of the cores reaches every worker whose template is silent;
// a template's own OMP_NUM_THREADS stays, once.
TEST(Launch, IntraOpThreadsUnlessTheTemplateSetsThem) {
  const char* const job = R"yaml(apiVersion: rpcjob.dev/v1alpha1
kind: RpcJob
metadata: {name: omp}
spec:
  workers:
    - name: own
      template:
        spec:
          containers: [{name: w, env: [{name: OMP_NUM_THREADS, value: "3"}]}]
    - name: shared
      replicas: 2
      template:
        spec:
          containers: [{name: w}]
)yaml";
  const api::ParseResult parsed = api::parseRpcJob(job);
  ASSERT_TRUE(parsed.ok()) << api::formatErrors(parsed.errors);
  const planner::Plan plan = planOnAFourCpuMachine(parsed.job);
  ASSERT_TRUE(plan.planned()) << plan.message;
  LaunchContext context{"/b/rpcjob-worker", "/run", "/run/a.yaml", "", ""};
  context.intraOpThreads = 5;
  const Launches l = buildLaunches(parsed.job, plan, context);
  ASSERT_EQ(l.workers.size(), 3u);
  auto values = [](const WorkerLaunch& w, const std::string& variable) {
    std::vector<std::string> out;
    for (const auto& [name, value] : w.env) {
      if (name == variable) out.push_back(value);
    }
    return out;
  };
  EXPECT_THAT(values(l.workers[0], kEnvOmpNumThreads), ElementsAre("3"));
  EXPECT_THAT(values(l.workers[0], kEnvOmpWaitPolicy), IsEmpty()) << "the user took the pool";
  EXPECT_THAT(values(l.workers[1], kEnvOmpNumThreads), ElementsAre("5"));
  EXPECT_THAT(values(l.workers[1], kEnvOmpWaitPolicy), ElementsAre("PASSIVE"));
  EXPECT_THAT(values(l.workers[2], kEnvOmpNumThreads), ElementsAre("5"));
  context.inherited = {kEnvOmpWaitPolicy};  // the shell's policy stays
  EXPECT_THAT(values(buildLaunches(parsed.job, plan, context).workers[1], kEnvOmpWaitPolicy),
              IsEmpty());
  context.inherited = {kEnvOmpNumThreads};  // the shell sized the pools: nothing added
  EXPECT_THAT(values(buildLaunches(parsed.job, plan, context).workers[1], kEnvOmpNumThreads),
              IsEmpty());
}

TEST(JobSecret, FreshRandomBytesOnlyItsOwnerCanRead) {
  const std::string dir = ::testing::TempDir() + "job_secret_" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/secret";
  auto read = [&] {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  writeJobSecret(path);
  const std::string first = read();
  EXPECT_EQ(first.size(), kJobSecretBytes);
  struct stat st {};
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  writeJobSecret(path);  // the next run's
  EXPECT_NE(read(), first);
  // A link planted where the secret goes is replaced, not written through.
  const std::string target = dir + "/elsewhere";
  std::ofstream(target) << "untouched";
  std::filesystem::remove(path);
  std::filesystem::create_symlink(target, path);
  writeJobSecret(path);
  EXPECT_FALSE(std::filesystem::is_symlink(path));
  std::ifstream in(target);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()),
            "untouched");
  std::filesystem::remove_all(dir);
}

// A user's own program: bare names stay for the PATH lookup (as in a container),
// relative paths start at the manifest's folder, absolute ones are kept; the
// worker program is still the one built here. $(VAR) expands before resolving.
TEST(Launch, CommandsOtherThanTheWorkerResolveAgainstTheManifestFolder) {
  EXPECT_EQ(resolveCommand("rpcjob-hello", "/jobs/hello"), "rpcjob-hello");
  EXPECT_EQ(resolveCommand("build/rpcjob-hello", "/jobs/hello"), "/jobs/hello/build/rpcjob-hello");
  EXPECT_EQ(resolveCommand("./rpcjob-hello", "/jobs/hello"), "/jobs/hello/./rpcjob-hello");
  EXPECT_EQ(resolveCommand("/opt/bin/x", "/jobs/hello"), "/opt/bin/x");
  EXPECT_EQ(resolveCommand("build/x", ""), "build/x");

  const char* const job = R"yaml(apiVersion: rpcjob.dev/v1alpha1
kind: RpcJob
metadata: {name: mine}
spec:
  workers:
    - name: a
      template:
        spec:
          containers:
            - name: w
              command: ["$(DIR)/my-program", "--flag"]
              args: [x/y]
              env: [{name: DIR, value: build}]
    - name: b
      template:
        spec:
          containers: [{name: w, command: [my-program]}]
    - name: c
      template:
        spec:
          containers: [{name: w, command: [bin/rpcjob-worker], args: [serve]}]
)yaml";
  const api::ParseResult parsed = api::parseRpcJob(job);
  ASSERT_TRUE(parsed.ok()) << api::formatErrors(parsed.errors);
  const planner::Plan plan = planOnAFourCpuMachine(parsed.job);
  ASSERT_TRUE(plan.planned()) << plan.message;
  const Launches l = buildLaunches(parsed.job, plan,
                                   {"/b/rpcjob-worker", "/run", "/run/a.yaml", "/jobs/mine", ""});
  ASSERT_EQ(l.workers.size(), 3u);
  EXPECT_THAT(l.workers[0].argv, ElementsAre("/jobs/mine/build/my-program", "--flag", "x/y"));
  EXPECT_THAT(l.workers[1].argv, ElementsAre("my-program"));
  EXPECT_THAT(l.workers[2].argv, ElementsAre("/b/rpcjob-worker", "serve"));
}

TEST(LocalMachine, Parsers) {
  EXPECT_EQ(parseMemTotal("MemTotal:       16384 kB\nMemFree: 1 kB\n"), 16384 * 1024);
  EXPECT_EQ(parseMemTotal("nothing"), 0);
  EXPECT_EQ(parseCpuMax("150000 100000\n"), 1500);
  EXPECT_EQ(parseCpuMax("max 100000\n"), std::nullopt);
  EXPECT_EQ(parseCpuMax("junk"), std::nullopt);
  EXPECT_EQ(parseMemoryMax("1073741824\n"), int64_t{1} << 30);
  EXPECT_EQ(parseMemoryMax("max\n"), std::nullopt);
  EXPECT_EQ(parsePortRange("32768\t60999\n"), std::make_pair(32768, 60999));
  EXPECT_EQ(parsePortRange("1024 1024"), std::make_pair(1024, 1024));
  EXPECT_EQ(parsePortRange("60999 32768"), std::nullopt);
  EXPECT_EQ(parsePortRange("0 100"), std::nullopt);
  EXPECT_EQ(parsePortRange("1 70000"), std::nullopt);
  EXPECT_EQ(parsePortRange("32768"), std::nullopt);
  EXPECT_EQ(parsePortRange("32768 60999 7"), std::nullopt);
  const std::pair<int, int> range{32768, 60999};
  EXPECT_FALSE(overlapsPortRange(29500, 128, range));  // 29500..29627
  EXPECT_FALSE(overlapsPortRange(32640, 128, range));  // ends at 32767
  EXPECT_TRUE(overlapsPortRange(32641, 128, range));   // ends at 32768
  EXPECT_TRUE(overlapsPortRange(34000, 80, range));
  EXPECT_TRUE(overlapsPortRange(60999, 1, range));
  EXPECT_FALSE(overlapsPortRange(61000, 100, range));
  EXPECT_FALSE(overlapsPortRange(34000, 0, range));
  const LocalResources r = detectLocalResources(3);
  EXPECT_EQ(r.gpus, 3);
  EXPECT_GE(r.cpuMilli, 1000);
  EXPECT_GT(r.memoryBytes, 0);
}

// Runs one `sh -c script` worker under supervise(); the script writes the pid of
// a background child to $BG_PID_FILE, which is read back into `background`.
SupervisorResult superviseShell(const std::string& script, pid_t& background) {
  char pattern[] = "/tmp/rpcjob-unit-XXXXXX";
  const std::string dir = mkdtemp(pattern);
  WorkerLaunch w;
  w.name = "w";
  w.rank = 0;
  w.logFile = dir + "/w.log";
  w.argv = {"sh", "-c", script};
  w.env = {{"BG_PID_FILE", dir + "/bg.pid"}};
  SupervisorOptions options;
  options.jobName = "group";
  options.gracePeriod = std::chrono::milliseconds(500);
  const SupervisorResult result = supervise({w}, options);
  background = 0;
  std::ifstream(dir + "/bg.pid") >> background;
  std::filesystem::remove_all(dir);
  return result;
}

// Gone for good: not even a zombie (kill(2) succeeds on those).
void expectGone(pid_t pid) {
  ASSERT_GT(pid, 0);
  errno = 0;
  EXPECT_EQ(kill(pid, 0), -1) << "process " << pid << " of the worker's group outlived supervise()";
  EXPECT_EQ(errno, ESRCH);
  kill(pid, SIGKILL);  // no stray sleeper if the expectations failed
}

// The group leader exits 0 at once; its background child must be killed and
// reaped before supervise() returns, not merely sent a SIGKILL.
TEST(Supervisor, ReturnsOnlyOnceTheGroupOfAWorkerThatExitedIsEmpty) {
  pid_t background = 0;
  const SupervisorResult r = superviseShell("sleep 60 & echo $! > \"$BG_PID_FILE\"", background);
  EXPECT_EQ(r.phase, JobPhase::Succeeded);
  expectGone(background);
}

// A SIGINT to us while the worker starts (the worker sends it): the job stops,
// and the background child that ignores SIGTERM is gone when supervise() returns.
TEST(Supervisor, InterruptLeavesNoProcessOfTheGroupBehind) {
  pid_t background = 0;
  const SupervisorResult r = superviseShell(
      "(trap \"\" TERM; sleep 60) & echo $! > \"$BG_PID_FILE\"; kill -INT $PPID; wait", background);
  EXPECT_EQ(r.phase, JobPhase::Failed);
  EXPECT_EQ(r.interruptSignal, SIGINT);
  expectGone(background);
}

// NVML's answers as topologyFromNvml sees them: pci keys of GPUs and link ends.
TEST(GpuTopologyFromNvml, DirectLinksSwitchesAndPcie) {
  auto gpu = [](uint64_t pci, std::vector<uint64_t> remote, std::vector<int> ancestor) {
    return NvmlGpuLinks{pci, std::move(remote), std::move(ancestor)};
  };
  // Two GPUs joined by 18 direct links each way (the 2 x H200 kind).
  std::vector<uint64_t> to1(18, 0x200), to0(18, 0x100);
  auto two = topologyFromNvml({gpu(0x100, to1, {0, 50}), gpu(0x200, to0, {50, 0})});
  ASSERT_EQ(two.gpus, 2);
  EXPECT_EQ(two.links[0][1].nvlinks, 18);
  EXPECT_EQ(two.links[1][0].path, "NV18");
  // Four GPUs behind NVSwitch (links end at switches): every pair NV18.
  std::vector<NvmlGpuLinks> hgx;
  for (uint64_t i = 0; i < 4; ++i)
    hgx.push_back(gpu(0x100 * (i + 1), std::vector<uint64_t>(18, 0x9900 + i % 2), {}));
  auto switched = topologyFromNvml(hgx);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) EXPECT_EQ(switched.links[i][j].path, i == j ? "X" : "NV18");
  }
  // PCIe only: the path from the common ancestor, the nearer end's answer.
  auto pcie = topologyFromNvml(
      {gpu(0x100, {}, {0, 10, 50}), gpu(0x200, {}, {10, 0, 50}), gpu(0x300, {}, {50, 40, 0})});
  EXPECT_EQ(pcie.links[0][1].path, "PIX");
  EXPECT_EQ(pcie.links[0][2].path, "SYS");
  EXPECT_EQ(pcie.links[1][2].path, "NODE");
  EXPECT_EQ(describeTopology(pcie), "3 GPU(s): no NVLink between its GPUs (PCIe)");
  // Bridged pairs 0-2 and 1-3, four links each: the order pairs them.
  auto bridged = topologyFromNvml({gpu(0x100, {0x300, 0x300, 0x300, 0x300}, {0, 50, 50, 50}),
                                   gpu(0x200, {0x400, 0x400, 0x400, 0x400}, {50, 0, 50, 50}),
                                   gpu(0x300, {0x100, 0x100, 0x100, 0x100}, {50, 50, 0, 50}),
                                   gpu(0x400, {0x200, 0x200, 0x200, 0x200}, {50, 50, 50, 0})});
  EXPECT_EQ(bridged.links[0][2].path, "NV4");
  EXPECT_EQ(neighbourOrder(bridged, 4), (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(topologyFromNvml({}).gpus, 0);
}

}  // namespace
}  // namespace rpcjob::runner
