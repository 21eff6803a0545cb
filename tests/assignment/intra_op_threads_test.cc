// intraOpThreads: each worker's share of the cores, a CPU limit first.
#include <gtest/gtest.h>

#include "rpcjob/assignment/intra_op_threads.h"

namespace rpcjob {
namespace {

TEST(IntraOpThreads, OneWorkerWithoutLimitKeepsLibtorchsDefault) {
  EXPECT_EQ(intraOpThreads(16, 1), 0);
  EXPECT_EQ(intraOpThreads(1, 1), 0);
}

TEST(IntraOpThreads, WorkersSharingAMachineSplitItsCores) {
  EXPECT_EQ(intraOpThreads(16, 2), 8);
  EXPECT_EQ(intraOpThreads(16, 3), 5);  // floor: never more threads than cores in all
  EXPECT_EQ(intraOpThreads(16, 16), 1);
  EXPECT_EQ(intraOpThreads(16, 64), 1);  // at least one each
  EXPECT_EQ(intraOpThreads(2, 3), 1);
}

TEST(IntraOpThreads, ACpuLimitCapsTheThreads) {
  EXPECT_EQ(intraOpThreads(64, 1, 4000), 4);
  EXPECT_EQ(intraOpThreads(64, 1, 4500), 4);  // floor of a fractional limit
  EXPECT_EQ(intraOpThreads(64, 1, 500), 1);   // below one core: one thread
  EXPECT_EQ(intraOpThreads(64, 8, 2000), 2);  // the limit is the worker's own
}

TEST(IntraOpThreads, ALimitAboveTheCoresIsTheCores) {
  EXPECT_EQ(intraOpThreads(8, 2, 32000), 8);
  EXPECT_EQ(intraOpThreads(8, 1, 32000), 0);  // one worker: the default already is 8
  EXPECT_EQ(intraOpThreads(8, 1, 8000), 0);
}

TEST(IntraOpThreads, UnknownCoresLeaveItToTheLimit) {
  EXPECT_EQ(intraOpThreads(0, 1, 4000), 4);
  EXPECT_EQ(intraOpThreads(-1, 3, 2500), 2);
  EXPECT_EQ(intraOpThreads(0, 1), 0);
  EXPECT_EQ(intraOpThreads(0, 4), 0);
}

TEST(IntraOpThreads, NonsenseCountsAreClamped) {
  EXPECT_EQ(intraOpThreads(16, 0), 0);  // no workers counts as one
  EXPECT_EQ(intraOpThreads(16, -3), 0);
  EXPECT_EQ(intraOpThreads(16, 2, -1), 8);  // a negative limit is no limit
}

using Env = std::vector<std::pair<std::string, std::string>>;

TEST(IntraOpEnvironment, TheShareWithAPassiveWaitUnlessTheUserChose) {
  const auto none = [](const std::string&) { return false; };
  EXPECT_EQ(intraOpEnvironment(8, none),
            (Env{{"OMP_NUM_THREADS", "8"}, {"OMP_WAIT_POLICY", "PASSIVE"}}));
  EXPECT_EQ(intraOpEnvironment(0, none), Env{}) << "libtorch's default is the share";
  const auto threadsSet = [](const std::string& n) { return n == kEnvOmpNumThreads; };
  EXPECT_EQ(intraOpEnvironment(8, threadsSet), Env{}) << "the user sized the pool";
  const auto policySet = [](const std::string& n) { return n == kEnvOmpWaitPolicy; };
  EXPECT_EQ(intraOpEnvironment(2, policySet), (Env{{"OMP_NUM_THREADS", "2"}}));
}

}  // namespace
}  // namespace rpcjob
