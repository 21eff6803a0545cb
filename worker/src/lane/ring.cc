#include "ring.h"

#include <sched.h>

#include <cstring>
#include <thread>

namespace rpcjob::runtime::lane {

bool validCapacity(uint64_t capacity) {
  return capacity >= 4096 && capacity <= (uint64_t{1} << 30) && (capacity & (capacity - 1)) == 0;
}

std::string checkIndices(uint64_t head, uint64_t tail, uint64_t capacity) {
  if (head < tail) {
    return "the ring's head " + std::to_string(head) + " is behind its tail " +
           std::to_string(tail);
  }
  if (head - tail > capacity) {
    return "the ring holds " + std::to_string(head - tail) + " bytes, more than its capacity " +
           std::to_string(capacity);
  }
  if (head % kFrameAlign != 0 || tail % kFrameAlign != 0) {
    return "the ring's head " + std::to_string(head) + " or tail " + std::to_string(tail) +
           " is not at a frame boundary";
  }
  return "";
}

FrameAt parseFrame(uint64_t head, uint64_t tail, uint64_t capacity, uint32_t lengthWord,
                   uint64_t maxFrame) {
  FrameAt at;
  const uint64_t available = head - tail;
  if (available == 0) return at;
  const uint64_t pos = tail & (capacity - 1);
  if (lengthWord == kPadFrame) {
    at.kind = FrameAt::kPad;
    at.advance = capacity - pos;
    if (pos == 0 || at.advance > available) {
      at.kind = FrameAt::kBad;
      at.error = "a pad frame at " + std::to_string(pos) + " of " + std::to_string(available) +
                 " published bytes";
    }
    return at;
  }
  at.length = lengthWord;
  at.advance = frameBytes(lengthWord);
  if (lengthWord > maxFrame) {
    at.kind = FrameAt::kBad;
    at.error = "a frame of " + std::to_string(lengthWord) + " bytes, over the ring's limit of " +
               std::to_string(maxFrame);
  } else if (at.advance > available) {
    at.kind = FrameAt::kBad;
    at.error = "a frame of " + std::to_string(lengthWord) + " bytes with " +
               std::to_string(available) + " bytes published";
  } else if (pos + at.advance > capacity) {
    at.kind = FrameAt::kBad;
    at.error = "a frame of " + std::to_string(lengthWord) + " bytes at " + std::to_string(pos) +
               " crosses the ring's end";
  } else {
    at.kind = FrameAt::kFrame;
  }
  return at;
}

Placement placeFrame(uint64_t head, uint64_t tail, uint64_t capacity, uint64_t length) {
  Placement p;
  const uint64_t free = capacity - (head - tail);
  const uint64_t need = frameBytes(length);
  const uint64_t toEnd = capacity - (head & (capacity - 1));
  if (need > toEnd) p.pad = toEnd;
  p.fits = p.pad + need <= free;
  return p;
}

RingProducer::RingProducer(RingControl* control, char* data, uint64_t capacity)
    : control_(control),
      data_(data),
      capacity_(capacity),
      maxFrame_(maxFrameFor(capacity)),
      head_(0),
      published_(0),
      tail_(0) {}  // a fresh ring; the shared values are the peer's to spoil

RingProducer::Status RingProducer::tryWrite(const char* data, size_t size, std::string* error) {
  const Status s = append(data, size, error);
  if (s == Status::kOk) publish();
  return s;
}

RingProducer::Status RingProducer::append(const char* data, size_t size, std::string* error) {
  if (size > maxFrame_) return Status::kTooLarge;
  Placement p = placeFrame(head_, tail_, capacity_, size);
  if (!p.fits) {
    const uint64_t tail = control_->tail.load(std::memory_order_acquire);
    std::string bad = checkIndices(head_, tail, capacity_);
    if (!bad.empty()) {
      if (error != nullptr) *error = "consumer: " + bad;
      return Status::kBroken;
    }
    tail_ = tail;
    p = placeFrame(head_, tail_, capacity_, size);
    if (!p.fits) return Status::kFull;
  }
  if (p.pad != 0) {
    const uint32_t pad = kPadFrame;
    std::memcpy(data_ + (head_ & (capacity_ - 1)), &pad, sizeof(pad));
    head_ += p.pad;
  }
  char* at = data_ + (head_ & (capacity_ - 1));
  const uint32_t length = static_cast<uint32_t>(size);
  std::memcpy(at, &length, sizeof(length));
  std::memcpy(at + kLengthBytes, data, size);
  head_ += frameBytes(size);
  // The next frame's first lines were last read by the consumer's core: ask
  // for them now, so that taking them over overlaps with the caller's work
  // until the next send instead of stalling its copy.
  __builtin_prefetch(data_ + (head_ & (capacity_ - 1)), 1);
  __builtin_prefetch(data_ + ((head_ + kCacheLine) & (capacity_ - 1)), 1);
  return Status::kOk;
}

bool RingProducer::publish() {
  if (head_ == published_) return false;
  control_->head.store(head_, std::memory_order_release);
  published_ = head_;
  return true;
}

RingProducer::Status RingProducer::write(const char* data, size_t size,
                                         const std::atomic<bool>& closed,
                                         std::chrono::microseconds spin, std::string* error) {
  const auto spinUntil = std::chrono::steady_clock::now() + spin;
  for (;;) {
    if (closed.load(std::memory_order_acquire)) return Status::kClosed;
    const Status s = tryWrite(data, size, error);
    if (s != Status::kFull) return s;
    if (std::chrono::steady_clock::now() < spinUntil) {
      sched_yield();
    } else {
      // The consumer does not ring us: a full ring is rare, so poll slowly.
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

RingConsumer::RingConsumer(RingControl* control, const char* data, uint64_t capacity)
    : control_(control),
      data_(data),
      capacity_(capacity),
      maxFrame_(maxFrameFor(capacity)),
      tail_(0),
      head_(0) {}

RingConsumer::Status RingConsumer::peek(const char** data, size_t* size, std::string* error) {
  for (;;) {
    if (head_ == tail_) {
      const uint64_t head = control_->head.load(std::memory_order_acquire);
      // Our tail is always a frame boundary: an unchanged head is valid.
      if (head == tail_) return Status::kEmpty;
      // checkIndices' conditions, without building its (empty) string on
      // every look at the head: the poller does that once per frame or two.
      if (head < tail_ || head - tail_ > capacity_ || head % kFrameAlign != 0) {
        if (error != nullptr) *error = "producer: " + checkIndices(head, tail_, capacity_);
        return Status::kBroken;
      }
      head_ = head;
    }
    const uint64_t pos = tail_ & (capacity_ - 1);
    uint32_t word;
    std::memcpy(&word, data_ + pos, sizeof(word));
    // An ordinary frame, as parseFrame() accepts it, without its FrameAt (a
    // string inside) per frame; pads and anything bad go the long way.
    if (word != kPadFrame && word <= maxFrame_) {
      const uint64_t advance = frameBytes(word);
      if (advance <= head_ - tail_ && pos + advance <= capacity_) {
        *data = data_ + pos + kLengthBytes;
        *size = word;
        peeked_ = advance;
        return Status::kFrame;
      }
    }
    const FrameAt at = parseFrame(head_, tail_, capacity_, word, maxFrame_);
    switch (at.kind) {
      case FrameAt::kEmpty:
        return Status::kEmpty;
      case FrameAt::kBad:
        if (error != nullptr) *error = "producer: " + at.error;
        return Status::kBroken;
      case FrameAt::kPad:
        tail_ += at.advance;
        control_->tail.store(tail_, std::memory_order_release);
        continue;
      case FrameAt::kFrame:
        *data = data_ + (tail_ & (capacity_ - 1)) + kLengthBytes;
        *size = at.length;
        peeked_ = at.advance;
        return Status::kFrame;
    }
  }
}

void RingConsumer::consume() {
  tail_ += peeked_;
  peeked_ = 0;
  control_->tail.store(tail_, std::memory_order_release);
}

}  // namespace rpcjob::runtime::lane
