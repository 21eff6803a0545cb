// The lane's ring (worker/src/lane/ring.h): its pure index and frame logic,
// then a real ring in memory between two threads.
#include "lane/ring.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

namespace rpcjob::runtime::lane {
namespace {

constexpr uint64_t kCap = 4096;

TEST(RingLogic, ChecksIndices) {
  EXPECT_EQ(checkIndices(0, 0, kCap), "");
  EXPECT_EQ(checkIndices(kCap, 0, kCap), "");
  EXPECT_EQ(checkIndices(10 * kCap + 8, 10 * kCap, kCap), "");
  EXPECT_NE(checkIndices(0, 8, kCap).find("behind its tail"), std::string::npos);
  EXPECT_NE(checkIndices(kCap + 8, 0, kCap).find("more than its capacity"), std::string::npos);
  EXPECT_NE(checkIndices(UINT64_MAX, 0, kCap).find("more than its capacity"), std::string::npos);
  EXPECT_NE(checkIndices(12, 0, kCap).find("frame boundary"), std::string::npos);
}

TEST(RingLogic, Capacity) {
  EXPECT_TRUE(validCapacity(4096));
  EXPECT_TRUE(validCapacity(1 << 20));
  EXPECT_FALSE(validCapacity(0));
  EXPECT_FALSE(validCapacity(2048));
  EXPECT_FALSE(validCapacity(4096 + 8));
  EXPECT_FALSE(validCapacity(uint64_t{1} << 31));
  EXPECT_EQ(frameBytes(0), 8u);
  EXPECT_EQ(frameBytes(4), 8u);
  EXPECT_EQ(frameBytes(5), 16u);
}

TEST(RingLogic, ParsesFrames) {
  const uint64_t max = maxFrameFor(kCap);
  EXPECT_EQ(parseFrame(0, 0, kCap, 12345, max).kind, FrameAt::kEmpty);
  FrameAt f = parseFrame(16, 0, kCap, 5, max);
  EXPECT_EQ(f.kind, FrameAt::kFrame);
  EXPECT_EQ(f.length, 5u);
  EXPECT_EQ(f.advance, 16u);
  // A pad fills the rest of the ring, only where something was published past it.
  f = parseFrame(kCap + 8, kCap - 64, kCap, kPadFrame, max);
  EXPECT_EQ(f.kind, FrameAt::kPad);
  EXPECT_EQ(f.advance, 64u);
  EXPECT_EQ(parseFrame(kCap - 32, kCap - 64, kCap, kPadFrame, max).kind, FrameAt::kBad);
  EXPECT_EQ(parseFrame(64, 0, kCap, kPadFrame, max).kind, FrameAt::kBad);  // a pad at 0
  // Lengths the producer could not have written.
  EXPECT_EQ(parseFrame(16, 0, kCap, 13, max).kind, FrameAt::kBad);         // past head
  EXPECT_EQ(parseFrame(kCap, 0, kCap, max + 1, max).kind, FrameAt::kBad);  // over the cap
  EXPECT_EQ(parseFrame(kCap + kCap - 8, kCap - 8, kCap, 100, max).kind,
            FrameAt::kBad);  // crosses the end
  EXPECT_NE(parseFrame(16, 0, kCap, 0xFFFFFFF0u, max).error.find("over the ring's limit"),
            std::string::npos);
}

TEST(RingLogic, PlacesFrames) {
  Placement p = placeFrame(0, 0, kCap, 100);
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.pad, 0u);
  p = placeFrame(kCap - 16, kCap - 16, kCap, 100);  // wraps: pad the last 16 bytes
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.pad, 16u);
  EXPECT_TRUE(placeFrame(kCap - 8, 0, kCap, 4).fits);  // the last 8 bytes: exactly
  EXPECT_FALSE(placeFrame(kCap - 8, 0, kCap, 5).fits);
  EXPECT_FALSE(placeFrame(kCap, 0, kCap, 0).fits);
  // Free space at the start only counts after the pad.
  EXPECT_FALSE(placeFrame(kCap + kCap / 2, kCap - 16, kCap, kCap / 2).fits);
}

// A ring in (private) memory; the same code runs on a shared mapping.
struct TestRing {
  explicit TestRing(uint64_t cap = kCap)
      : data(cap), producer(&control, data.data(), cap), consumer(&control, data.data(), cap) {}
  RingControl control;
  std::vector<char> data;
  RingProducer producer;
  RingConsumer consumer;
  std::string read() {
    const char* p;
    size_t n;
    std::string error;
    auto s = consumer.peek(&p, &n, &error);
    if (s == RingConsumer::Status::kEmpty) return "<empty>";
    if (s == RingConsumer::Status::kBroken) return "<broken: " + error + ">";
    std::string out(p, n);
    consumer.consume();
    return out;
  }
};

TEST(Ring, WrapsAround) {
  TestRing ring;
  std::string error;
  // Frames of 1000 bytes (1008 in the ring): the fifth wraps, after a pad.
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 3; ++i) {
      std::string frame(1000, static_cast<char>('a' + (round + i) % 26));
      ASSERT_EQ(ring.producer.tryWrite(frame.data(), frame.size(), &error),
                RingProducer::Status::kOk)
          << round << " " << i;
    }
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(ring.read(), std::string(1000, static_cast<char>('a' + (round + i) % 26)));
    }
    EXPECT_EQ(ring.read(), "<empty>");
  }
  EXPECT_GT(ring.control.head.load(), 4 * kCap);  // it went round several times
}

TEST(Ring, FullRingPushesBack) {
  TestRing ring;
  std::string error;
  std::string frame(500, 'x');
  int written = 0;
  while (ring.producer.tryWrite(frame.data(), frame.size(), &error) == RingProducer::Status::kOk) {
    ++written;
  }
  EXPECT_EQ(written, static_cast<int>(kCap / frameBytes(500)));
  EXPECT_EQ(ring.producer.tryWrite(frame.data(), frame.size(), &error),
            RingProducer::Status::kFull);
  EXPECT_EQ(ring.read(), frame);  // room for one again
  EXPECT_EQ(ring.producer.tryWrite(frame.data(), frame.size(), &error), RingProducer::Status::kOk);
  std::string huge(maxFrameFor(kCap) + 1, 'y');
  EXPECT_EQ(ring.producer.tryWrite(huge.data(), huge.size(), &error),
            RingProducer::Status::kTooLarge);
}

TEST(Ring, AppendedFramesWaitForPublish) {
  TestRing ring;
  std::string error;
  EXPECT_FALSE(ring.producer.publish());  // nothing to publish
  for (const char* f : {"one", "two", "three"}) {
    ASSERT_EQ(ring.producer.append(f, std::strlen(f), &error), RingProducer::Status::kOk);
  }
  EXPECT_TRUE(ring.producer.unpublished());
  EXPECT_EQ(ring.control.head.load(), 0u);
  EXPECT_EQ(ring.read(), "<empty>");
  EXPECT_TRUE(ring.producer.publish());
  EXPECT_FALSE(ring.producer.unpublished());
  EXPECT_FALSE(ring.producer.publish());  // once
  EXPECT_EQ(ring.read(), "one");
  // A published write publishes what was appended before it, in order.
  ASSERT_EQ(ring.producer.append("four", 4, &error), RingProducer::Status::kOk);
  ASSERT_EQ(ring.producer.tryWrite("five", 4, &error), RingProducer::Status::kOk);
  EXPECT_FALSE(ring.producer.unpublished());
  for (const char* f : {"two", "three", "four", "five"}) EXPECT_EQ(ring.read(), f);
  EXPECT_EQ(ring.read(), "<empty>");
}

TEST(Ring, UnpublishedFramesTakeRoom) {
  TestRing ring;
  std::string error;
  std::string frame(500, 'x');
  int appended = 0;
  while (ring.producer.append(frame.data(), frame.size(), &error) == RingProducer::Status::kOk) {
    ++appended;
  }
  EXPECT_EQ(appended, static_cast<int>(kCap / frameBytes(500)));
  EXPECT_EQ(ring.read(), "<empty>");  // the consumer cannot make room for what it does not see
  EXPECT_TRUE(ring.producer.publish());
  EXPECT_EQ(ring.read(), frame);
  EXPECT_EQ(ring.producer.append(frame.data(), frame.size(), &error), RingProducer::Status::kOk);
}

// Fills `ring` with 1000-byte frames, then with 4-byte ones to its last byte;
// returns the first frame a reader gets.
std::string fillUp(TestRing& ring) {
  std::string error;
  std::string frame(1000, 'z');
  while (ring.producer.tryWrite(frame.data(), frame.size(), &error) == RingProducer::Status::kOk) {
  }
  while (ring.producer.tryWrite("fill", 4, &error) == RingProducer::Status::kOk) {
  }
  return frame;
}

TEST(Ring, ABlockedWriteGoesOnceTheConsumerReads) {
  TestRing ring;
  const std::string frame = fillUp(ring);
  std::atomic<bool> closed{false};
  std::atomic<bool> done{false};
  std::thread writer([&] {
    std::string e;
    EXPECT_EQ(ring.producer.write("late", 4, closed, std::chrono::microseconds(100), &e),
              RingProducer::Status::kOk);
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(done.load());
  EXPECT_EQ(ring.read(), frame);  // room now
  writer.join();
  EXPECT_TRUE(done.load());
}

TEST(Ring, CloseEndsAWaitingProducer) {
  TestRing ring;
  fillUp(ring);
  std::atomic<bool> closed{false};
  RingProducer::Status status = RingProducer::Status::kOk;
  std::thread writer([&] {
    std::string e;
    status = ring.producer.write("late", 4, closed, std::chrono::microseconds(100), &e);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  closed = true;
  writer.join();  // a hang here fails the test by its timeout
  EXPECT_EQ(status, RingProducer::Status::kClosed);
}

TEST(Ring, RandomFramesAcrossThreadsMatchTheReference) {
  TestRing ring(1 << 16);
  constexpr int kFrames = 200000;
  std::vector<std::string> reference;
  std::mt19937 rng(7);
  std::uniform_int_distribution<size_t> size(0, 3000);
  for (int i = 0; i < kFrames; ++i) {
    std::string s(size(rng), '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    reference.push_back(std::move(s));
  }
  std::atomic<bool> closed{false};
  std::thread producer([&] {
    std::string e;
    for (const auto& s : reference) {
      ASSERT_EQ(ring.producer.write(s.data(), s.size(), closed, std::chrono::microseconds(50), &e),
                RingProducer::Status::kOk);
    }
  });
  int got = 0;
  while (got < kFrames) {
    const char* p;
    size_t n;
    std::string e;
    auto s = ring.consumer.peek(&p, &n, &e);
    ASSERT_NE(s, RingConsumer::Status::kBroken) << e;
    if (s == RingConsumer::Status::kEmpty) continue;
    ASSERT_EQ(std::string(p, n), reference[got]) << got;
    ring.consumer.consume();
    ++got;
  }
  producer.join();
  EXPECT_EQ(ring.read(), "<empty>");
}

TEST(Ring, SleepingConsumerIsWoken) {
  TestRing ring;
  Bell bell;
  std::atomic<int> received{0};
  std::atomic<int> sleeps{0};
  std::atomic<bool> stop{false};
  std::thread consumer([&] {
    while (!stop) {
      const char* p;
      size_t n;
      if (ring.consumer.peek(&p, &n, nullptr) == RingConsumer::Status::kFrame) {
        ring.consumer.consume();
        received++;
        continue;
      }
      const uint32_t seq = announceSleep(bell);
      if (ring.consumer.hasData() || stop) {
        cancelSleep(bell);
        continue;
      }
      sleeps++;
      sleepOn(bell, seq, std::chrono::seconds(30));  // only a ring ends this in time
    }
  });
  for (int i = 1; i <= 50; ++i) {
    while (bell.sleeping.load() == 0) std::this_thread::yield();  // it sleeps now
    ASSERT_EQ(ring.producer.tryWrite("ping", 4, nullptr), RingProducer::Status::kOk);
    ringBell(bell);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (received.load() < i && std::chrono::steady_clock::now() < until) {
      std::this_thread::yield();
    }
    ASSERT_EQ(received.load(), i) << "the sleeping consumer was not woken";
  }
  EXPECT_GE(sleeps.load(), 50);
  stop = true;
  bell.seq.fetch_add(1);
  futexWake(&bell.seq, FutexScope::kShared);
  consumer.join();
}

TEST(Ring, HostileHeadIsAClearError) {
  struct Case {
    const char* what;
    std::function<void(TestRing&)> spoil;
    const char* error;
  };
  const std::vector<Case> cases = {
      {"head far ahead", [](TestRing& r) { r.control.head = 10 * kCap; }, "more than its capacity"},
      {"head behind", [](TestRing& r) { r.control.head = 0; }, "behind its tail"},
      {"head unaligned", [](TestRing& r) { r.control.head = r.control.head + 3; },
       "frame boundary"},
      {"length past head",
       [](TestRing& r) {
         uint32_t len = 200;
         std::memcpy(r.data.data() + (r.control.tail & (kCap - 1)), &len, 4);
       },
       "bytes published"},
      {"length over the cap",
       [](TestRing& r) {
         uint32_t len = 0x7FFFFFFF;
         std::memcpy(r.data.data() + (r.control.tail & (kCap - 1)), &len, 4);
       },
       "over the ring's limit"},
      {"stray pad",
       [](TestRing& r) {
         uint32_t len = kPadFrame;
         std::memcpy(r.data.data() + (r.control.tail & (kCap - 1)), &len, 4);
       },
       "pad frame"},
  };
  for (const auto& c : cases) {
    auto ring = std::make_unique<TestRing>();
    ASSERT_EQ(ring->producer.tryWrite("one", 3, nullptr), RingProducer::Status::kOk);
    EXPECT_EQ(ring->read(), "one");
    ASSERT_EQ(ring->producer.tryWrite("two", 3, nullptr), RingProducer::Status::kOk);
    c.spoil(*ring);
    const std::string got = ring->read();
    EXPECT_NE(got.find("<broken: producer: "), std::string::npos) << c.what << ": " << got;
    EXPECT_NE(got.find(c.error), std::string::npos) << c.what << ": " << got;
  }
}

// The producer reads the consumer's tail again only when its last reading
// leaves no room for a frame, and checks every value it reads then.
TEST(Ring, HostileTailIsAClearError) {
  TestRing ring;
  std::string error;
  fillUp(ring);
  const uint64_t head = ring.control.head;
  ring.control.tail = head + 64;  // past what was written
  EXPECT_EQ(ring.producer.tryWrite("two", 3, &error), RingProducer::Status::kBroken);
  EXPECT_NE(error.find("consumer: "), std::string::npos) << error;
  ring.control.tail = frameBytes(1000);  // as if the first frame were read
  ring.control.head = 0;                 // the shared head is only written, never trusted
  EXPECT_EQ(ring.producer.tryWrite("two", 3, &error), RingProducer::Status::kOk);
  while (ring.producer.tryWrite("fill", 4, &error) == RingProducer::Status::kOk) {
  }
  std::atomic<bool> closed{false};
  ring.control.tail = UINT64_MAX - 7;
  EXPECT_EQ(ring.producer.write("x", 1, closed, std::chrono::microseconds(10), &error),
            RingProducer::Status::kBroken);  // no wait on an impossible tail
}

}  // namespace
}  // namespace rpcjob::runtime::lane
