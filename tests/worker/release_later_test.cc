// DeferredReleases (worker/src/release_later.h): what is held and when it goes.
#include "release_later.h"

#include <gtest/gtest.h>

#include <thread>

namespace rpcjob::runtime {
namespace {

using Clock = DeferredReleases::Clock;

std::shared_ptr<void> tracked(std::weak_ptr<int>& watch) {
  auto p = std::make_shared<int>(7);
  watch = p;
  return p;
}

TEST(DeferredReleases, HoldsUntilReleaseAll) {
  DeferredReleases r(true);
  std::weak_ptr<int> a, b;
  const auto now = Clock::now();
  r.add(tracked(a), 100, now);
  r.add(tracked(b), 100, now);
  EXPECT_FALSE(a.expired());
  EXPECT_FALSE(b.expired());
  EXPECT_EQ(r.held(), 2u);
  r.releaseAll();
  EXPECT_TRUE(a.expired());
  EXPECT_TRUE(b.expired());
  EXPECT_EQ(r.held(), 0u);
  r.releaseAll();  // nothing held: a no-op
}

TEST(DeferredReleases, DisabledReleasesAtOnce) {
  DeferredReleases r(false);
  std::weak_ptr<int> a;
  r.add(tracked(a), 1, Clock::now());
  EXPECT_TRUE(a.expired());
  EXPECT_EQ(r.held(), 0u);
}

TEST(DeferredReleases, StaleOnesGoYoungOnesStay) {
  DeferredReleases r(true);
  std::weak_ptr<int> a;
  const auto t0 = Clock::now();
  r.add(tracked(a), 1, t0);
  r.releaseOlderThan(t0 + std::chrono::milliseconds(10), std::chrono::milliseconds(50));
  EXPECT_FALSE(a.expired()) << "10 ms old, the limit 50";
  r.releaseOlderThan(t0 + std::chrono::milliseconds(60), std::chrono::milliseconds(50));
  EXPECT_TRUE(a.expired());
}

TEST(DeferredReleases, TooManyItemsGoTogether) {
  DeferredReleases r(true);
  std::vector<std::weak_ptr<int>> watches(DeferredReleases::kMaxItems + 1);
  const auto now = Clock::now();
  for (size_t i = 0; i < DeferredReleases::kMaxItems; ++i) r.add(tracked(watches[i]), 0, now);
  EXPECT_EQ(r.held(), DeferredReleases::kMaxItems);
  EXPECT_FALSE(watches.front().expired());
  r.add(tracked(watches.back()), 0, now);  // one over the limit: all go
  for (const auto& w : watches) EXPECT_TRUE(w.expired());
  EXPECT_EQ(r.held(), 0u);
}

TEST(DeferredReleases, TooManyBytesGoTogether) {
  DeferredReleases r(true);
  std::weak_ptr<int> a, b;
  const auto now = Clock::now();
  r.add(tracked(a), DeferredReleases::kMaxBytes, now);
  EXPECT_FALSE(a.expired()) << "at the limit, not over it";
  r.add(tracked(b), 1, now);
  EXPECT_TRUE(a.expired());
  EXPECT_TRUE(b.expired());
}

// A destructor run by a release may hold something again (a released context
// whose parts are themselves held): no deadlock, and the new item is kept.
TEST(DeferredReleases, ADestructorMayAddAgain) {
  DeferredReleases r(true);
  std::weak_ptr<int> inner;
  struct Adder {
    DeferredReleases* r;
    std::weak_ptr<int>* inner;
    ~Adder() { r->add(tracked(*inner), 0, Clock::now()); }
  };
  auto adder = std::make_shared<Adder>();
  adder->r = &r;
  adder->inner = &inner;
  r.add(std::move(adder), 0, Clock::now());
  r.releaseAll();
  EXPECT_EQ(r.held(), 1u);
  EXPECT_FALSE(inner.expired());
  r.releaseAll();
  EXPECT_TRUE(inner.expired());
}

TEST(DeferredReleases, ThreadsAddAndReleaseTogether) {
  DeferredReleases r(true);
  std::vector<std::thread> threads;
  std::atomic<int> alive{0};
  struct Counted {
    std::atomic<int>* alive;
    ~Counted() { alive->fetch_sub(1); }
  };
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        alive.fetch_add(1);
        auto c = std::make_shared<Counted>();
        c->alive = &alive;
        r.add(std::move(c), 10, Clock::now());
        if (i % 7 == 0) r.releaseAll();
      }
    });
  }
  for (auto& t : threads) t.join();
  r.releaseAll();
  EXPECT_EQ(alive.load(), 0);
  EXPECT_EQ(r.held(), 0u);
}

// A GPU step's releases wait for the end of the scope around its message (the
// innermost one, on this thread), and a step outside any scope releases at once.
TEST(AfterGpuStep, AStepReleasesWhenItsScopeEndsNotBefore) {
  DeferredReleases r(true);
  std::weak_ptr<int> a, b;
  {
    AfterGpuStep outer(r);
    r.add(tracked(a), 1, Clock::now());
    {
      AfterGpuStep inner(r);
      noteGpuStep();
      EXPECT_FALSE(a.expired()) << "released inside the step's scope";
    }
    EXPECT_TRUE(a.expired()) << "the inner scope had the step";
    r.add(tracked(b), 1, Clock::now());
  }
  EXPECT_FALSE(b.expired()) << "no step in the outer scope after the inner one: nothing to release";
  {
    AfterGpuStep none(r);  // no step in it
  }
  EXPECT_FALSE(b.expired());
  r.releaseAll();
  EXPECT_TRUE(b.expired());
}

TEST(AfterGpuStep, ScopesAreThreadLocal) {
  DeferredReleases r(true);
  std::weak_ptr<int> a;
  AfterGpuStep scope(r);
  r.add(tracked(a), 1, Clock::now());
  // A step on another thread, in a scope of its own over the same releases.
  std::thread([&] {
    AfterGpuStep theirs(r);
    noteGpuStep();
  }).join();
  EXPECT_TRUE(a.expired()) << "the other thread's scope ended with a step";
}

}  // namespace
}  // namespace rpcjob::runtime
