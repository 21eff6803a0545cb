// The runtime's calls into its Observer, between real pipes: every call is
// started and finished exactly once on each side, with its token handed back
// unchanged, the right status, and times that do not run backwards; a client
// call is finished before its future completes, a served one once its response
// is written (batched responses included).
#include <ATen/core/ivalue.h>
#include <ATen/ops/ones.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "cluster.h"

namespace rpcjob::testing {
namespace {

using runtime::CallStatus;
using runtime::EventTime;
using runtime::Observer;

// Keeps every start and finish, by token (each start hands out a new number).
class RecordingObserver final : public Observer {
 public:
  struct Call {
    bool server = false;
    std::string function, peer;
    EventTime::Clock::time_point started, finished;
    int finishes = 0;
    CallStatus status = CallStatus::kOther;
  };

  CallToken callStarted(const std::string& function, const std::string& peer,
                        const EventTime& now) override {
    return start(false, function, peer, now);
  }
  void callFinished(const std::string&, const std::string&, CallStatus status, CallToken token,
                    const EventTime& now) override {
    finish(status, token, now);
  }
  CallToken serverCallStarted(const std::string& function, const std::string& peer,
                              const EventTime& arrived) override {
    return start(true, function, peer, arrived);
  }
  void serverCallFinished(const std::string&, const std::string&, CallStatus status,
                          CallToken token, const EventTime& now) override {
    finish(status, token, now);
  }
  void pipeOpened(const std::string&, std::chrono::nanoseconds) override {}
  void channelSelected(const std::string&, const std::string&, const std::string&,
                       const std::string&) override {}

  // The calls of one side and function so far.
  std::vector<Call> calls(bool server, const std::string& function) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Call> out;
    for (const auto& [token, call] : calls_) {
      if (call.server == server && call.function == function) out.push_back(call);
    }
    return out;
  }
  int unknownTokens() {
    std::lock_guard<std::mutex> lock(mu_);
    return unknownTokens_;
  }

 private:
  CallToken start(bool server, const std::string& function, const std::string& peer,
                  const EventTime& time) {
    std::lock_guard<std::mutex> lock(mu_);
    const std::uint64_t token = ++next_;
    calls_[token] = Call{server, function, peer, time.get(), {}, 0, CallStatus::kOther};
    return {&calls_, token};
  }
  void finish(CallStatus status, CallToken token, const EventTime& now) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = calls_.find(token.start);
    if (token.handle != &calls_ || it == calls_.end()) {
      ++unknownTokens_;
      return;
    }
    it->second.finished = now.get();
    it->second.status = status;
    it->second.finishes++;
  }

  std::mutex mu_;
  std::uint64_t next_ = 0;
  std::map<std::uint64_t, Call> calls_;
  int unknownTokens_ = 0;
};

// Every call finished exactly once, with `status`, no earlier than it started.
void expectFinishedOnce(const std::vector<RecordingObserver::Call>& calls, CallStatus status,
                        const std::string& peer) {
  for (const auto& call : calls) {
    EXPECT_EQ(call.finishes, 1) << call.function;
    EXPECT_EQ(call.status, status) << call.function;
    EXPECT_EQ(call.peer, peer) << call.function;
    EXPECT_GE(call.finished, call.started) << call.function;
  }
}

// Polls until `done` holds or 10 s passed; whether it held.
bool within10s(const std::function<bool()>& done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TEST(RuntimeObserver, SeesEveryCallStartAndFinishOnceOnBothSides) {
  auto observer = std::make_shared<RecordingObserver>();
  runtime::RuntimeOptions options;
  options.observer = observer;
  Cluster cluster(1, options);
  auto& rt = cluster.driver();

  // Client side, to a remote worker: finished before rpcSync returns.
  for (int64_t i = 0; i < 20; ++i) {
    ASSERT_EQ(rt.rpcSync("w1", "identity", {i}).toInt(), i);
    const auto calls = observer->calls(false, "identity");
    ASSERT_EQ(calls.size(), static_cast<size_t>(i + 1));
    expectFinishedOnce(calls, CallStatus::kOk, "w1");
  }
  EXPECT_THROW(rt.rpcSync("w1", "raise", {std::string("x")}), runtime::RpcError);
  expectFinishedOnce(observer->calls(false, "raise"), CallStatus::kRemoteError, "w1");
  ASSERT_EQ(observer->calls(false, "raise").size(), 1u);

  // Server side: the driver serves its own calls (its pipe to itself), one by
  // one, then 2000 at once, whose responses go out in batches while a write is
  // in flight. A served call finishes once its response is written, which may
  // come after the caller's future completed: wait for it.
  for (int i = 0; i < 20; ++i) {
    auto sum = rt.rpcSync("driver", "add", {at::ones({1}), at::ones({1})}).toTensor();
    ASSERT_EQ(sum.item<float>(), 2.0f);
  }
  EXPECT_THROW(rt.rpcSync("driver", "raise", {std::string("y")}), runtime::RpcError);
  std::vector<runtime::Future> futures;
  for (int64_t i = 0; i < 2000; ++i) futures.push_back(rt.rpcAsync("driver", "identity", {i}));
  for (int64_t i = 0; i < 2000; ++i) ASSERT_EQ(futures[i].value().toInt(), i);

  EXPECT_TRUE(within10s([&] {
    auto served = observer->calls(true, "identity");
    return served.size() == 2000u &&
           std::all_of(served.begin(), served.end(), [](const auto& c) { return c.finishes > 0; });
  }));
  expectFinishedOnce(observer->calls(true, "identity"), CallStatus::kOk, "driver");
  EXPECT_TRUE(within10s([&] {
    auto served = observer->calls(true, "add");
    return served.size() == 20u &&
           std::all_of(served.begin(), served.end(), [](const auto& c) { return c.finishes > 0; });
  }));
  expectFinishedOnce(observer->calls(true, "add"), CallStatus::kOk, "driver");
  EXPECT_TRUE(within10s([&] {
    auto served = observer->calls(true, "raise");
    return served.size() == 1u && served[0].finishes > 0;
  }));
  expectFinishedOnce(observer->calls(true, "raise"), CallStatus::kRemoteError, "driver");
  // The client side of the same calls: 2000 + 1 identity (w1's 20 before).
  EXPECT_EQ(observer->calls(false, "identity").size(), 2020u);
  EXPECT_EQ(observer->unknownTokens(), 0);
}

}  // namespace
}  // namespace rpcjob::testing
