// Held frames on a lane (worker/src/lane/lane.h): answers sent during a turn of
// the lane's poll() wait for its end, a batch sent with Publish::kHeld for
// publishHeld(); either way the consumer sees all of them at once, the peer's
// bell is rung once, and a full ring or a waiting thread publishes early. Two
// real lanes over one memfd in this process; no poller thread, no runtime.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "lane/lane.h"

namespace rpcjob::runtime::lane {
namespace {

// A client lane and the server's end of it, each with a bell of its own that
// says it sleeps, so that every ring of it shows in its seq.
struct LanePair {
  LanePair() {
    std::string error;
    client = Lane::create(kCapacity, error);
    EXPECT_TRUE(client) << error;
    LaneOffer offer = client->offer();
    server = Lane::open(offer, error);
    EXPECT_TRUE(server) << error;
    clientBellFile = SharedFile::create(bellName(clientToken), 4096, error);
    serverBellFile = SharedFile::create(bellName(serverToken), 4096, error);
    EXPECT_TRUE(clientBellFile && serverBellFile) << error;
    clientBell()->sleeping.store(1);
    serverBell()->sleeping.store(1);
    server->setPeerBell(openBell(*clientBellFile, clientToken));
    client->setPeerBell(openBell(*serverBellFile, serverToken));
  }
  static std::unique_ptr<SharedFile> openBell(const SharedFile& bell, uint64_t token) {
    std::string error;
    auto file =
        SharedFile::openPeer(::getpid(), bell.fd(), bellName(token), 4096, "a test bell", error);
    EXPECT_TRUE(file) << error;
    return file;
  }
  Bell* clientBell() const { return reinterpret_cast<Bell*>(clientBellFile->base()); }
  Bell* serverBell() const { return reinterpret_cast<Bell*>(serverBellFile->base()); }

  static constexpr uint64_t kCapacity = 4096;
  const uint64_t clientToken = randomToken(), serverToken = randomToken();
  std::shared_ptr<Lane> client, server;
  std::unique_ptr<SharedFile> clientBellFile, serverBellFile;
};

// Every frame `lane` has for us, as strings.
std::vector<std::string> drain(Lane& lane) {
  std::vector<std::string> got;
  lane.setReceiver(
      [&](const char* data, size_t size, std::string&) {
        got.emplace_back(data, size);
        return Delivery::kDelivered;
      },
      [](const std::string& why) { ADD_FAILURE() << why; });
  lane.poll(1000);
  return got;
}

void send(Lane& lane, const std::string& frame, Lane::Publish publish = Lane::Publish::kNow) {
  std::string error;
  ASSERT_EQ(lane.send(frame.data(), frame.size(), &error, publish), RingProducer::Status::kOk)
      << error;
}

TEST(LaneHeld, ATurnsAnswersArePublishedAtItsEnd) {
  LanePair p;
  for (const char* request : {"a", "b", "c"}) send(*p.client, request);
  int publishes = 0;
  p.server->setPublisher([&] {
    ++publishes;
    p.server->publishHeld();
  });
  const uint32_t bellBefore = p.clientBell()->seq.load();
  int seen = 0;
  p.server->setReceiver(
      [&](const char* data, size_t size, std::string&) {
        // The answers so far are in the ring but not published.
        EXPECT_FALSE(p.client->hasData()) << "frame " << seen;
        send(*p.server, "re:" + std::string(data, size));
        ++seen;
        return Delivery::kDelivered;
      },
      [](const std::string& why) { ADD_FAILURE() << why; });
  EXPECT_EQ(p.server->poll(64), 3);
  EXPECT_EQ(publishes, 1);
  EXPECT_EQ(p.clientBell()->seq.load(), bellBefore + 1);  // rung once for three
  EXPECT_EQ(drain(*p.client), (std::vector<std::string>{"re:a", "re:b", "re:c"}));

  // A turn that sends nothing publishes nothing.
  send(*p.client, "d");
  p.server->setReceiver([](const char*, size_t, std::string&) { return Delivery::kDelivered; },
                        [](const std::string&) {});
  EXPECT_EQ(p.server->poll(64), 1);
  EXPECT_EQ(publishes, 1);
}

TEST(LaneHeld, OutsideATurnAFrameGoesAtOnce) {
  LanePair p;
  const uint32_t bellBefore = p.serverBell()->seq.load();
  send(*p.client, "now");
  EXPECT_TRUE(p.server->hasData());
  EXPECT_EQ(p.serverBell()->seq.load(), bellBefore + 1);
  // The turn is the polled lane's: an answer on another lane is not held.
  LanePair other;
  send(*p.client, "x");
  p.server->setReceiver(
      [&](const char*, size_t, std::string&) {
        send(*other.client, "elsewhere");
        EXPECT_TRUE(other.server->hasData());
        return Delivery::kDelivered;
      },
      [](const std::string& why) { ADD_FAILURE() << why; });
  EXPECT_EQ(p.server->poll(64), 2);
}

TEST(LaneHeld, AWaitingThreadPublishesItsTurnEarly) {
  LanePair p;
  send(*p.client, "q1");
  send(*p.client, "q2");
  p.server->setPublisher([&] { p.server->publishHeld(); });
  int seen = 0;
  p.server->setReceiver(
      [&](const char*, size_t, std::string&) {
        send(*p.server, "answer");
        if (seen++ == 0) {
          EXPECT_FALSE(p.client->hasData());
          publishTurn();  // what a future's wait does on the poller's thread
          EXPECT_TRUE(p.client->hasData());
        }
        return Delivery::kDelivered;
      },
      [](const std::string& why) { ADD_FAILURE() << why; });
  EXPECT_EQ(p.server->poll(64), 2);
  EXPECT_EQ(drain(*p.client), (std::vector<std::string>{"answer", "answer"}));
  publishTurn();  // outside a turn: nothing to do
}

TEST(LaneHeld, ASlowTurnPublishesWhatWaitedTooLong) {
  LanePair p;
  for (const char* request : {"slow", "next"}) send(*p.client, request);
  int publishes = 0;
  p.server->setPublisher([&] {
    ++publishes;
    p.server->publishHeld();
  });
  int seen = 0;
  p.server->setReceiver(
      [&](const char*, size_t, std::string&) {
        if (seen++ == 0) {
          send(*p.server, "first");
          // An inline function that runs long: the answer before it must not
          // wait for the whole turn.
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
        } else {
          EXPECT_TRUE(p.client->hasData()) << "the first answer still held";
        }
        return Delivery::kDelivered;
      },
      [](const std::string& why) { ADD_FAILURE() << why; });
  EXPECT_EQ(p.server->poll(64), 2);
  EXPECT_EQ(publishes, 1);
  EXPECT_EQ(drain(*p.client), (std::vector<std::string>{"first"}));
}

TEST(LaneHeld, ABatchIsPublishedOnceAndAFullRingPublishesFirst) {
  LanePair p;
  const uint32_t bellBefore = p.serverBell()->seq.load();
  send(*p.client, "b1", Lane::Publish::kHeld);
  send(*p.client, "b2", Lane::Publish::kHeld);
  EXPECT_FALSE(p.server->hasData());
  EXPECT_EQ(p.serverBell()->seq.load(), bellBefore);
  p.client->publishHeld();
  EXPECT_EQ(p.serverBell()->seq.load(), bellBefore + 1);
  p.client->publishHeld();  // nothing held: no ring
  EXPECT_EQ(p.serverBell()->seq.load(), bellBefore + 1);
  EXPECT_EQ(drain(*p.server), (std::vector<std::string>{"b1", "b2"}));

  // Held frames fill the ring: the next send publishes them, so that the
  // consumer can make room, and then reports the ring full.
  const std::string frame(500, 'z');
  std::string error;
  int held = 0;
  RingProducer::Status s;
  while ((s = p.client->send(frame.data(), frame.size(), &error, Lane::Publish::kHeld)) ==
         RingProducer::Status::kOk) {
    ++held;
  }
  EXPECT_EQ(s, RingProducer::Status::kFull);
  EXPECT_GT(held, 4);
  EXPECT_TRUE(p.server->hasData());
  EXPECT_EQ(static_cast<int>(drain(*p.server).size()), held);
}

}  // namespace
}  // namespace rpcjob::runtime::lane
