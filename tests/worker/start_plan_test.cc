// The start-up's decisions (worker/src/startup/start_plan.h): the mode for a
// job's size, the pipes and descriptors it needs, and the errors when they do
// not fit; the environment overrides; and the descriptor limit of this process
// (startup/fd_limit.h), raised and counted for real.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>

#include "rpcjob/runtime/errors.h"
#include "rpcjob/runtime/options.h"
#include "startup/fd_limit.h"
#include "startup/start_plan.h"

namespace rpcjob::runtime::startup {
namespace {

TEST(StartPlan, AutoIsAFullMeshUpToTheLimitAndTheLeaderBarrierAbove) {
  for (int limit : {1, 4, 16}) {
    for (int workers = 1; workers <= 40; ++workers) {
      const StartPipes want = workers <= limit ? StartPipes::kFullMesh : StartPipes::kLeaderBarrier;
      EXPECT_EQ(resolve(StartPipes::kAuto, workers, limit), want) << workers << " " << limit;
      for (StartPipes fixed :
           {StartPipes::kFullMesh, StartPipes::kLeaderBarrier, StartPipes::kLazy}) {
        EXPECT_EQ(resolve(fixed, workers, limit), fixed);
      }
    }
  }
  EXPECT_EQ(resolve(StartPipes::kAuto, 16, kDefaultFullMeshMaxWorkers), StartPipes::kFullMesh);
  EXPECT_EQ(resolve(StartPipes::kAuto, 17, kDefaultFullMeshMaxWorkers), StartPipes::kLeaderBarrier);
}

TEST(StartPlan, PipesAtStartAreQuadraticOnlyForTheFullMesh) {
  for (int n : {1, 2, 6, 64, 1024}) {
    const auto un = static_cast<std::uint64_t>(n);
    for (int rank : {0, n - 1}) {
      EXPECT_EQ(pipesAtStart(StartPipes::kFullMesh, n, rank), 2 * un);
      EXPECT_EQ(pipesAtStart(StartPipes::kLazy, n, rank), 0u);
      EXPECT_EQ(pipesAtStart(StartPipes::kAuto, n, rank), 2 * un);  // unresolved: the worst
    }
    EXPECT_EQ(pipesAtStart(StartPipes::kLeaderBarrier, n, 0), un - 1);
    if (n > 1) {
      EXPECT_EQ(pipesAtStart(StartPipes::kLeaderBarrier, n, n - 1), 1u);
    }
  }
  EXPECT_EQ(pipesAtStart(StartPipes::kFullMesh, 0, 0), 0u);
}

TEST(StartPlan, DescriptorEstimateCoversWhatWasMeasured) {
  // A 32-worker full mesh held 1379 descriptors per worker, 8 workers 371.
  EXPECT_GE(fdsNeeded(pipesAtStart(StartPipes::kFullMesh, 32, 5)), 1379u);
  EXPECT_GE(fdsNeeded(pipesAtStart(StartPipes::kFullMesh, 8, 5)), 371u);
  // ... and not grossly more (a start-up that fits must not be refused).
  EXPECT_LE(fdsNeeded(pipesAtStart(StartPipes::kFullMesh, 32, 5)), 1379u * 5 / 4);
  EXPECT_EQ(fdsNeeded(0), kFdsBase);
  EXPECT_EQ(fdsNeeded(10) - fdsNeeded(9), kFdsPerPipe);
}

TEST(StartPlan, FdLimitProblemNamesTheLimitTheNeedAndTheFix) {
  EXPECT_EQ(fdLimitProblem("w1", StartPipes::kFullMesh, 8, 16, 448, 448, 448), "");
  const std::string mesh = fdLimitProblem("w1", StartPipes::kFullMesh, 64, 128, 3136, 1024, 1024);
  for (const char* part : {"worker 'w1'", "64 workers", "full-mesh", "128 pipes", "3136", "1024",
                           "RLIMIT_NOFILE", "ulimit -Hn", "RPCJOB_START_PIPES=leader"}) {
    EXPECT_NE(mesh.find(part), std::string::npos) << part << " in: " << mesh;
  }
  const std::string leader =
      fdLimitProblem("w0", StartPipes::kLeaderBarrier, 1024, 1023, 24616, 4096, 4096);
  EXPECT_NE(leader.find("leader"), std::string::npos) << leader;
  EXPECT_EQ(leader.find("RPCJOB_START_PIPES"), std::string::npos)
      << "no advice to switch to the mode it already uses: " << leader;
}

TEST(StartPlan, PipeFdProblemLeavesRoomForAPipeEachWay) {
  EXPECT_EQ(pipeFdProblem("w2", 100, 100 + 2 * kFdsPerPipe), "");
  const std::string full = pipeFdProblem("w2", 101, 100 + 2 * kFdsPerPipe);
  EXPECT_NE(full.find("worker 'w2'"), std::string::npos) << full;
  EXPECT_NE(full.find("RLIMIT_NOFILE"), std::string::npos) << full;
}

TEST(StartPlan, ModeNamesRoundTrip) {
  for (StartPipes mode :
       {StartPipes::kAuto, StartPipes::kFullMesh, StartPipes::kLeaderBarrier, StartPipes::kLazy}) {
    EXPECT_EQ(parseStartPipes(toString(mode)), mode);
  }
  for (const char* bad : {"", "Auto", "mesh", "leader ", "eager"}) {
    EXPECT_EQ(parseStartPipes(bad), std::nullopt) << bad;
  }
}

TEST(StartPlan, EnvironmentOverrides) {
  unsetenv(kEnvStartPipes);
  unsetenv(kEnvFullMeshMaxWorkers);
  unsetenv(kEnvStartTimeoutMs);
  RuntimeOptions defaults;
  applyEnvironment(defaults);
  EXPECT_EQ(defaults.startPipes, StartPipes::kAuto);
  EXPECT_EQ(defaults.fullMeshMaxWorkers, kDefaultFullMeshMaxWorkers);
  EXPECT_EQ(defaults.startTimeout, std::chrono::milliseconds(60000));

  setenv(kEnvStartPipes, "leader", 1);
  setenv(kEnvFullMeshMaxWorkers, "4", 1);
  setenv(kEnvStartTimeoutMs, "2500", 1);
  RuntimeOptions set;
  applyEnvironment(set);
  EXPECT_EQ(set.startPipes, StartPipes::kLeaderBarrier);
  EXPECT_EQ(set.fullMeshMaxWorkers, 4);
  EXPECT_EQ(set.startTimeout, std::chrono::milliseconds(2500));

  for (auto [name, bad] : {std::pair{kEnvStartPipes, "eager"},
                           {kEnvFullMeshMaxWorkers, "0"},
                           {kEnvFullMeshMaxWorkers, "16x"},
                           {kEnvStartTimeoutMs, "-1"},
                           {kEnvStartTimeoutMs, "99999999999999999999999"}}) {
    unsetenv(kEnvStartPipes);
    unsetenv(kEnvFullMeshMaxWorkers);
    unsetenv(kEnvStartTimeoutMs);
    setenv(name, bad, 1);
    RuntimeOptions fresh;
    EXPECT_THROW(applyEnvironment(fresh), std::invalid_argument) << name << "=" << bad;
  }
  unsetenv(kEnvStartPipes);
  unsetenv(kEnvFullMeshMaxWorkers);
  unsetenv(kEnvStartTimeoutMs);
}

TEST(FdLimit, RaisesTheSoftLimitToTheHardLimit) {
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_max < 512) GTEST_SKIP() << "hard limit " << limit.rlim_max << " too low";
  rlimit low = limit;
  low.rlim_cur = 256;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  EXPECT_EQ(fdLimit().soft, 256u);
  const FdLimit raised = raiseFdLimit();
  EXPECT_EQ(raised.soft, static_cast<std::uint64_t>(limit.rlim_max));
  EXPECT_EQ(raised.hard, static_cast<std::uint64_t>(limit.rlim_max));
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &low), 0);
  EXPECT_EQ(low.rlim_cur, limit.rlim_max);
}

TEST(FdLimit, ReserveFailsClearlyWhenTheHardLimitIsTooLow) {
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  // In a child: lowering the hard limit cannot be undone without privileges.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    rlimit low{200, 200};
    if (setrlimit(RLIMIT_NOFILE, &low) != 0) _exit(3);
    try {
      reserveFdsForStart("w1", StartPipes::kLeaderBarrier, 64, 3);  // 1 pipe: fits
    } catch (...) {
      _exit(4);
    }
    try {
      reserveFdsForStart("w1", StartPipes::kFullMesh, 64, 3);
    } catch (const RpcError& e) {
      const std::string what = e.what();
      _exit(e.code() == ErrorCode::kInvalidArgument &&
                    what.find("RLIMIT_NOFILE") != std::string::npos &&
                    what.find("200") != std::string::npos
                ? 0
                : 5);
    }
    _exit(6);  // did not throw
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(FdLimit, OpenFdsCountsThisProcesssDescriptors) {
  const std::uint64_t before = openFds();
  EXPECT_GT(before, 2u);  // stdin, stdout, stderr at least
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  EXPECT_EQ(openFds(), before + 2);
  close(fds[0]);
  close(fds[1]);
  EXPECT_EQ(openFds(), before);
}

}  // namespace
}  // namespace rpcjob::runtime::startup
