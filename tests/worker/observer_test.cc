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
#include <set>
#include <thread>

#include "cluster.h"
#include "lane/lane.h"

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

runtime::RuntimeOptions observedBy(std::shared_ptr<Observer> observer) {
  runtime::RuntimeOptions options;
  options.observer = std::move(observer);
  return options;
}

// Within 10 s, `n` calls of `function` on that side, all finished.
bool finishedWithin10s(RecordingObserver& observer, bool server, const std::string& function,
                       size_t n) {
  return within10s([&] {
    auto calls = observer.calls(server, function);
    return calls.size() == n &&
           std::all_of(calls.begin(), calls.end(), [](const auto& c) { return c.finishes > 0; });
  });
}

TEST(RuntimeObserver, SeesEveryCallStartAndFinishOnceOnBothSides) {
  auto observer = std::make_shared<RecordingObserver>();
  Cluster cluster(1, observedBy(observer));
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
  // Inline functions are answered on the read thread, without a Future between
  // the function and its response: served and recorded all the same.
  for (int64_t i = 0; i < 20; ++i) {
    ASSERT_EQ(rt.rpcSync("driver", runtime::kBuiltinEcho, {i}).toInt(), i);
  }
  EXPECT_THROW(rt.rpcSync("driver", "raise_inline", {std::string("z")}), runtime::RpcError);
  std::vector<runtime::Future> futures;
  for (int64_t i = 0; i < 2000; ++i) futures.push_back(rt.rpcAsync("driver", "identity", {i}));
  for (int64_t i = 0; i < 2000; ++i) ASSERT_EQ(futures[i].value().toInt(), i);

  EXPECT_TRUE(finishedWithin10s(*observer, true, "identity", 2000));
  expectFinishedOnce(observer->calls(true, "identity"), CallStatus::kOk, "driver");
  EXPECT_TRUE(finishedWithin10s(*observer, true, "add", 20));
  expectFinishedOnce(observer->calls(true, "add"), CallStatus::kOk, "driver");
  EXPECT_TRUE(finishedWithin10s(*observer, true, "raise", 1));
  expectFinishedOnce(observer->calls(true, "raise"), CallStatus::kRemoteError, "driver");
  EXPECT_TRUE(finishedWithin10s(*observer, true, runtime::kBuiltinEcho, 20));
  expectFinishedOnce(observer->calls(true, runtime::kBuiltinEcho), CallStatus::kOk, "driver");
  EXPECT_TRUE(finishedWithin10s(*observer, true, "raise_inline", 1));
  expectFinishedOnce(observer->calls(true, "raise_inline"), CallStatus::kRemoteError, "driver");
  // The client side of the identity calls: w1's 20, then the driver's own 2000.
  EXPECT_EQ(observer->calls(false, "identity").size(), 2020u);
  EXPECT_EQ(observer->unknownTokens(), 0);
}

// Calls that never get an answer are finished too: with the connection's
// failure when the peer dies, with the shutdown's when this worker stops.
// A burst of inline calls served by the lane's poller (the driver calls itself):
// the answers of a turn are held until the turn publishes them, and the calls
// are recorded then, together, with one clock read (RuntimeImpl::deferServed):
// many share a finish time, each is finished once, none before it started.
TEST(RuntimeObserver, CallsAnsweredInALaneTurnAreRecordedWhenItsAnswersAreOut) {
  auto observer = std::make_shared<RecordingObserver>();
  Cluster cluster(1, observedBy(observer));
  auto& rt = cluster.driver();
  ASSERT_EQ(rt.rpcSync("driver", runtime::kBuiltinEcho, {int64_t{0}}).toInt(), 0);  // lane up
  const auto lanesBefore = runtime::lane::laneCounters();
  std::vector<runtime::Future> futures;
  for (int64_t i = 0; i < 5000; ++i) {
    futures.push_back(rt.rpcAsync("driver", runtime::kBuiltinEcho, {i}));
  }
  for (int64_t i = 0; i < 5000; ++i) ASSERT_EQ(futures[i].value().toInt(), i);
  ASSERT_GE(runtime::lane::laneCounters().framesReceived - lanesBefore.framesReceived, 5000u);
  ASSERT_TRUE(finishedWithin10s(*observer, true, runtime::kBuiltinEcho, 5001));
  const auto served = observer->calls(true, runtime::kBuiltinEcho);
  expectFinishedOnce(served, CallStatus::kOk, "driver");
  std::set<EventTime::Clock::time_point> finishTimes;
  for (const auto& call : served) finishTimes.insert(call.finished);
  // A burst this size has turns of several answers each.
  EXPECT_LT(finishTimes.size(), served.size() / 2) << finishTimes.size() << " of " << served.size();
}

TEST(RuntimeObserver, FinishesTheCallsABrokenPipeOrAShutdownFails) {
  auto observer = std::make_shared<RecordingObserver>();
  Cluster cluster(1, observedBy(observer));
  auto& rt = cluster.driver();

  auto dying = rt.rpcAsync("w1", "sleep_ms", {int64_t{30000}});
  ASSERT_TRUE(within10s([&] { return observer->calls(false, "sleep_ms").size() == 1u; }));
  cluster.kill(1);
  ASSERT_TRUE(dying.waitFor(std::chrono::seconds(10)));
  ASSERT_TRUE(dying.hasError());
  auto calls = observer->calls(false, "sleep_ms");
  ASSERT_EQ(calls.size(), 1u);
  expectFinishedOnce(calls, CallStatus::kConnection, "w1");

  cluster.restart(1);
  ASSERT_TRUE(within10s([&] {
    try {
      return rt.rpcSync("w1", "identity", {int64_t{1}}).toInt() == 1;
    } catch (const runtime::RpcError&) {
      return false;  // still starting
    }
  }));
  auto stopped = rt.rpcAsync("w1", "sleep_ms", {int64_t{30001}});
  ASSERT_TRUE(within10s([&] { return observer->calls(false, "sleep_ms").size() == 2u; }));
  rt.shutdown(runtime::ShutdownMode::kImmediate, std::chrono::seconds(5));
  ASSERT_TRUE(stopped.waitFor(std::chrono::seconds(10)));
  ASSERT_TRUE(stopped.hasError());
  calls = observer->calls(false, "sleep_ms");
  ASSERT_EQ(calls.size(), 2u);
  for (const auto& call : calls) EXPECT_EQ(call.finishes, 1);
  EXPECT_EQ(observer->unknownTokens(), 0);
  cluster.kill(1);  // it would wait for the driver's shutdown barrier
}

}  // namespace
}  // namespace rpcjob::testing
