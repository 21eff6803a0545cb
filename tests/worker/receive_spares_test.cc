// Receive buffers held ahead (worker/src/cuda/receive_spares.h): the logic, on an
// allocator of host memory that counts what it hands out and gets back.
#include "cuda/receive_spares.h"

#include <ATen/ops/empty.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

using rpcjob::runtime::cuda::ReceiveSpares;

namespace {

constexpr size_t kMiB = size_t{1} << 20;

struct Counting {
  std::atomic<int> live{0};
  std::atomic<int> allocated{0};
  std::atomic<size_t> failAbove{SIZE_MAX};  // sizes above this throw, as out of memory would
};

// Each buffer's context remembers whose count it leaves when it is freed.
struct Buffer {
  std::atomic<int>* live;
};

ReceiveSpares::Allocate trackedAllocator(Counting& c) {
  return [&c](int device, size_t bytes) {
    (void)device;
    if (bytes > c.failAbove) throw std::runtime_error("out of memory");
    c.live++;
    c.allocated++;
    auto* b = new Buffer{&c.live};
    return c10::DataPtr(
        b, b,
        [](void* ctx) {
          auto* b = static_cast<Buffer*>(ctx);
          (*b->live)--;
          delete b;
        },
        c10::Device(c10::kCPU));
  };
}

// A message received these: hold() asks the thread, settle() waits until it has.
void holdNow(ReceiveSpares& spares, const std::vector<std::pair<int, size_t>>& received) {
  spares.hold(received);
  spares.settle();
}

}  // namespace

TEST(ReceiveSpares, NothingHeldBeforeAMessageAsks) {
  Counting c;
  ReceiveSpares spares(64 * kMiB, trackedAllocator(c));
  EXPECT_FALSE(spares.take(0, 4 * kMiB));
  EXPECT_EQ(spares.stats().missed, 1u);
  EXPECT_EQ(c.allocated, 0);
}

TEST(ReceiveSpares, TheNextReceiveOfASizeTakesTheBufferHeldForIt) {
  Counting c;
  ReceiveSpares spares(64 * kMiB, trackedAllocator(c));
  holdNow(spares, {{0, 4 * kMiB}});
  EXPECT_EQ(spares.stats().held, 1u);
  EXPECT_EQ(spares.stats().heldBytes, 4 * kMiB);
  EXPECT_FALSE(spares.take(1, 4 * kMiB)) << "another device";
  EXPECT_FALSE(spares.take(0, 4 * kMiB + 1)) << "another size";
  c10::DataPtr p = spares.take(0, 4 * kMiB);
  ASSERT_TRUE(p);
  EXPECT_FALSE(spares.take(0, 4 * kMiB)) << "handed out once";
  auto s = spares.stats();
  EXPECT_EQ(s.taken, 1u);
  EXPECT_EQ(s.missed, 3u);  // the other device, the other size, the second take
  EXPECT_EQ(s.held, 0u);
  EXPECT_EQ(s.heldBytes, 0u);
  p.clear();
  EXPECT_EQ(c.live, 0) << "a taken buffer belongs to its receiver";
}

TEST(ReceiveSpares, SmallSizesAreNotHeld) {
  Counting c;
  ReceiveSpares spares(64 * kMiB, trackedAllocator(c));
  holdNow(spares, {{0, ReceiveSpares::kMinBytes - 1}, {0, 4096}});
  EXPECT_EQ(c.allocated, 0);
  EXPECT_FALSE(spares.take(0, 4096));
  EXPECT_EQ(spares.stats().missed, 0u) << "small receives are not counted as misses";
}

TEST(ReceiveSpares, AMessageWithASizeTwiceHoldsTwoAndNoMoreWhenItComesAgain) {
  Counting c;
  ReceiveSpares spares(64 * kMiB, trackedAllocator(c));
  holdNow(spares, {{0, 2 * kMiB}, {0, 2 * kMiB}, {1, 2 * kMiB}});
  EXPECT_EQ(spares.stats().held, 3u);
  holdNow(spares, {{0, 2 * kMiB}, {0, 2 * kMiB}});  // none taken in between: none added
  EXPECT_EQ(spares.stats().held, 3u);
  EXPECT_EQ(spares.held(0, 2 * kMiB), 2u);
  EXPECT_EQ(spares.held(1, 2 * kMiB), 1u);
  EXPECT_EQ(c.allocated, 3);
  EXPECT_TRUE(spares.take(0, 2 * kMiB));
  EXPECT_TRUE(spares.take(0, 2 * kMiB));
  EXPECT_FALSE(spares.take(0, 2 * kMiB));
  EXPECT_TRUE(spares.take(1, 2 * kMiB));
}

TEST(ReceiveSpares, TheBudgetGivesBackTheOldestOtherSizeFirst) {
  Counting c;
  ReceiveSpares spares(10 * kMiB, trackedAllocator(c));
  holdNow(spares, {{0, 4 * kMiB}});
  holdNow(spares, {{0, 3 * kMiB}});
  EXPECT_EQ(spares.stats().heldBytes, 7 * kMiB);
  holdNow(spares, {{0, 5 * kMiB}});  // 12 MiB would be over: the 4 MiB one (oldest) goes
  EXPECT_EQ(spares.stats().heldBytes, 8 * kMiB);
  EXPECT_EQ(c.live, 2);
  EXPECT_FALSE(spares.take(0, 4 * kMiB));
  EXPECT_TRUE(spares.take(0, 3 * kMiB));
  EXPECT_TRUE(spares.take(0, 5 * kMiB));
}

TEST(ReceiveSpares, ASizeOverTheBudgetIsNeverHeld) {
  Counting c;
  ReceiveSpares spares(8 * kMiB, trackedAllocator(c));
  spares.hold({{0, 2 * kMiB}});
  holdNow(spares, {{0, 9 * kMiB}});
  EXPECT_EQ(c.allocated, 1);
  EXPECT_TRUE(spares.take(0, 2 * kMiB)) << "what fit is kept";
}

TEST(ReceiveSpares, ABudgetOfZeroTurnsItOff) {
  Counting c;
  ReceiveSpares spares(0, trackedAllocator(c));
  holdNow(spares, {{0, 2 * kMiB}});
  EXPECT_EQ(c.allocated, 0);
  EXPECT_FALSE(spares.take(0, 2 * kMiB));
  EXPECT_EQ(spares.stats().missed, 0u);
}

TEST(ReceiveSpares, AnAllocationThatFailsLeavesTheReceiveToAllocateAsBefore) {
  Counting c;
  c.failAbove = 3 * kMiB;
  ReceiveSpares spares(64 * kMiB, trackedAllocator(c));
  holdNow(spares, {{0, 4 * kMiB}, {0, 2 * kMiB}});
  EXPECT_FALSE(spares.take(0, 4 * kMiB));
  EXPECT_TRUE(spares.take(0, 2 * kMiB)) << "the other size of the message is held";
  EXPECT_EQ(spares.stats().heldBytes, 0u) << "nothing reserved for the failed one";
}

TEST(ReceiveSpares, WhatIsHeldGoesBackWhenTheSparesGo) {
  Counting c;
  {
    ReceiveSpares spares(64 * kMiB, trackedAllocator(c));
    holdNow(spares, {{0, 2 * kMiB}, {1, 3 * kMiB}});
    EXPECT_EQ(c.live, 2);
  }
  EXPECT_EQ(c.live, 0);
}

TEST(ReceiveSpares, ManyThreadsTakeEachBufferOnce) {
  Counting c;
  ReceiveSpares spares(1024 * kMiB, trackedAllocator(c));
  std::vector<std::pair<int, size_t>> sizes;
  for (int i = 0; i < 64; ++i) sizes.push_back({0, 2 * kMiB});
  holdNow(spares, sizes);
  std::atomic<int> got{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 16; ++i) {
        if (spares.take(0, 2 * kMiB)) got++;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(got, 64);
  EXPECT_EQ(spares.stats().taken, 64u);
  EXPECT_EQ(spares.stats().missed, 64u);
}

TEST(ReceiveSpares, AfterStopNothingMoreIsAllocatedButWhatIsHeldIsHandedOut) {
  Counting c;
  ReceiveSpares spares(64 * kMiB, trackedAllocator(c));
  holdNow(spares, {{0, 2 * kMiB}});
  spares.stop();
  spares.hold({{0, 3 * kMiB}});
  spares.settle();  // returns: nothing is asked of a stopped thread
  EXPECT_EQ(c.allocated, 1);
  EXPECT_TRUE(spares.take(0, 2 * kMiB));
  spares.stop();  // twice is fine
}

TEST(ReceiveSpares, AfterQuiesceTheNextHoldStartsAgain) {
  Counting c;
  ReceiveSpares spares(64 * kMiB, trackedAllocator(c));
  holdNow(spares, {{0, 2 * kMiB}});
  spares.quiesce();
  EXPECT_EQ(spares.held(0, 2 * kMiB), 0u) << "what was held went back";
  EXPECT_EQ(spares.stats().heldBytes, 0u);
  EXPECT_EQ(c.live, 0);
  holdNow(spares, {{0, 3 * kMiB}});
  EXPECT_EQ(spares.held(0, 3 * kMiB), 1u);
  EXPECT_EQ(c.allocated, 2);
}

TEST(ReceiveSpares, ASizeTheBudgetCannotTakeCostsTheOthersNothing) {
  Counting c;
  ReceiveSpares spares(1000 * kMiB, trackedAllocator(c));
  // Held: 600 and 300 MiB. A message of two 600 MiB tensors wants 1200: it cannot
  // have them, so the 300 MiB one stays.
  holdNow(spares, {{0, 600 * kMiB}, {0, 300 * kMiB}});
  holdNow(spares, {{0, 600 * kMiB}, {0, 600 * kMiB}});
  EXPECT_EQ(spares.held(0, 300 * kMiB), 1u);
  EXPECT_EQ(spares.held(0, 600 * kMiB), 1u);
  EXPECT_EQ(c.allocated, 2);
}

TEST(ReceiveSpares, AMessageOfTwoSizesOverTheBudgetKeepsWhatFitsAndChurnsNothing) {
  Counting c;
  ReceiveSpares spares(1024 * kMiB, trackedAllocator(c));
  for (int message = 0; message < 5; ++message) {
    spares.take(0, 300 * kMiB);
    spares.take(0, 800 * kMiB);
    holdNow(spares, {{0, 300 * kMiB}, {0, 800 * kMiB}});
  }
  // Each message's 300 MiB buffer is held and taken by the next; the 800 MiB one
  // never fits beside it and never pushes it out.
  EXPECT_EQ(spares.stats().taken, 4u);
  EXPECT_EQ(c.allocated, 5);
  EXPECT_EQ(spares.held(0, 300 * kMiB), 1u);
}

TEST(ReceiveSpares, QuiesceFromManyThreadsWhileHoldingNeitherHangsNorLeaksAThread) {
  Counting c;
  ReceiveSpares spares(1024 * kMiB, trackedAllocator(c));
  std::atomic<bool> done{false};
  std::thread holder([&] {
    for (int i = 0; !done; ++i) spares.hold({{i % 2, (1 + i % 5) * kMiB}});
  });
  std::vector<std::thread> quiescers;
  for (int t = 0; t < 4; ++t) {
    quiescers.emplace_back([&] {
      for (int i = 0; i < 200; ++i) spares.quiesce();
    });
  }
  for (auto& t : quiescers) t.join();
  done = true;
  holder.join();
  spares.stop();
  holdNow(spares, {{0, 7 * kMiB}});
  EXPECT_EQ(spares.held(0, 7 * kMiB), 0u) << "stopped for good";
}

TEST(ReceiveSpares, TheBudgetFromTheEnvironmentIsDecimalBytesOrTheDefaultWithAReason) {
  std::string problem;
  EXPECT_EQ(ReceiveSpares::budgetFrom(nullptr, problem), ReceiveSpares::kDefaultBudget);
  EXPECT_EQ(ReceiveSpares::budgetFrom("", problem), ReceiveSpares::kDefaultBudget);
  EXPECT_EQ(ReceiveSpares::budgetFrom("0", problem), 0u);
  EXPECT_EQ(ReceiveSpares::budgetFrom("1048576", problem), 1048576u);
  EXPECT_EQ(problem, "");
  for (const char* bad : {"abc", "-1", "1e9", " 5", "5 ", "1GiB", "0x10"}) {
    problem.clear();
    EXPECT_EQ(ReceiveSpares::budgetFrom(bad, problem), ReceiveSpares::kDefaultBudget) << bad;
    EXPECT_NE(problem.find("decimal digits"), std::string::npos) << bad << ": " << problem;
    EXPECT_NE(problem.find(bad), std::string::npos) << "names the value: " << problem;
  }
  problem.clear();
  EXPECT_EQ(ReceiveSpares::budgetFrom("99999999999999999999999", problem),
            ReceiveSpares::kDefaultBudget);
  EXPECT_NE(problem.find("this machine can hold"), std::string::npos) << problem;
}

// What allocate() builds on a held buffer (here host memory from the CPU
// allocator): the tensor at::empty would give, storage that grows included.
TEST(ReceiveSpares, ATensorOnAHeldBufferIsAsAtEmptysAndGrows) {
  c10::Allocator* cpu = c10::GetCPUAllocator();
  const std::vector<int64_t> sizes{4, 6};
  at::Tensor t = rpcjob::runtime::cuda::tensorOnBuffer(cpu->allocate(4 * 6 * sizeof(float)),
                                                       4 * 6 * sizeof(float), sizes, at::kFloat,
                                                       cpu, c10::DispatchKey::CPU);
  at::Tensor e = at::empty(sizes, at::kFloat);
  EXPECT_EQ(t.sizes(), e.sizes());
  EXPECT_EQ(t.strides(), e.strides());
  EXPECT_EQ(t.dtype(), e.dtype());
  EXPECT_EQ(t.device(), e.device());
  EXPECT_EQ(t.storage_offset(), 0);
  EXPECT_EQ(t.nbytes(), e.nbytes());
  t.fill_(2);
  EXPECT_EQ(t.sum().item<float>(), 48.0f);
  EXPECT_NO_THROW(t.resize_({100}));  // a fixed-size storage threw here
  EXPECT_EQ(t.numel(), 100);
}
