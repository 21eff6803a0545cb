#include "rpcjob/runtime/call_batch.h"

#include <algorithm>
#include <utility>

#include "call_batch_state.h"
#include "rpcjob/runtime/runtime.h"
#include "runtime_impl.h"

namespace rpcjob::runtime {
namespace {

// A peer's held requests go out once this many wait: the callee starts on them
// while the caller builds the next ones.
constexpr size_t kHeldPerPipe = 256;

struct OpenBatch {
  RuntimeImpl* runtime = nullptr;
  RuntimeImpl::HeldRequests held;
};

thread_local OpenBatch* tOpen = nullptr;

}  // namespace

namespace detail {

RuntimeImpl* batchingRuntime() {
  return tOpen != nullptr ? tOpen->runtime : nullptr;
}

void flushCallBatch() {
  if (tOpen == nullptr || tOpen->held.empty()) return;
  // Swapped out first: a callback that runs inside the writes (an error
  // completing a future) may make requests, which are then held anew.
  RuntimeImpl::HeldRequests held;
  held.swap(tOpen->held);
  tOpen->runtime->writeHeld(std::move(held));
}

}  // namespace detail

RuntimeImpl::HeldPipe& RuntimeImpl::heldFor(const std::shared_ptr<tensorpipe::Pipe>& pipe,
                                            const std::shared_ptr<WriteQueue>& writes) {
  auto& held = tOpen->held;
  auto it =
      std::find_if(held.begin(), held.end(), [&](const HeldPipe& h) { return h.pipe == pipe; });
  if (it != held.end()) return *it;
  held.push_back(HeldPipe{pipe, writes, {}, {}});
  return held.back();
}

bool RuntimeImpl::holdRequest(const std::shared_ptr<tensorpipe::Pipe>& pipe,
                              const std::shared_ptr<WriteQueue>& writes,
                              std::shared_ptr<OutgoingMessage>& message) {
  if (tOpen == nullptr || tOpen->runtime != this) return false;
  HeldPipe& h = heldFor(pipe, writes);
  for (size_t i = 0; i < h.frames.count(); ++i) h.messages.push_back(h.frames.toMessage(i));
  h.frames.clear();
  h.messages.push_back(std::move(message));
  writeHeldIfFull(h);
  return true;
}

bool RuntimeImpl::holdFrame(const std::shared_ptr<tensorpipe::Pipe>& pipe,
                            const std::shared_ptr<WriteQueue>& writes, const LaneFrame& frame) {
  if (tOpen == nullptr || tOpen->runtime != this) return false;
  HeldPipe& h = heldFor(pipe, writes);
  if (h.messages.empty()) {
    h.frames.add(frame);
  } else {
    h.messages.push_back(frame.toMessage());
  }
  writeHeldIfFull(h);
  return true;
}

void RuntimeImpl::writeHeldIfFull(HeldPipe& h) {
  if (h.messages.size() + h.frames.count() < kHeldPerPipe) return;
  HeldRequests full;
  full.push_back(std::move(h));
  tOpen->held.erase(tOpen->held.begin() + (&h - tOpen->held.data()));
  writeHeld(std::move(full));
}

void RuntimeImpl::writeHeld(HeldRequests held) {
  for (auto& h : held) {
    if (h.frames.count() > 0) {
      sendHeldFrames(h);
    } else {
      enqueueWrites(h.pipe, *h.writes, std::move(h.messages), h.writes);
    }
  }
}

CallBatch::CallBatch(Runtime& runtime) {
  if (tOpen != nullptr) return;
  tOpen = new OpenBatch{&runtime.impl(), {}};
  owner_ = true;
}

CallBatch::~CallBatch() {
  if (!owner_) return;
  flush();
  delete tOpen;
  tOpen = nullptr;
}

void CallBatch::flush() {
  detail::flushCallBatch();
}

}  // namespace rpcjob::runtime
