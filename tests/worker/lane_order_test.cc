// lane::Order (worker/src/lane/order.h): the receiving side's FIFO across a
// pipe and its lane, with a thread standing in for the lane's poller.
#include "lane/order.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace rpcjob::runtime::lane {
namespace {

using Clock = std::chrono::steady_clock;

// A poller that looks at one frame (its order: `before`) each time it is rung,
// as the lane's poller does with the frame it left blocked.
class FakePoller {
 public:
  FakePoller(Order& order, uint64_t before) : order_(order), before_(before) {
    order_.setWake([this] {
      std::lock_guard<std::mutex> lock(mu_);
      rung_ = true;
      cv_.notify_one();
    });
    thread_ = std::thread([this] { run(); });
  }
  ~FakePoller() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      cv_.notify_one();
    }
    thread_.join();
  }
  Delivery last() const { return last_.load(); }
  int looks() const { return looks_.load(); }
  std::string error() {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }

 private:
  void run() {
    look();
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_ && last_.load() == Delivery::kBlocked) {
      cv_.wait(lock, [&] { return rung_ || stop_; });
      rung_ = false;
      lock.unlock();
      look();
      lock.lock();
    }
  }
  void look() {
    std::string error;
    const Delivery d = order_.mayDeliver(before_, error);
    if (d == Delivery::kDelivered) order_.laneDispatched();
    if (d == Delivery::kFailed) {
      order_.fail();  // as the lane's receiver does
      std::lock_guard<std::mutex> lock(mu_);
      error_ = error;
    }
    last_.store(d);
    looks_++;
  }

  Order& order_;
  const uint64_t before_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool rung_ = false;
  bool stop_ = false;
  std::string error_;
  std::atomic<Delivery> last_{Delivery::kBlocked};
  std::atomic<int> looks_{0};
  std::thread thread_;
};

template <typename Pred>
bool eventually(Pred pred) {
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (!pred()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(LaneOrder, AFrameWaitsForThePipeMessagesBeforeIt) {
  Order order;
  FakePoller poller(order, 1);  // follows one pipe message
  ASSERT_TRUE(eventually([&] { return poller.looks() == 1; }));
  ASSERT_EQ(poller.last(), Delivery::kBlocked);
  std::string error;
  ASSERT_TRUE(order.awaitLane(0, error)) << error;  // the pipe message follows no frame
  order.pipeDispatched();                           // rings the poller
  ASSERT_TRUE(eventually([&] { return poller.last() == Delivery::kDelivered; }));
  EXPECT_TRUE(order.awaitLane(1, error)) << error;
}

TEST(LaneOrder, APipeMessageWaitsForTheFramesBeforeIt) {
  Order order;
  std::atomic<bool> dispatched{false};
  std::thread reader([&] {
    std::string error;
    dispatched = order.awaitLane(2, error);
  });
  std::string error;
  EXPECT_EQ(order.mayDeliver(0, error), Delivery::kDelivered);
  order.laneDispatched();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(dispatched.load());
  EXPECT_EQ(order.mayDeliver(0, error), Delivery::kDelivered);
  order.laneDispatched();
  reader.join();
  EXPECT_TRUE(dispatched.load());
}

// A frame that says it follows the pipe message which says it follows that
// frame (a sender that broke its order, or a hostile one): the lane fails at
// once, also when the frame was blocked before the pipe's reader began to wait
// (before the fix, the reader gave up only after kAwaitLimit, 5 s).
TEST(LaneOrder, AContradictionFailsAtOnceWhicheverCameFirst) {
  Order order;
  FakePoller poller(order, 1);
  ASSERT_TRUE(eventually([&] { return poller.looks() == 1; }));
  ASSERT_EQ(poller.last(), Delivery::kBlocked);
  const auto start = Clock::now();
  std::string error;
  EXPECT_FALSE(order.awaitLane(1, error));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(1));
  EXPECT_EQ(error, "the pipe's shared-memory lane failed");
  EXPECT_EQ(poller.last(), Delivery::kFailed);
  EXPECT_NE(poller.error().find("follows 1 pipe messages while the pipe waits"), std::string::npos)
      << poller.error();
}

TEST(LaneOrder, AFailedOrderEndsTheWait) {
  Order order;
  std::thread failer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    order.fail();
  });
  std::string error;
  EXPECT_FALSE(order.awaitLane(3, error));
  EXPECT_EQ(error, "the pipe's shared-memory lane failed");
  failer.join();
}

}  // namespace
}  // namespace rpcjob::runtime::lane
