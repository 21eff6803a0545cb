#pragma once
// A message encoded straight into its shared-memory lane frame (lane/), in a
// buffer that its thread reuses: a small call sent on a lane allocates nothing
// for its message once the buffer has grown. (The OutgoingMessage, its header
// string and payload vector that makeMessage allocates, and their frees, were
// a third of the caller's time per async call: issue 22.) When the lane cannot
// take the frame (none yet, closed, its ring full), toMessage() turns it into
// the message makeMessage would have made, for the pipe.
//
// The frame's bytes are the pipe path's (header_codec.h, beginLaneFrame): a
// peer cannot tell which path built them.
//
// Thread-safety: one thread's, on its stack. A LaneFrame made while another
// lives on the same thread (a callback run inside a send that calls again)
// gets a buffer of its own.

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "header_codec.h"
#include "serialization.h"

namespace rpcjob::runtime {

class LaneFrame {
 public:
  LaneFrame();   // takes this thread's buffer
  ~LaneFrame();  // gives it back
  LaneFrame(const LaneFrame&) = delete;
  LaneFrame& operator=(const LaneFrame&) = delete;

  // Encodes `header` (its order unset) and `value` (null: a header alone) as a
  // frame. False, and nothing encoded, when a lane may not carry the message:
  // a value that needs the pickler or a TensorPipe tensor, or a payload over
  // wire::kMaxInlinePayload. Whether the frame fits a lane's ring is the
  // lane's to say (maxFrame) when it is sent.
  bool encode(const wire::Header& header, const c10::IValue* value,
              const DeviceTargets* targets = nullptr);
  bool encoded() const { return encoded_; }
  const char* data() const { return bytes_.data(); }
  size_t size() const { return bytes_.size(); }
  // Under the pipe's write lock, right before the frame is sent.
  void setOrder(uint64_t before) { wire::setLaneFrameOrder(bytes_.data(), layout_, before); }
  // The message makeMessage(header, value, targets) makes, byte for byte.
  std::shared_ptr<OutgoingMessage> toMessage() const;

 private:
  friend class LaneFrames;
  std::vector<char> bytes_;
  wire::LaneFrameLayout layout_;
  bool encoded_ = false;
};

// Encoded frames held back to back in one buffer (a CallBatch's requests to
// one pipe): a copy of each instead of a message each, and the buffer grows by
// doubling. Not thread-safe.
class LaneFrames {
 public:
  void add(const LaneFrame& frame);
  size_t count() const { return spans_.size(); }
  const char* data(size_t i) const { return bytes_.data() + spans_[i].offset; }
  size_t size(size_t i) const { return spans_[i].size; }
  void setOrder(size_t i, uint64_t before);
  std::shared_ptr<OutgoingMessage> toMessage(size_t i) const;  // as LaneFrame::toMessage
  void clear();

 private:
  struct Span {
    size_t offset = 0;
    size_t size = 0;
    wire::LaneFrameLayout layout;
  };
  std::vector<char> bytes_;
  std::vector<Span> spans_;
};

}  // namespace rpcjob::runtime
