#pragma once
// A single-producer single-consumer ring of framed messages in memory that two
// processes share (a lane's memfd, lane.h), and the doorbell a consumer sleeps on.
//
// Layout: a RingControl (the producer's `head` and the consumer's `tail` on
// cache lines of their own; both count bytes ever written or consumed, so they
// only grow and never wrap in practice) and `capacity` bytes of data, a power
// of two. A frame is a u32 length, the bytes, padding to 8; a frame never
// wraps: where it would not fit before the end, the producer writes a pad
// frame (length kPadFrame) that fills the rest, and the frame starts at 0.
//
// The peer writes the shared counters. Each side keeps its own counter in
// private memory and reads only the other's from the mapping, and every value
// read there is checked (checkIndices, parseFrame): a bad one is an error for
// the caller (who closes the lane), never an out-of-range access or a hang.
// Each side also keeps the last value it read of the other's counter and reads
// the shared one again only when that value says the ring is full (producer)
// or empty (consumer): the other side writes its counter on every frame, so a
// read per frame was a cache line moved between the two cores per frame.
//
// Sleep and wake (Bell): a consumer with nothing to read announces that it
// sleeps (`sleeping`), looks once more, then waits on `seq` (a futex shared
// between processes: no FUTEX_PRIVATE_FLAG). A producer, after publishing a
// frame, loads `sleeping` (one load per frame) and only when it is set bumps
// `seq` and wakes. Both sides fence between their store and their load, so one
// of them sees the other: no frame is left unseen by a sleeping consumer.
//
// Pure logic (checkIndices, parseFrame, placeFrame) is apart from the memory
// it reads, for unit tests. No libtorch, no TensorPipe.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "../futex.h"

namespace rpcjob::runtime::lane {

inline constexpr size_t kCacheLine = 64;

struct RingControl {
  alignas(kCacheLine) std::atomic<uint64_t> head{0};  // the producer's
  alignas(kCacheLine) std::atomic<uint64_t> tail{0};  // the consumer's
};
static_assert(sizeof(RingControl) == 2 * kCacheLine);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

// One per process (its poller's): whoever publishes to a ring the process reads
// rings it after publishing.
struct Bell {
  alignas(kCacheLine) std::atomic<uint32_t> seq{0};
  alignas(kCacheLine) std::atomic<uint32_t> sleeping{0};
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);

// ---- Pure logic

inline constexpr uint32_t kPadFrame = 0xFFFFFFFFu;
inline constexpr uint64_t kLengthBytes = 4;
inline constexpr uint64_t kFrameAlign = 8;
// Bytes a frame of `length` takes in the ring.
constexpr uint64_t frameBytes(uint64_t length) {
  return (kLengthBytes + length + kFrameAlign - 1) & ~(kFrameAlign - 1);
}
// A ring's capacity: a power of two, at least 4 KiB, at most 1 GiB.
bool validCapacity(uint64_t capacity);
// The largest frame a ring of `capacity` takes (a quarter: a frame and the pad
// before it always fit in an empty ring).
constexpr uint64_t maxFrameFor(uint64_t capacity) {
  return capacity / 4 - kLengthBytes;
}

// "" when head - tail can be what a ring of `capacity` holds (tail <= head,
// head - tail <= capacity, both multiples of 8), else why not.
std::string checkIndices(uint64_t head, uint64_t tail, uint64_t capacity);

struct FrameAt {
  enum Kind { kEmpty, kPad, kFrame, kBad } kind = kEmpty;
  uint64_t length = 0;   // kFrame: the frame's bytes
  uint64_t advance = 0;  // kPad, kFrame: what the tail moves by once consumed
  std::string error;     // kBad
};
// The consumer's next frame at `tail`, `lengthWord` being the u32 read there
// (meaningless when head == tail). checkIndices(head, tail) must have passed.
FrameAt parseFrame(uint64_t head, uint64_t tail, uint64_t capacity, uint32_t lengthWord,
                   uint64_t maxFrame);

struct Placement {
  bool fits = false;
  uint64_t pad = 0;  // bytes of a pad frame first (to the end of the ring)
};
// Where the producer puts a frame of `length` with its own `head` and the
// consumer's `tail` (checked before).
Placement placeFrame(uint64_t head, uint64_t tail, uint64_t capacity, uint64_t length);

// ---- Bells (shared between processes)

// The producer's side, after publishing: wakes the bell's sleeper if it sleeps.
inline void ringBell(Bell& bell) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (bell.sleeping.load(std::memory_order_relaxed) != 0) {
    bell.seq.fetch_add(1, std::memory_order_seq_cst);
    futexWake(&bell.seq, FutexScope::kShared);
  }
}
// The consumer's side: announce(), look at the rings once more, then sleep()
// unless something came; sleep() ends the announcement.
inline uint32_t announceSleep(Bell& bell) {
  const uint32_t seq = bell.seq.load(std::memory_order_seq_cst);
  bell.sleeping.store(1, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return seq;
}
inline void sleepOn(Bell& bell, uint32_t seq, std::chrono::microseconds timeout) {
  futexWait(&bell.seq, seq, FutexScope::kShared, timeout);
  bell.sleeping.store(0, std::memory_order_relaxed);
}
inline void cancelSleep(Bell& bell) {
  bell.sleeping.store(0, std::memory_order_relaxed);
}

// ---- The two ends

class RingProducer {
 public:
  enum class Status { kOk, kFull, kTooLarge, kBroken, kClosed };
  RingProducer() = default;
  RingProducer(RingControl* control, char* data, uint64_t capacity);
  uint64_t maxFrame() const { return maxFrame_; }
  // Appends one frame (`size` bytes) if there is room now and publishes it.
  // kBroken: the consumer's tail is impossible (`error` says how); the ring is
  // unusable.
  Status tryWrite(const char* data, size_t size, std::string* error);
  // The same without publishing: the consumer sees the frame, and every one
  // appended before it, at the next publish() (or tryWrite()).
  Status append(const char* data, size_t size, std::string* error);
  // Publishes what was appended: false when there was nothing new.
  bool publish();
  bool unpublished() const { return head_ != published_; }
  // Waits for room: spins for `spin`, then sleeps and retries; gives up with
  // kClosed once `closed` is set (never waits forever).
  Status write(const char* data, size_t size, const std::atomic<bool>& closed,
               std::chrono::microseconds spin, std::string* error);

 private:
  RingControl* control_ = nullptr;
  char* data_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t maxFrame_ = 0;
  uint64_t head_ = 0;       // ours; the shared one is only written
  uint64_t published_ = 0;  // the shared one, as we last wrote it
  uint64_t tail_ = 0;       // the consumer's, as last read (and checked)
};

class RingConsumer {
 public:
  enum class Status { kEmpty, kFrame, kBroken };
  RingConsumer() = default;
  RingConsumer(RingControl* control, const char* data, uint64_t capacity);
  // The next frame (pads skipped), left in the ring until consume(). The
  // bytes lie in shared memory that the peer may change: copy them before
  // parsing. kBroken: the producer's head or a length is impossible.
  Status peek(const char** data, size_t* size, std::string* error);
  void consume();  // the frame peek() returned
  // Whether the producer published anything not consumed (for the sleep check).
  bool hasData() const { return control_->head.load(std::memory_order_acquire) != tail_; }

 private:
  RingControl* control_ = nullptr;
  const char* data_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t maxFrame_ = 0;
  uint64_t tail_ = 0;  // ours
  uint64_t head_ = 0;  // the producer's, as last read (and checked)
  uint64_t peeked_ = 0;
};

}  // namespace rpcjob::runtime::lane
