// Calls between real processes: values of every kind, tensors of every shape,
// errors, timeouts, continuations and the channel report.
#include <ATen/core/ivalue.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "cluster.h"

namespace rpcjob::testing {
namespace {

using runtime::ErrorCode;
using runtime::RpcError;

class RuntimeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { cluster_ = new Cluster(2); }
  static void TearDownTestSuite() {
    std::vector<int> codes = cluster_->shutdown();
    for (int code : codes) EXPECT_EQ(code, 0) << "a worker did not exit cleanly";
    delete cluster_;
  }
  runtime::Runtime& rt() { return cluster_->driver(); }
  c10::IValue echo(const c10::IValue& v) { return rt().rpcSync("w1", "identity", {v}); }
  static Cluster* cluster_;
};
Cluster* RuntimeTest::cluster_ = nullptr;

ErrorCode codeOf(const std::function<void()>& fn, std::string* message = nullptr) {
  try {
    fn();
  } catch (const RpcError& e) {
    if (message) *message = e.what();
    return e.code();
  }
  ADD_FAILURE() << "no RpcError";
  return ErrorCode::kInvalidArgument;
}

TEST_F(RuntimeTest, ScalarsStringsAndNoneRoundTrip) {
  EXPECT_EQ(echo(int64_t{-42}).toInt(), -42);
  EXPECT_DOUBLE_EQ(echo(2.5).toDouble(), 2.5);
  EXPECT_EQ(echo(true).toBool(), true);
  EXPECT_EQ(echo(std::string("héllo")).toStringRef(), "héllo");
  EXPECT_TRUE(echo(c10::IValue()).isNone());
}

TEST_F(RuntimeTest, ContainersRoundTrip) {
  c10::List<int64_t> ints({1, 2, 3});
  EXPECT_EQ(echo(ints).toIntVector(), std::vector<int64_t>({1, 2, 3}));
  c10::Dict<std::string, at::Tensor> dict;
  dict.insert("a", at::ones({2}));
  dict.insert("b", at::zeros({3}));
  auto back = echo(dict).toGenericDict();
  EXPECT_EQ(back.size(), 2u);
  EXPECT_TRUE(at::equal(back.at("b").toTensor(), at::zeros({3})));
  auto tuple = c10::ivalue::Tuple::create(
      {c10::IValue(at::ones({2, 2})), c10::IValue(std::string("x")),
       c10::IValue(c10::List<at::Tensor>({at::ones({1}), at::zeros({1})}))});
  auto t = echo(tuple).toTuple();
  ASSERT_EQ(t->elements().size(), 3u);
  EXPECT_TRUE(at::equal(t->elements()[0].toTensor(), at::ones({2, 2})));
  EXPECT_EQ(t->elements()[1].toStringRef(), "x");
  EXPECT_EQ(t->elements()[2].toTensorList().size(), 2u);
}

TEST_F(RuntimeTest, TensorsOfEveryShapeRoundTrip) {
  at::Tensor big = at::arange(16 * 1024 * 1024, at::kFloat);  // 64 MB
  EXPECT_TRUE(at::equal(echo(big).toTensor(), big));
  at::Tensor transposed = at::arange(12, at::kLong).reshape({3, 4}).t();
  ASSERT_FALSE(transposed.is_contiguous());
  EXPECT_TRUE(at::equal(echo(transposed).toTensor(), transposed));
  at::Tensor empty = at::zeros({0, 5});
  at::Tensor back = echo(empty).toTensor();
  EXPECT_EQ(back.sizes(), empty.sizes());
  at::Tensor slice = at::arange(100, at::kDouble).slice(0, 10, 20);  // a view into a bigger storage
  EXPECT_TRUE(at::equal(echo(slice).toTensor(), slice));
  at::Tensor scalar = at::ones({}, at::kInt);
  EXPECT_TRUE(at::equal(echo(scalar).toTensor(), scalar));
  EXPECT_TRUE(at::equal(rt().rpcSync("w1", "add", {at::ones({3}), at::ones({3})}).toTensor(),
                        at::ones({3}).add(at::ones({3}))));
}

// Payloads up to 32 KiB travel inside the message's metadata, larger ones
// apart; a burst of async calls goes in batches whose payloads stay apart.
// Values on both sides of the limit, alone and in bursts, arrive intact.
TEST_F(RuntimeTest, PayloadsAroundTheInlineLimitRoundTripAloneAndInBursts) {
  for (size_t size :
       {size_t{0}, size_t{100}, size_t{32 * 1024 - 64}, size_t{32 * 1024 + 64}, size_t{1} << 20}) {
    const std::string text(size, 'x');
    EXPECT_EQ(echo(text).toStringRef(), text) << size << " bytes";
  }
  std::vector<runtime::Future> burst;
  for (int64_t i = 0; i < 600; ++i) {
    burst.push_back(rt().rpcAsync("w1", "identity",
                                  {std::string(i % 3 == 0 ? 20000 : 10, 'a') + std::to_string(i)}));
  }
  for (int64_t i = 0; i < 600; ++i) {
    const std::string expected = std::string(i % 3 == 0 ? 20000 : 10, 'a') + std::to_string(i);
    EXPECT_EQ(burst[i].value().toStringRef(), expected);
  }
}

TEST_F(RuntimeTest, RemoteExceptionNamesTheWorkerAndMessage) {
  for (const char* function : {"raise", "raise_inline"}) {  // on the pool, and runInline
    std::string message;
    EXPECT_EQ(codeOf([&] { rt().rpcSync("w1", function, {std::string("bad input")}); }, &message),
              ErrorCode::kRemoteException)
        << function;
    EXPECT_NE(message.find("w1"), std::string::npos) << message;
    EXPECT_NE(message.find("bad input"), std::string::npos) << message;
  }
  EXPECT_EQ(echo(int64_t{5}).toInt(), 5);  // the pipe still serves
}

TEST_F(RuntimeTest, UnknownFunctionIsAClearError) {
  std::string message;
  EXPECT_EQ(codeOf([&] { rt().rpcSync("w1", "no_such_function", {}); }, &message),
            ErrorCode::kUnknownFunction);
  EXPECT_NE(message.find("no_such_function"), std::string::npos) << message;
  EXPECT_EQ(codeOf([&] { rt().rpcSync("nobody", "identity", {}); }), ErrorCode::kInvalidArgument);
}

TEST_F(RuntimeTest, TimeoutFailsTheCallAndLaterCallsWork) {
  runtime::CallOptions options;
  options.timeout = std::chrono::milliseconds(200);
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(codeOf([&] { rt().rpcSync("w2", "sleep_ms", {int64_t{1500}}, options); }),
            ErrorCode::kTimeout);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1200));
  EXPECT_EQ(rt().rpcSync("w2", "identity", {int64_t{7}}).toInt(), 7);
}

// The timeout thread is woken only for a deadline earlier than its planned
// wake-up: a short timeout made while a long one is in flight, and one made
// after a burst of calls that never woke it, still fail as timeouts, and the
// long call still completes.
TEST_F(RuntimeTest, ShortTimeoutsBehindLongOnesStillFire) {
  for (int64_t i = 0; i < 200; ++i) EXPECT_EQ(echo(i).toInt(), i);
  runtime::CallOptions longer{std::chrono::seconds(30)};
  runtime::Future slow = rt().rpcAsync("w2", "sleep_ms", {int64_t{600}}, longer);
  runtime::CallOptions shorter{std::chrono::milliseconds(50)};
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(codeOf([&] { rt().rpcSync("w2", "sleep_ms", {int64_t{1500}}, shorter); }),
            ErrorCode::kTimeout);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1200));
  runtime::CallOptions tick{std::chrono::milliseconds(250)};  // beyond the thread's tick
  EXPECT_EQ(codeOf([&] { rt().rpcSync("w2", "sleep_ms", {int64_t{1500}}, tick); }),
            ErrorCode::kTimeout);
  EXPECT_FALSE(slow.hasError()) << slow.errorMessage();
}

// A deadline far enough ahead puts the call in the lock-free slots
// (worker/src/pending_slots.h), whose deadlines the timeout thread finds by
// scanning: it still fires at its time, not a scan period or more later, and
// with a burst of calls in flight around it.
TEST_F(RuntimeTest, ATimeoutFarAheadFiresOnTime) {
  std::vector<runtime::Future> burst;
  for (int64_t i = 0; i < 2000; ++i) burst.push_back(rt().rpcAsync("w1", "identity", {i}));
  runtime::CallOptions options{std::chrono::milliseconds(700)};
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(codeOf([&] { rt().rpcSync("w2", "sleep_ms", {int64_t{5000}}, options); }),
            ErrorCode::kTimeout);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, std::chrono::milliseconds(690));
  EXPECT_LT(took, std::chrono::milliseconds(1500));
  for (int64_t i = 0; i < 2000; ++i) EXPECT_EQ(burst[i].value().toInt(), i);
}

// The pending-call table under concurrency (worker/src/pending_calls.h): four
// threads keep thousands of calls in flight at once, a third of them with a
// 1 ms timeout that many miss (their answers then arrive for calls already
// gone), a third with no deadline at all. Every call completes exactly as it
// should: its own value, or a timeout for those that had one; none hangs.
TEST_F(RuntimeTest, ConcurrentCallsAndTimeoutsEachCompleteOnce) {
  constexpr int kThreads = 4;
  constexpr int64_t kCalls = 3000;
  std::atomic<int> timedOut{0}, answered{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<runtime::Future> futures;
      std::vector<int> kinds;  // 0: default timeout, 1: 1 ms, 2: none
      for (int64_t i = 0; i < kCalls; ++i) {
        const int kind = static_cast<int>(i % 3);
        runtime::CallOptions options;
        if (kind == 1) options.timeout = std::chrono::milliseconds(1);
        if (kind == 2) options.timeout = std::chrono::milliseconds(-1);
        futures.push_back(rt().rpcAsync("w1", "identity", {int64_t{t * kCalls + i}}, options));
        kinds.push_back(kind);
      }
      for (int64_t i = 0; i < kCalls; ++i) {
        if (!futures[i].waitFor(std::chrono::seconds(60))) {
          ++wrong;  // hung
          continue;
        }
        if (!futures[i].hasError() && futures[i].value().toInt() == t * kCalls + i) {
          ++answered;
        } else if (kinds[i] == 1 && futures[i].hasError() &&
                   codeOf([&] { futures[i].value(); }) == ErrorCode::kTimeout) {
          ++timedOut;
        } else {
          ++wrong;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(answered.load() + timedOut.load(), kThreads * kCalls);
  EXPECT_GE(answered.load(), kThreads * kCalls * 2 / 3);  // all without a 1 ms timeout
  EXPECT_GT(timedOut.load(), 0) << "no call missed 1 ms with 12000 in flight";
  EXPECT_EQ(echo(int64_t{42}).toInt(), 42);  // and the runtime goes on
}

// Each pipe reads its messages into one reused IncomingMessage: a received
// tensor must still belong to its value alone once the call completed, not
// stay referenced there until the pipe's next message (a large one's memory
// would be held, and kept out of the receive cache).
TEST_F(RuntimeTest, AReceivedTensorIsOwnedByItsValueAlone) {
  at::Tensor sent = at::ones({1 << 18});  // 1 MiB: a TensorPipe tensor, not inline
  at::Tensor got = rt().rpcSync("w1", "identity", {sent}).toTensor();
  ASSERT_TRUE(at::equal(got, sent));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (got.use_count() > 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the read thread finishing
  }
  EXPECT_EQ(got.use_count(), 1);
}

TEST_F(RuntimeTest, AsyncCallsThenAndNestedCalls) {
  std::vector<runtime::Future> futures;
  for (int64_t i = 0; i < 1000; ++i) futures.push_back(rt().rpcAsync("w1", "identity", {i}));
  for (int64_t i = 0; i < 1000; ++i) EXPECT_EQ(futures[i].value().toInt(), i);
  auto chained = rt().rpcAsync("w1", "identity", {int64_t{20}}).then([](const runtime::Future& f) {
    return c10::IValue(f.value().toInt() + 1);
  });
  EXPECT_EQ(chained.value().toInt(), 21);
  // w1 calls w2 from inside a function.
  EXPECT_EQ(rt().rpcSync("w1", "call_peer", {std::string("w2"), int64_t{5}}).toInt(), 5);
  EXPECT_EQ(rt().rpcSync("w2", "caller", {}).toStringRef(), "driver");
  EXPECT_EQ(rt().rpcSync("driver", "identity", {int64_t{3}}).toInt(), 3);  // to ourselves
}

TEST_F(RuntimeTest, ReportsTheChannelPerPeerAndDevicePair) {
  auto choices = rt().channelChoices();
  ASSERT_FALSE(choices.empty());
  bool sawW1 = false;
  for (const auto& c : choices) {
    if (c.peer != "w1") continue;
    sawW1 = true;
    EXPECT_EQ(c.localDevice, "cpu:0");
    EXPECT_EQ(c.remoteDevice, "cpu:0");
    EXPECT_FALSE(c.channel.empty());
    EXPECT_EQ(c.transport, "shm");  // same host: shm beats uv
  }
  EXPECT_TRUE(sawW1);
}

}  // namespace
}  // namespace rpcjob::testing
