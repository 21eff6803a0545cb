// The default of RuntimeOptions::maxMessageBytes (worker/src/memory_limit.h) and
// its environment override (applyEnvironment, RPCJOB_MAX_MESSAGE_BYTES).

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "memory_limit.h"
#include "rpcjob/runtime/options.h"

namespace rpcjob::runtime {
namespace {

TEST(MemoryLimit, CgroupFilesParse) {
  EXPECT_EQ(parseCgroupMemoryLimit("8589934592\n"), 8589934592u);  // v2 or v1, 8 GiB
  EXPECT_EQ(parseCgroupMemoryLimit("1048576"), 1048576u);
  EXPECT_EQ(parseCgroupMemoryLimit("max\n"), std::nullopt);                  // v2: no limit
  EXPECT_EQ(parseCgroupMemoryLimit("9223372036854771712\n"), std::nullopt);  // v1: no limit
  for (const char* bad : {"", "\n", "-1", "12 MB", "0x10", "99999999999999999999999"}) {
    EXPECT_EQ(parseCgroupMemoryLimit(bad), std::nullopt) << bad;
  }
}

TEST(MemoryLimit, AtMostThePhysicalMemory) {
  const auto physical = static_cast<std::uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                        static_cast<std::uint64_t>(sysconf(_SC_PAGE_SIZE));
  const std::uint64_t limit = memoryLimitBytes();
  EXPECT_GT(limit, 0u);
  EXPECT_LE(limit, physical);
}

TEST(MemoryLimit, EnvironmentOverride) {
  RuntimeOptions options;
  unsetenv("RPCJOB_MAX_MESSAGE_BYTES");
  applyEnvironment(options);
  EXPECT_EQ(options.maxMessageBytes, 0u);  // the default: memoryLimitBytes()
  setenv("RPCJOB_MAX_MESSAGE_BYTES", "1048576", 1);
  applyEnvironment(options);
  EXPECT_EQ(options.maxMessageBytes, 1048576u);
  for (const char* bad : {"0", "-5", "1MB", " 12", "99999999999999999999999"}) {
    setenv("RPCJOB_MAX_MESSAGE_BYTES", bad, 1);
    RuntimeOptions fresh;
    EXPECT_THROW(applyEnvironment(fresh), std::invalid_argument) << bad;
    EXPECT_EQ(fresh.maxMessageBytes, 0u) << bad;
  }
  unsetenv("RPCJOB_MAX_MESSAGE_BYTES");
}

// The on/off switches beside it: only "0" and "1", the message names the variable.
TEST(RuntimeEnvironment, SwitchesTakeZeroOrOne) {
  for (const char* name : {"RPCJOB_LANE", "RPCJOB_SHARED_HOST_ALLOCATOR"}) {
    SCOPED_TRACE(name);
    unsetenv(name);
    RuntimeOptions defaults;
    applyEnvironment(defaults);
    EXPECT_TRUE(defaults.sharedMemoryLane);
    EXPECT_FALSE(defaults.sharedHostAllocator);
    setenv(name, "1", 1);
    RuntimeOptions on;
    on.sharedMemoryLane = false;
    applyEnvironment(on);
    EXPECT_TRUE(std::string(name) == "RPCJOB_LANE" ? on.sharedMemoryLane : on.sharedHostAllocator);
    setenv(name, "0", 1);
    RuntimeOptions off;
    off.sharedHostAllocator = true;
    applyEnvironment(off);
    EXPECT_FALSE(std::string(name) == "RPCJOB_LANE" ? off.sharedMemoryLane
                                                    : off.sharedHostAllocator);
    for (const char* bad : {"yes", "2", " 1"}) {
      setenv(name, bad, 1);
      RuntimeOptions fresh;
      try {
        applyEnvironment(fresh);
        ADD_FAILURE() << bad << " was accepted";
      } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
      }
    }
    unsetenv(name);
  }
}

}  // namespace
}  // namespace rpcjob::runtime
