// useSharedHostAllocator() (worker/src/host_memory/shared_allocator.h) in one
// process: which of libtorch's CPU allocations land in the arena, that their
// bytes behave as any tensor's (operations, resize, the raw interface), the
// threshold's changes, bad arguments, and the cap on regions from
// RLIMIT_NOFILE. The allocator stays for the rest of the process, so the test
// of the state before it comes first and this binary holds nothing else.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>

#include <stdexcept>
#include <vector>

#include "host_memory/shared_allocator.h"
#include "host_memory/shared_arena.h"
#include "rpcjob/runtime/shared_host.h"

namespace rpcjob::runtime {
namespace {

constexpr int64_t kFloats4MiB = int64_t{1} << 20;  // 4 MiB of float32

TEST(SharedHostAllocator, A_BeforeItIsUsedNothingLandsInTheArena) {
  EXPECT_EQ(sharedHostAllocatorMinBytes(), 0u);
  EXPECT_FALSE(isSharedHost(at::ones({kFloats4MiB})));
}

TEST(SharedHostAllocator, B_LargeTensorsAndResultsLandInTheArenaSmallOnesDoNot) {
  const auto before = host_memory::sharedAllocatorCounters();
  useSharedHostAllocator();
  EXPECT_EQ(sharedHostAllocatorMinBytes(), kSharedHostAllocatorMinBytes);
  at::Tensor a = at::ones({kFloats4MiB});
  at::Tensor b = at::arange(kFloats4MiB, at::kFloat);
  at::Tensor sum = a + b;  // a result: libtorch allocated it
  EXPECT_TRUE(isSharedHost(a));
  EXPECT_TRUE(isSharedHost(b));
  EXPECT_TRUE(isSharedHost(sum));
  EXPECT_EQ(sum[kFloats4MiB - 1].item<float>(), static_cast<float>(kFloats4MiB));
  EXPECT_EQ(sum[0].item<float>(), 1.0f);
  EXPECT_FALSE(isSharedHost(at::ones({kFloats4MiB - 1})));  // one float below
  EXPECT_FALSE(isSharedHost(at::ones({16})));
  EXPECT_GE(host_memory::sharedAllocatorCounters().arenaAllocations - before.arenaAllocations, 3u);
  // Installing again changes nothing but the threshold.
  useSharedHostAllocator();
  EXPECT_TRUE(isSharedHost(at::empty({kFloats4MiB})));
}

TEST(SharedHostAllocator, C_FreedTensorsGoBackToTheArenasCache) {
  auto& arena = host_memory::SharedArena::instance();
  void* where = nullptr;
  {
    at::Tensor t = at::empty({3 * kFloats4MiB});  // 12 MiB: a size no other test uses
    where = t.data_ptr();
    ASSERT_TRUE(isSharedHost(t));
  }
  // The same region again, from the cache, for the same size.
  at::Tensor again = at::empty({3 * kFloats4MiB});
  EXPECT_EQ(again.data_ptr(), where);
  EXPECT_TRUE(arena.find(again.data_ptr(), again.nbytes()).has_value());
}

TEST(SharedHostAllocator, D_ResizeAcrossTheThresholdKeepsTheBytes) {
  at::Tensor t = at::arange(10, at::kFloat);
  ASSERT_FALSE(isSharedHost(t));
  t.resize_({2 * kFloats4MiB});
  EXPECT_TRUE(isSharedHost(t));
  EXPECT_TRUE(at::equal(t.slice(0, 0, 10), at::arange(10, at::kFloat)));
}

TEST(SharedHostAllocator, E_TheRawInterfaceFreesBothKinds) {
  c10::Allocator* allocator = c10::GetCPUAllocator();
  if (allocator->raw_deleter() == nullptr) GTEST_SKIP() << "libtorch's allocator has no raw API";
  for (size_t bytes : {size_t{64}, size_t{kSharedHostAllocatorMinBytes}}) {
    SCOPED_TRACE(bytes);
    void* p = allocator->raw_allocate(bytes);
    ASSERT_NE(p, nullptr);
    static_cast<char*>(p)[bytes - 1] = 7;
    EXPECT_EQ(host_memory::SharedArena::instance().find(p, bytes).has_value(),
              bytes >= kSharedHostAllocatorMinBytes);
    allocator->raw_deallocate(p);
  }
}

TEST(SharedHostAllocator, F_TheThresholdChangesAndZeroIsRefused) {
  useSharedHostAllocator(size_t{8} << 20);
  EXPECT_FALSE(isSharedHost(at::empty({kFloats4MiB})));
  EXPECT_TRUE(isSharedHost(at::empty({2 * kFloats4MiB})));
  EXPECT_THROW(useSharedHostAllocator(0), std::invalid_argument);
  EXPECT_EQ(sharedHostAllocatorMinBytes(), size_t{8} << 20);
  useSharedHostAllocator();
}

// RLIMIT_NOFILE restored at the end of the scope.
struct FdLimitGuard {
  FdLimitGuard() { getrlimit(RLIMIT_NOFILE, &saved); }
  ~FdLimitGuard() { setrlimit(RLIMIT_NOFILE, &saved); }
  rlimit saved{};
};

TEST(SharedHostAllocator, G_BeyondHalfTheDescriptorLimitTensorsComeFromLibtorch) {
  auto& arena = host_memory::SharedArena::instance();
  FdLimitGuard guard;
  // Room for two more regions under the cap (half the soft limit).
  const rlim_t regions = arena.mappedRegions();
  rlimit low = guard.saved;
  low.rlim_cur = 2 * (regions + 2);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  const auto before = host_memory::sharedAllocatorCounters();
  std::vector<at::Tensor> held;
  for (int i = 0; i < 4; ++i) {
    // Sizes no other test used: none comes from the cache.
    held.push_back(at::full({(5 + i) * kFloats4MiB}, static_cast<float>(i)));
  }
  EXPECT_TRUE(isSharedHost(held[0]));
  EXPECT_TRUE(isSharedHost(held[1]));
  EXPECT_FALSE(isSharedHost(held[2]));
  EXPECT_FALSE(isSharedHost(held[3]));
  EXPECT_EQ(held[3][0].item<float>(), 3.0f);
  const auto after = host_memory::sharedAllocatorCounters();
  EXPECT_EQ(after.overflowed - before.overflowed, 2u);
  EXPECT_EQ(after.arenaAllocations - before.arenaAllocations, 2u);
}

// Below the cap, yet the descriptor table full (other files): the region is
// mapped privately, and counted as what it is, not as shared memory.
TEST(SharedHostAllocator, H_ARegionMappedPrivatelyIsNotCountedAsShared) {
  auto& arena = host_memory::SharedArena::instance();
  FdLimitGuard guard;
  rlimit low = guard.saved;
  low.rlim_cur = 2 * (arena.mappedRegions() + 4);  // the cap is well above the regions
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> filler;
  for (int fd; (fd = ::dup(STDIN_FILENO)) >= 0;) filler.push_back(fd);
  ASSERT_EQ(errno, EMFILE);
  const auto before = host_memory::sharedAllocatorCounters();
  at::Tensor t = at::full({11 * kFloats4MiB}, 2.0f);  // a size no other test used
  const auto after = host_memory::sharedAllocatorCounters();
  for (int fd : filler) ::close(fd);
  EXPECT_FALSE(isSharedHost(t));
  EXPECT_EQ(t[0].item<float>(), 2.0f);
  EXPECT_EQ(after.arenaAllocations - before.arenaAllocations, 0u);
  EXPECT_EQ(after.overflowed - before.overflowed, 1u);
  // With descriptors again, regions are shared again.
  at::Tensor next = at::full({12 * kFloats4MiB}, 3.0f);
  EXPECT_TRUE(isSharedHost(next));
}

}  // namespace
}  // namespace rpcjob::runtime
