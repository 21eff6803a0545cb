// The lane's poller (worker/src/lane/poller.h): how long it spins after its last
// frame before it sleeps. With frames coming every few hundred microseconds it
// keeps spinning for the runtime's adaptive budget (here RPCJOB_SPIN_US=20000,
// set before anything reads it), not the lane's own 100 us; fixed, it sleeps
// after its own spin. A real poller thread and a real lane in this process.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "lane/lane.h"
#include "lane/poller.h"

namespace rpcjob::runtime::lane {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Read once, by the first budget asked for: set when this binary loads.
const bool kSpinSet = setenv("RPCJOB_SPIN_US", "20000", 1) == 0;

// The spin rule alone.
TEST(LanePollerSpin, TheAdaptiveBudgetOnlyEverLengthensTheLanesOwnSpinUnlessFixed) {
  EXPECT_EQ(spinAfterLastFrame(100us, false, 1000us), 1000us);
  EXPECT_EQ(spinAfterLastFrame(100us, false, 50us), 100us);
  EXPECT_EQ(spinAfterLastFrame(100us, true, 1000us), 100us);
  EXPECT_EQ(spinAfterLastFrame(0us, true, 1000us), 0us);
}

// A poller reading the server's end of one lane; its bell mapped here too, to
// see when it says it sleeps.
struct PolledLane {
  explicit PolledLane(bool fixed) {
    std::string error;
    poller = std::make_unique<Poller>(100us, error, fixed);
    EXPECT_GE(poller->bellFd(), 0) << error;
    client = Lane::create(4096, error);
    EXPECT_TRUE(client) << error;
    server = Lane::open(client->offer(), error);
    EXPECT_TRUE(server) << error;
    bellFile =
        SharedFile::openPeer(::getpid(), static_cast<int>(poller->bellFd()),
                             bellName(poller->bellToken()), 4096, "the poller's bell", error);
    EXPECT_TRUE(bellFile) << error;
    client->setPeerBell(SharedFile::openPeer(::getpid(), static_cast<int>(poller->bellFd()),
                                             bellName(poller->bellToken()), 4096,
                                             "the poller's bell", error));
    server->setReceiver(
        [this](const char*, size_t, std::string&) {
          ++delivered;
          return Delivery::kDelivered;
        },
        [](const std::string& why) { ADD_FAILURE() << why; });
    poller->add(server);
  }
  ~PolledLane() { poller->stop(); }
  bool sleeping() const {
    return reinterpret_cast<const Bell*>(bellFile->base())->sleeping.load() != 0;
  }
  void send(int n) {
    std::string error;
    const std::string frame = "frame";
    ASSERT_EQ(client->send(frame.data(), frame.size(), &error, Lane::Publish::kNow),
              RingProducer::Status::kOk)
        << error;
    const auto until = Clock::now() + 5s;
    while (delivered.load() < n && Clock::now() < until) std::this_thread::yield();
    ASSERT_EQ(delivered.load(), n);
  }
  // Frames every 300 us, then how long after the last one the poller still spun
  // (it says so on its bell when it goes to sleep).
  Clock::duration spunAfterFrames() {
    for (int i = 1; i <= 6; ++i) {
      send(i);
      std::this_thread::sleep_for(300us);
    }
    send(7);
    const auto last = Clock::now();
    while (!sleeping() && Clock::now() - last < 2s) std::this_thread::sleep_for(50us);
    return Clock::now() - last;
  }

  std::unique_ptr<Poller> poller;
  std::shared_ptr<Lane> client, server;
  std::unique_ptr<SharedFile> bellFile;
  std::atomic<int> delivered{0};
};

TEST(LanePollerSpin, FramesThatKeepComingKeepThePollerSpinningForTheAdaptiveBudget) {
  ASSERT_TRUE(kSpinSet);
  ASSERT_EQ(spinBudget(), 20ms);
  PolledLane lane(/*fixed=*/false);
  const auto spun = lane.spunAfterFrames();
  // 20 ms of budget: awake far past the lane's own 100 us, asleep within 2 s.
  EXPECT_GT(spun, 10ms);
  EXPECT_TRUE(lane.sleeping());
}

TEST(LanePollerSpin, AFixedSpinSleepsAfterItsOwnSpin) {
  PolledLane lane(/*fixed=*/true);
  const auto spun = lane.spunAfterFrames();
  EXPECT_LT(spun, 10ms) << "a fixed 100 us spin";
  EXPECT_TRUE(lane.sleeping());
}

}  // namespace
}  // namespace rpcjob::runtime::lane
