#include "rpcjob/operator/work_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace rpcjob::kube {
namespace {

using namespace std::chrono_literals;

TEST(WorkQueue, DeduplicatesQueuedKeys) {
  WorkQueue q;
  q.add("a");
  q.add("b");
  q.add("a");
  EXPECT_EQ(q.depth(), 2u);
  EXPECT_EQ(q.get(), "a");
  EXPECT_EQ(q.get(), "b");
  EXPECT_EQ(q.getFor(10ms), std::nullopt);
}

TEST(WorkQueue, KeyAddedWhileProcessingIsQueuedAgainAfterDone) {
  WorkQueue q;
  q.add("a");
  auto k = q.get();
  ASSERT_EQ(k, "a");
  q.add("a");
  q.add("a");
  EXPECT_EQ(q.depth(), 0u) << "must not be handed out while processing";
  EXPECT_EQ(q.getFor(10ms), std::nullopt);
  q.done("a");
  EXPECT_EQ(q.depth(), 1u);
  EXPECT_EQ(q.get(), "a");
  q.done("a");
  EXPECT_EQ(q.getFor(10ms), std::nullopt);
}

TEST(WorkQueue, RateLimitedDelaysDoubleAndForgetResets) {
  WorkQueue q(WorkQueue::Options{10ms, 80ms});
  EXPECT_EQ(q.nextDelay("k"), 10ms);
  q.addRateLimited("k");
  EXPECT_EQ(q.nextDelay("k"), 20ms);
  q.addRateLimited("k");
  q.addRateLimited("k");
  q.addRateLimited("k");
  EXPECT_EQ(q.failures("k"), 4);
  EXPECT_EQ(q.nextDelay("k"), 80ms);  // capped
  q.addRateLimited("k");
  EXPECT_EQ(q.nextDelay("k"), 80ms);
  q.forget("k");
  EXPECT_EQ(q.failures("k"), 0);
  EXPECT_EQ(q.nextDelay("k"), 10ms);
}

TEST(WorkQueue, AddAfterWaitsForTheDelay) {
  WorkQueue q;
  auto start = std::chrono::steady_clock::now();
  q.addAfter("late", 80ms);
  q.addAfter("early", 20ms);
  EXPECT_EQ(q.depth(), 0u);
  EXPECT_EQ(q.delayed(), 2u);
  EXPECT_EQ(q.get(), "early");
  EXPECT_EQ(q.get(), "late");
  EXPECT_GE(std::chrono::steady_clock::now() - start, 80ms);
}

TEST(WorkQueue, ShutDownWakesGetters) {
  WorkQueue q;
  std::thread t([&] { EXPECT_EQ(q.get(), std::nullopt); });
  std::this_thread::sleep_for(20ms);
  q.shutDown();
  t.join();
  q.add("x");
  EXPECT_EQ(q.depth(), 0u);
}

// Many producers and workers: every key added is processed at least once after
// its last add, and no key is ever processed by two workers at the same time.
TEST(WorkQueue, ManyThreadsNeverProcessOneKeyTwiceAtOnce) {
  WorkQueue q(WorkQueue::Options{1ms, 4ms});
  constexpr int kKeys = 20, kProducers = 4, kWorkers = 8, kAddsPerProducer = 2000;
  std::mutex mu;
  std::map<std::string, int> inFlight;
  std::map<std::string, int> processedAfter;  // generation seen by the last processing
  std::map<std::string, int> generation;
  std::atomic<bool> overlap{false};
  std::atomic<int> processed{0};

  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      while (auto key = q.get()) {
        int gen;
        {
          std::lock_guard<std::mutex> lock(mu);
          if (++inFlight[*key] > 1) overlap = true;
          gen = generation[*key];
        }
        std::this_thread::yield();
        {
          std::lock_guard<std::mutex> lock(mu);
          --inFlight[*key];
          processedAfter[*key] = std::max(processedAfter[*key], gen);
        }
        ++processed;
        if ((processed + w) % 7 == 0) {
          q.addRateLimited(*key);
        } else {
          q.forget(*key);
        }
        q.done(*key);
      }
    });
  }
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (int i = 0; i < kAddsPerProducer; ++i) {
        std::string key = "ns/job-" + std::to_string((i * 7 + p) % kKeys);
        {
          std::lock_guard<std::mutex> lock(mu);
          ++generation[key];
        }
        q.add(key);
      }
    });
  }
  for (auto& t : producers) t.join();
  // Wait until every key's latest generation has been processed.
  auto deadline = std::chrono::steady_clock::now() + 20s;
  for (;;) {
    bool all;
    {
      std::lock_guard<std::mutex> lock(mu);
      all = true;
      for (const auto& [key, gen] : generation) all &= processedAfter[key] >= gen;
    }
    if (all || std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(5ms);
  }
  q.shutDown();
  for (auto& t : workers) t.join();
  EXPECT_FALSE(overlap.load());
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [key, gen] : generation) {
    EXPECT_GE(processedAfter[key], gen) << key << " lost an update";
  }
  EXPECT_LT(processed.load(), kProducers * kAddsPerProducer) << "no deduplication happened";
}

}  // namespace
}  // namespace rpcjob::kube
