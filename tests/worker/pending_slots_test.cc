// PendingSlots (worker/src/pending_slots.h): one thread's semantics, then the
// races the runtime relies on, between real threads: every call is taken
// exactly once whoever races for it (answer, timeout scan, sweep), and a
// refusal set before a sweep leaves no call behind in the slots.
#include "pending_slots.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace rpcjob::runtime {
namespace {

using Clock = std::chrono::steady_clock;
using Slots = PendingSlots<std::string>;
constexpr auto kNever = Clock::time_point::max();
const auto yes = [] { return true; };

TEST(PendingSlots, TakesEachCallOnce) {
  Slots s(8);
  std::string call = "seven";
  EXPECT_EQ(s.tryInsert(7, kNever, call, yes), Slots::Insert::kOk);
  EXPECT_TRUE(s.holds(7));
  EXPECT_FALSE(s.empty());
  EXPECT_EQ(s.take(7), std::optional<std::string>("seven"));
  EXPECT_EQ(s.take(7), std::nullopt);
  EXPECT_FALSE(s.holds(7));
  EXPECT_EQ(s.take(3), std::nullopt);  // never sent
  EXPECT_TRUE(s.empty());
}

TEST(PendingSlots, AnOlderCallKeepsItsSlot) {
  Slots s(4);
  std::string older = "one", newer = "five";
  ASSERT_EQ(s.tryInsert(1, kNever, older, yes), Slots::Insert::kOk);
  EXPECT_EQ(s.tryInsert(5, kNever, newer, yes), Slots::Insert::kTaken);  // 5 & 3 == 1 & 3
  EXPECT_EQ(newer, "five");  // not moved from: the locked table gets it
  EXPECT_EQ(s.take(5), std::nullopt);
  EXPECT_EQ(s.take(1), std::optional<std::string>("one"));
  EXPECT_EQ(s.tryInsert(5, kNever, newer, yes), Slots::Insert::kOk);  // free again
  EXPECT_EQ(s.take(5), std::optional<std::string>("five"));
}

TEST(PendingSlots, ARefusedCallLeavesItsSlotFree) {
  Slots s(4);
  std::string call = "two";
  EXPECT_EQ(s.tryInsert(2, kNever, call, [] { return false; }), Slots::Insert::kRefused);
  EXPECT_EQ(call, "two");
  EXPECT_TRUE(s.empty());
  EXPECT_EQ(s.tryInsert(6, kNever, call, yes), Slots::Insert::kOk);
}

TEST(PendingSlots, SweepsTakeOnlyWhatTheyMatch) {
  Slots s(16);
  for (uint64_t id = 1; id <= 10; ++id) {
    std::string call = std::to_string(id);
    ASSERT_EQ(s.tryInsert(id, kNever, call, yes), Slots::Insert::kOk);
  }
  std::vector<std::string> even;
  s.takeIf([](const std::string& c) { return std::stoi(c) % 2 == 0; }, even);
  EXPECT_EQ(even.size(), 5u);
  for (const auto& c : even) EXPECT_EQ(std::stoi(c) % 2, 0);
  for (uint64_t id = 1; id <= 10; ++id) EXPECT_EQ(s.holds(id), id % 2 == 1) << id;
  std::vector<std::string> rest;
  s.takeAll(rest);
  EXPECT_EQ(rest.size(), 5u);
  EXPECT_TRUE(s.empty());
}

TEST(PendingSlots, ExpiredCallsComeOutAndTheEarliestLeftIsSaid) {
  Slots s(16);
  const auto now = Clock::now();
  const auto in = [&](int ms) { return now + std::chrono::milliseconds(ms); };
  std::string a = "due", b = "later", c = "never", d = "due too";
  s.tryInsert(1, in(-5), a, yes);
  s.tryInsert(2, in(50), b, yes);
  s.tryInsert(3, kNever, c, yes);
  s.tryInsert(4, in(0), d, yes);
  std::vector<std::string> out;
  EXPECT_EQ(s.takeExpired(now, out), in(50));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_TRUE(s.holds(2) && s.holds(3) && !s.holds(1) && !s.holds(4));
  out.clear();
  EXPECT_EQ(s.takeExpired(in(50), out), kNever);  // only the one without a deadline is left
  EXPECT_EQ(out, std::vector<std::string>{"later"});
  s.take(3);
  EXPECT_EQ(s.takeExpired(in(100), out), kNever);
}

// A caller registering calls, an answer reader taking them as they are
// "answered", a timeout scan and a failed-pipe sweep, all at once on a table
// small enough to wrap: every call ends up taken exactly once, by someone.
TEST(PendingSlots, EveryCallIsTakenOnceUnderRaces) {
  constexpr uint64_t kCalls = 200000;
  Slots s(256);
  std::vector<std::atomic<int>> taken(kCalls + 1);
  std::vector<std::atomic<bool>> registered(kCalls + 1);
  std::atomic<uint64_t> sent{0};
  std::atomic<bool> done{false};
  auto count = [&](const std::string& call) { taken[std::stoull(call)].fetch_add(1); };
  const auto now = Clock::now();
  std::thread caller([&] {
    for (uint64_t id = 1; id <= kCalls; ++id) {
      std::string call = std::to_string(id);
      // Every 7th is due at once (the timeout scan's), the rest never.
      const auto deadline = id % 7 == 0 ? now : kNever;
      if (s.tryInsert(id, deadline, call, yes) == Slots::Insert::kOk) {
        registered[id] = true;
      } else {
        taken[id].fetch_add(1);  // the locked table's business: counted as taken here
      }
      sent.store(id, std::memory_order_release);
    }
  });
  std::thread reader([&] {  // answers arrive in order, some time after the request
    uint64_t next = 1;
    while (next <= kCalls) {
      if (next + 32 > sent.load(std::memory_order_acquire) &&
          sent.load(std::memory_order_acquire) < kCalls) {
        std::this_thread::yield();
        continue;
      }
      if (registered[next].load()) {
        if (auto call = s.take(next)) count(*call);
      }
      ++next;
    }
  });
  std::thread sweeper([&] {
    std::mt19937 random(7);
    while (!done.load()) {
      std::vector<std::string> out;
      s.takeExpired(Clock::now(), out);
      s.takeIf([&](const std::string& c) { return std::stoull(c) % 1000 == random() % 1000; }, out);
      for (const auto& c : out) count(c);
    }
  });
  caller.join();
  reader.join();
  done = true;
  sweeper.join();
  std::vector<std::string> left;
  s.takeAll(left);
  for (const auto& c : left) count(c);
  for (uint64_t id = 1; id <= kCalls; ++id) ASSERT_EQ(taken[id].load(), 1) << "call " << id;
}

// The runtime's refusal protocol (a failed pipe, shutdown): a sweeper sets a
// flag, then sweeps; an inserter checks the flag while it owns its slot. Once
// both are done, no call is left behind in the slots, however they interleave.
TEST(PendingSlots, ARefusalBeforeASweepLeavesNoCallBehind) {
  for (int round = 0; round < 200; ++round) {
    Slots s(64);
    std::atomic<bool> refused{false};
    std::atomic<int> inserted{0};
    std::vector<std::string> swept;
    std::thread inserter([&] {
      for (uint64_t id = 1;; ++id) {
        std::string call = std::to_string(id);
        const auto r = s.tryInsert(id, kNever, call, [&] {
          const bool ok = !refused.load();
          // Widens the moment between the check and the call's publishing,
          // where a sweep that passed over busy slots would miss the call.
          for (volatile int i = 0; i < 200; i = i + 1) {
          }
          return ok;
        });
        if (r == Slots::Insert::kRefused) return;
        if (r == Slots::Insert::kOk) inserted++;
        if (id % 64 == 0) {  // answered, as a reader would: keep slots free
          for (uint64_t a = id - 63; a <= id; ++a) {
            if (s.take(a)) inserted--;
          }
        }
      }
    });
    std::thread sweeper([&] {
      // A little later each round (work, not yields: a loaded machine makes
      // each yield a whole time slice).
      for (volatile int i = 0; i < round * 300; i = i + 1) {
      }
      refused.store(true);
      s.takeAll(swept);
    });
    inserter.join();
    sweeper.join();
    EXPECT_TRUE(s.empty()) << "round " << round;
    EXPECT_EQ(static_cast<int>(swept.size()), inserted.load()) << "round " << round;
  }
}

}  // namespace
}  // namespace rpcjob::runtime
