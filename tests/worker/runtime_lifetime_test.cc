// What outlives a Runtime: an async function's result that completes after its
// Runtime was destroyed is dropped, not answered through the destroyed
// runtime's members. The scenario runs in rpcjob_lifetime_probe, a process of
// its own (before the fix it was undefined behaviour).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>

namespace rpcjob::testing {
namespace {

TEST(RuntimeLifetime, AnAsyncResultCompletedAfterItsRuntimeIsGoneIsDropped) {
  const int status = std::system(RPCJOB_LIFETIME_PROBE);
  ASSERT_TRUE(WIFEXITED(status)) << "the probe died (status " << status << ")";
  // 4: the destroyed runtime answered the call; 2, 3, 5, 6: the set-up failed.
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace rpcjob::testing
