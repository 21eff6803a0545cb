// The CPUs a worker may keep busy, from its cgroup's quota files, and the spin
// budget that follows from them (cpu_budget.h, spin_wait.h).
#include "cpu_budget.h"

#include <gtest/gtest.h>
#include <sched.h>

#include "cgroup_files.h"
#include "spin_wait.h"

namespace rpcjob::runtime {
namespace {

TEST(CpuBudget, CgroupV2CpuMax) {
  EXPECT_EQ(parseCgroupCpuMax("200000 100000\n"), 2.0);
  EXPECT_EQ(parseCgroupCpuMax("50000 100000"), 0.5);
  EXPECT_EQ(parseCgroupCpuMax("max 100000\n"), std::nullopt);
  for (const char* bad : {"", "\n", "100000", "2x 100000", "200000 0", "-1 100000",
                          "200000 100000 7", "200000 abc"}) {
    EXPECT_EQ(parseCgroupCpuMax(bad), std::nullopt) << "'" << bad << "'";
  }
}

TEST(CpuBudget, CgroupV1CfsQuota) {
  EXPECT_EQ(parseCgroupCfsQuota("400000\n", "100000\n"), 4.0);
  EXPECT_EQ(parseCgroupCfsQuota("-1\n", "100000\n"), std::nullopt);
  EXPECT_EQ(parseCgroupCfsQuota("", "100000"), std::nullopt);
  EXPECT_EQ(parseCgroupCfsQuota("400000", "0"), std::nullopt);
  EXPECT_EQ(parseCgroupCfsQuota("4e5", "100000"), std::nullopt);
}

TEST(CpuBudget, OwnCgroupPicksTheRightHierarchy) {
  const std::string text = "12:cpu,cpuacct:/kubepods/pod1\n4:memory:/kubepods/pod1/c\n0::/v2/x\n";
  EXPECT_EQ(ownCgroup(text, ""), "/v2/x");
  EXPECT_EQ(ownCgroup(text, "cpu"), "/kubepods/pod1");
  EXPECT_EQ(ownCgroup(text, "memory"), "/kubepods/pod1/c");
  EXPECT_EQ(ownCgroup(text, "cpuset"), "");
  EXPECT_EQ(ownCgroup("garbage\n", ""), "");
}

TEST(CpuBudget, AvailableCpusIsWithinTheAffinityMask) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const double cpus = availableCpus();
  EXPECT_GE(cpus, 1.0);
  EXPECT_LE(cpus, CPU_COUNT(&set));
}

TEST(SpinBudget, LongOnlyWhereCpusAreToSpare) {
  EXPECT_EQ(defaultSpinBudget(1).count(), 50);
  EXPECT_EQ(defaultSpinBudget(2).count(), 50);
  EXPECT_EQ(defaultSpinBudget(7.5).count(), 50);
  EXPECT_EQ(defaultSpinBudget(8).count(), 1000);
  EXPECT_EQ(defaultSpinBudget(128).count(), 1000);
}

// The pool and the event poller spin long only while work keeps coming: a gap
// longer than the budget brings the next spin down to 50 us.
TEST(AdaptiveSpin, LongWhileWorkKeepsComingShortAfterALongGap) {
  setenv("RPCJOB_SPIN_US", "400", 1);  // before anything in this process reads it
  ASSERT_EQ(spinBudget().count(), 400);
  AdaptiveSpin spin;
  EXPECT_EQ(spin.budget().count(), 400);  // no gap seen yet
  spin.idleEnded(std::chrono::steady_clock::now() - std::chrono::microseconds(100));
  EXPECT_EQ(spin.budget().count(), 400);
  spin.idleEnded(std::chrono::steady_clock::now() - std::chrono::microseconds(1500));
  EXPECT_EQ(spin.budget().count(), 400);  // under four budgets: still coming
  spin.idleEnded(std::chrono::steady_clock::now() - std::chrono::milliseconds(5));
  EXPECT_EQ(spin.budget().count(), 50);
  spin.idleEnded(std::chrono::steady_clock::now() - std::chrono::microseconds(300));
  EXPECT_EQ(spin.budget().count(), 400);
}

TEST(SpinBudget, MicrosecondsFromTheEnvironment) {
  using std::chrono::microseconds;
  const char* name = "RPCJOB_TEST_SPIN_US";
  unsetenv(name);
  EXPECT_EQ(microsecondsFromEnvironment(name, microseconds(7), 100).count(), 7);
  setenv(name, "0", 1);
  EXPECT_EQ(microsecondsFromEnvironment(name, microseconds(7), 100).count(), 0);
  setenv(name, "100", 1);
  EXPECT_EQ(microsecondsFromEnvironment(name, microseconds(7), 100).count(), 100);
  for (const char* bad : {"101", "-1", "5us", "abc"}) {
    setenv(name, bad, 1);
    EXPECT_EQ(microsecondsFromEnvironment(name, microseconds(7), 100).count(), 7) << bad;
  }
  unsetenv(name);
}

}  // namespace
}  // namespace rpcjob::runtime
