// PendingCalls (worker/src/pending_calls.h) against a reference model (a
// std::map and a std::multimap of deadlines) under random inserts, answers,
// timeouts and failed-pipe sweeps: every call comes out exactly once, the
// expired ones in deadline order, and the deadline heap stays bounded.
#include "pending_calls.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>

namespace rpcjob::runtime {
namespace {

using Clock = std::chrono::steady_clock;
using Table = PendingCalls<std::string>;

TEST(PendingCalls, TakesEachCallOnce) {
  Table t;
  const auto now = Clock::now();
  t.insert(7, Table::kNoDeadline, "seven");
  t.insert(8, now + std::chrono::seconds(1), "eight");
  EXPECT_EQ(t.size(), 2u);
  EXPECT_EQ(t.take(7), std::optional<std::string>("seven"));
  EXPECT_EQ(t.take(7), std::nullopt);
  EXPECT_EQ(t.take(9), std::nullopt);
  EXPECT_EQ(t.nextDeadline(), now + std::chrono::seconds(1));
  EXPECT_EQ(t.takeExpired(now), std::nullopt);  // not due yet
  EXPECT_EQ(t.takeExpired(now + std::chrono::seconds(1)), std::optional<std::string>("eight"));
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(t.nextDeadline(), Table::kNoDeadline);
}

TEST(PendingCalls, AnsweredCallsNoLongerExpire) {
  Table t;
  const auto now = Clock::now();
  t.insert(1, now, "one");
  t.insert(2, now + std::chrono::milliseconds(5), "two");
  EXPECT_TRUE(t.take(1));
  EXPECT_EQ(t.nextDeadline(), now + std::chrono::milliseconds(5));  // 1's entry is stale
  EXPECT_EQ(t.takeExpired(now + std::chrono::hours(1)), std::optional<std::string>("two"));
  EXPECT_EQ(t.takeExpired(now + std::chrono::hours(1)), std::nullopt);
}

// A synchronous caller's pattern: one call in flight, answered, for a long time.
// Answered calls' deadline entries must not pile up.
TEST(PendingCalls, DeadlineEntriesStayBounded) {
  Table t;
  const auto now = Clock::now();
  t.insert(1, Table::kNoDeadline, "held");  // a call that is never answered
  for (uint64_t id = 2; id < 100000; ++id) {
    t.insert(id, now + std::chrono::seconds(60), "call");
    ASSERT_TRUE(t.take(id));
    ASSERT_LE(t.deadlineEntries(), 2 * (t.size() + 1) + 64);
  }
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.take(1), std::optional<std::string>("held"));
}

// A burst far larger than usual gives its memory back once it has drained.
TEST(PendingCalls, ShrinksAfterAHugeBurst) {
  Table t;
  const auto now = Clock::now();
  constexpr uint64_t kBurst = 300000;
  for (uint64_t id = 1; id <= kBurst; ++id) t.insert(id, now + std::chrono::seconds(60), "c");
  EXPECT_GE(t.slotCount(), 2 * kBurst);
  for (uint64_t id = 1; id <= kBurst - 10; ++id) ASSERT_TRUE(t.take(id)) << id;
  EXPECT_LE(t.slotCount(), size_t{1} << 16);
  for (uint64_t id = kBurst - 9; id <= kBurst; ++id) ASSERT_TRUE(t.take(id)) << id;  // still there
  EXPECT_EQ(t.nextDeadline(), Table::kNoDeadline);  // drops the stale entries
  EXPECT_TRUE(t.empty());
}

TEST(PendingCalls, MatchesAModelUnderRandomOperations) {
  std::mt19937_64 rng(20261124);
  Table t;
  std::map<uint64_t, std::pair<Clock::time_point, std::string>> model;
  std::multiset<std::pair<Clock::time_point, uint64_t>> modelDeadlines;
  const auto t0 = Clock::now();
  auto now = t0;
  uint64_t nextId = 1;
  for (int step = 0; step < 50000; ++step) {
    const int op = static_cast<int>(rng() % 100);
    if (op < 45 || model.empty()) {  // a call; some without a deadline, some in bursts
      const int burst = rng() % 10 == 0 ? 50 : 1;
      for (int b = 0; b < burst; ++b) {
        const uint64_t id = nextId++;
        const auto deadline =
            rng() % 4 == 0 ? Table::kNoDeadline : now + std::chrono::microseconds(rng() % 5000);
        const std::string value = "call " + std::to_string(id);
        t.insert(id, deadline, value);
        model[id] = {deadline, value};
        if (deadline != Table::kNoDeadline) modelDeadlines.insert({deadline, id});
      }
    } else if (op < 85) {  // an answer, to a call in flight or long gone
      const uint64_t id = 1 + rng() % nextId;
      auto got = t.take(id);
      auto it = model.find(id);
      if (it == model.end()) {
        ASSERT_FALSE(got) << id;
      } else {
        ASSERT_EQ(got, std::optional<std::string>(it->second.second)) << id;
        modelDeadlines.erase({it->second.first, id});
        model.erase(it);
      }
    } else if (op < 98) {  // time passes; the due calls expire, earliest first
      now += std::chrono::microseconds(rng() % 1000);
      const auto expectNext =
          modelDeadlines.empty() ? Table::kNoDeadline : modelDeadlines.begin()->first;
      ASSERT_EQ(t.nextDeadline(), expectNext);
      while (auto expired = t.takeExpired(now)) {
        ASSERT_FALSE(modelDeadlines.empty());
        auto first = *modelDeadlines.begin();
        ASSERT_LE(first.first, now);
        // Equal deadlines may come out in either order: the one taken is due
        // at the earliest deadline, and is in the model.
        const uint64_t id = std::stoull(expired->substr(5));
        ASSERT_EQ(model.at(id).first, first.first);
        modelDeadlines.erase({first.first, id});
        model.erase(id);
      }
      ASSERT_TRUE(modelDeadlines.empty() || modelDeadlines.begin()->first > now);
    } else {  // a failed pipe: every call with an odd id (say) goes
      auto failed = t.takeIf([](const std::string& v) { return std::stoull(v.substr(5)) % 2; });
      std::set<std::string> got(failed.begin(), failed.end());
      ASSERT_EQ(got.size(), failed.size());  // each once
      size_t odd = 0;
      for (auto it = model.begin(); it != model.end();) {
        if (it->first % 2 == 1) {
          ASSERT_EQ(got.count(it->second.second), 1u);
          modelDeadlines.erase({it->second.first, it->first});
          it = model.erase(it);
          ++odd;
        } else {
          ++it;
        }
      }
      ASSERT_EQ(got.size(), odd);  // and none but those
    }
    ASSERT_EQ(t.size(), model.size());
    ASSERT_LE(t.deadlineEntries(), 2 * (t.size() + 1) + 64);
  }
  auto rest = t.takeAll();
  EXPECT_EQ(rest.size(), model.size());
  EXPECT_TRUE(t.empty());
  for (const auto& [id, call] : model) EXPECT_EQ(t.take(id), std::nullopt);
}

}  // namespace
}  // namespace rpcjob::runtime
