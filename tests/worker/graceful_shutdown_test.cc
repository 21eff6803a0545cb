// A graceful shutdown loses no tensor already sent. A copy channel (rpcjob_cma,
// cma) completes a send only when the receiver's acknowledgement arrives, on a
// connection of its own, so a call's answer can overtake it. Seen in CI: a
// sender whose calls were all answered shut down and closed its channels with
// the last acknowledgement still on its way; that send failed, and its metrics
// file counted 19 of the 20 transfers.
//
// Here a channel decorator on the driver holds every completed send back for a
// while, as a late acknowledgement would, and fails those still held when its
// context closes, as a copy channel does.
#include <ATen/core/ivalue.h>
#include <ATen/ops/ones.h>
#include <gtest/gtest.h>
#include <tensorpipe/channel/channel.h>
#include <tensorpipe/channel/context.h>
#include <tensorpipe/tensorpipe.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "cluster.h"

namespace rpcjob::testing {
namespace {

using Clock = std::chrono::steady_clock;

class ClosedBeforeAck final : public tensorpipe::BaseError {
 public:
  std::string what() const override { return "late_ack: closed before the acknowledgement"; }
};

// The sends' completions, each released `delay` after the inner channel's.
// The thread works on a State it shares: a completion it runs may drop the
// last reference to this object (through TensorPipe's pipe and our channel),
// and the destructor then runs on that very thread (seen: it joined itself,
// and the whole test binary ended in std::terminate).
class LateAcks {
 public:
  explicit LateAcks(std::chrono::milliseconds delay)
      : state_(std::make_shared<State>(delay)), thread_([state = state_] { loop(*state); }) {}
  ~LateAcks() {
    close();
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();  // it ends by itself: closed, on the state it holds
    } else {
      thread_.join();
    }
  }

  void hold(tensorpipe::channel::TSendCallback callback) {
    std::unique_lock<std::mutex> lock(state_->mu);
    if (state_->closed) {
      lock.unlock();
      fail(*state_, std::move(callback));
      return;
    }
    state_->held.push_back({Clock::now() + state_->delay, std::move(callback)});
    state_->changed.notify_all();
  }

  // As a copy channel's close: whatever still waits for its ack fails.
  void close() {
    std::deque<Held> failed;
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->closed = true;
      failed.swap(state_->held);
      state_->changed.notify_all();
    }
    for (auto& h : failed) fail(*state_, std::move(h.callback));
  }

  int succeeded() const { return state_->succeeded.load(); }
  int failed() const { return state_->failed.load(); }

 private:
  struct Held {
    Clock::time_point due;
    tensorpipe::channel::TSendCallback callback;
  };
  struct State {
    explicit State(std::chrono::milliseconds d) : delay(d) {}
    const std::chrono::milliseconds delay;
    std::mutex mu;
    std::condition_variable changed;
    std::deque<Held> held;
    bool closed = false;
    std::atomic<int> succeeded{0}, failed{0};
  };

  static void fail(State& state, tensorpipe::channel::TSendCallback callback) {
    state.failed++;
    callback(tensorpipe::Error(std::make_shared<ClosedBeforeAck>(), __FILE__, __LINE__));
  }

  static void loop(State& state) {
    std::unique_lock<std::mutex> lock(state.mu);
    while (!state.closed) {
      if (state.held.empty()) {
        state.changed.wait(lock);
        continue;
      }
      if (Clock::now() < state.held.front().due) {
        state.changed.wait_until(lock, state.held.front().due);
        continue;
      }
      Held h = std::move(state.held.front());
      state.held.pop_front();
      lock.unlock();
      state.succeeded++;
      h.callback(tensorpipe::Error::kSuccess);
      h.callback = nullptr;  // what it held goes now, without our lock
      lock.lock();
    }
  }

  std::shared_ptr<State> state_;
  std::thread thread_;  // last: starts once the state is built
};

class LateAckChannel final : public tensorpipe::channel::Channel {
 public:
  LateAckChannel(std::shared_ptr<tensorpipe::channel::Channel> inner,
                 std::shared_ptr<LateAcks> acks)
      : inner_(std::move(inner)), acks_(std::move(acks)) {}
  void send(tensorpipe::Buffer buffer, size_t length,
            tensorpipe::channel::TSendCallback callback) override {
    inner_->send(std::move(buffer), length,
                 [acks = acks_, callback = std::move(callback)](const tensorpipe::Error& error) {
                   if (error) {
                     callback(error);
                   } else {
                     acks->hold(callback);
                   }
                 });
  }
  void recv(tensorpipe::Buffer buffer, size_t length,
            tensorpipe::channel::TRecvCallback callback) override {
    inner_->recv(std::move(buffer), length, std::move(callback));
  }
  void setId(std::string id) override { inner_->setId(std::move(id)); }
  void close() override { inner_->close(); }

 private:
  std::shared_ptr<tensorpipe::channel::Channel> inner_;
  std::shared_ptr<LateAcks> acks_;
};

class LateAckContext final : public tensorpipe::channel::Context {
 public:
  LateAckContext(std::shared_ptr<tensorpipe::channel::Context> inner,
                 std::shared_ptr<LateAcks> acks)
      : inner_(std::move(inner)), acks_(std::move(acks)) {}
  bool isViable() const override { return inner_->isViable(); }
  size_t numConnectionsNeeded() const override { return inner_->numConnectionsNeeded(); }
  const std::unordered_map<tensorpipe::Device, std::string>& deviceDescriptors() const override {
    return inner_->deviceDescriptors();
  }
  bool canCommunicateWithRemote(const std::string& local,
                                const std::string& remote) const override {
    return inner_->canCommunicateWithRemote(local, remote);
  }
  std::shared_ptr<tensorpipe::channel::Channel> createChannel(
      std::vector<std::shared_ptr<tensorpipe::transport::Connection>> connections,
      tensorpipe::channel::Endpoint endpoint) override {
    return std::make_shared<LateAckChannel>(inner_->createChannel(std::move(connections), endpoint),
                                            acks_);
  }
  void setId(std::string id) override { inner_->setId(std::move(id)); }
  void close() override {
    acks_->close();
    inner_->close();
  }
  void join() override { inner_->join(); }

 private:
  std::shared_ptr<tensorpipe::channel::Context> inner_;
  std::shared_ptr<LateAcks> acks_;
};

TEST(GracefulShutdown, WaitsForSendsWhoseAcknowledgementIsLate) {
  constexpr int kCalls = 3;
  constexpr int64_t kBytes = 256 * 1024;  // above the inline limit: by channel
  auto acks = std::make_shared<LateAcks>(std::chrono::milliseconds(300));
  runtime::RuntimeOptions options;
  options.channels = {"basic"};
  options.hooks.wrapChannel = [acks](const std::string&,
                                     std::shared_ptr<tensorpipe::channel::Context> inner) {
    return std::make_shared<LateAckContext>(std::move(inner), acks);
  };
  Cluster cluster(1, options);
  for (int i = 0; i < kCalls; ++i) {
    at::Tensor t = at::ones({kBytes}, at::kByte);
    // "ignore" answers None: nothing comes back by channel.
    EXPECT_TRUE(cluster.driver().rpcSync("w1", "ignore", {t}).isNone());
  }
  // Every call is answered; the last send at least still waits for its "ack"
  // (a pipe's writes go one after another, so the earlier ones may be done).
  EXPECT_LT(acks->succeeded(), kCalls);
  EXPECT_EQ(acks->failed(), 0);
  const auto start = Clock::now();
  const std::vector<int> codes = cluster.shutdown(std::chrono::seconds(20));
  for (int code : codes) EXPECT_EQ(code, 0);
  EXPECT_EQ(acks->failed(), 0) << "sends failed by the shutdown's close";
  EXPECT_EQ(acks->succeeded(), kCalls);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

}  // namespace
}  // namespace rpcjob::testing
