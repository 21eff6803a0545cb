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
  std::vector<RuntimeImpl::HeldFrames> frames;  // never for a pipe in `held`
};

thread_local OpenBatch* tOpen = nullptr;

void appendSized(std::string& to, const char* data, size_t size) {
  const auto n = static_cast<uint32_t>(size);
  to.append(reinterpret_cast<const char*>(&n), sizeof(n));
  to.append(data, size);
}

}  // namespace

namespace detail {

RuntimeImpl* batchingRuntime() {
  return tOpen != nullptr ? tOpen->runtime : nullptr;
}

void flushCallBatch() {
  if (tOpen == nullptr) return;
  // Swapped out first: a callback that runs inside the writes (an error
  // completing a future) may make requests, which are then held anew.
  std::vector<RuntimeImpl::HeldFrames> frames;
  frames.swap(tOpen->frames);
  RuntimeImpl::HeldRequests held;
  held.swap(tOpen->held);
  for (auto& f : frames) tOpen->runtime->writeFrames(std::move(f));
  if (!held.empty()) tOpen->runtime->writeHeld(std::move(held));
}

}  // namespace detail

bool RuntimeImpl::holdRequest(const std::shared_ptr<tensorpipe::Pipe>& pipe,
                              const std::shared_ptr<WriteQueue>& writes,
                              std::shared_ptr<OutgoingMessage>& message) {
  if (tOpen == nullptr || tOpen->runtime != this) return false;
  auto framed = std::find_if(tOpen->frames.begin(), tOpen->frames.end(),
                             [&](const HeldFrames& h) { return h.pipe == pipe; });
  if (framed != tOpen->frames.end()) {  // the frames before it go first
    HeldFrames earlier = std::move(*framed);
    tOpen->frames.erase(framed);
    writeFrames(std::move(earlier));
  }
  auto it = std::find_if(tOpen->held.begin(), tOpen->held.end(),
                         [&](const HeldPipe& h) { return h.pipe == pipe; });
  if (it == tOpen->held.end()) {
    tOpen->held.push_back(HeldPipe{pipe, writes, {}});
    it = tOpen->held.end() - 1;
  }
  it->messages.push_back(std::move(message));
  if (it->messages.size() >= kHeldPerPipe) {
    HeldRequests full;
    full.push_back(std::move(*it));
    tOpen->held.erase(it);
    writeHeld(std::move(full));
  }
  return true;
}

bool RuntimeImpl::holdFrame(const std::shared_ptr<tensorpipe::Pipe>& pipe,
                            const std::shared_ptr<WriteQueue>& writes, LaneFrame& frame) {
  if (tOpen == nullptr || tOpen->runtime != this) return false;
  if (!writes->laneUp.load(std::memory_order_relaxed)) return false;
  for (const HeldPipe& h : tOpen->held) {
    if (h.pipe == pipe) return false;
  }
  auto it = std::find_if(tOpen->frames.begin(), tOpen->frames.end(),
                         [&](const HeldFrames& h) { return h.pipe == pipe; });
  if (it == tOpen->frames.end()) {
    tOpen->frames.push_back(HeldFrames{pipe, writes, {}, 0});
    it = tOpen->frames.end() - 1;
  }
  appendSized(it->bytes, frame.header.data(), frame.header.size());
  appendSized(it->bytes, frame.payload.data(), frame.payload.size());
  if (++it->count >= kHeldPerPipe) {
    HeldFrames full = std::move(*it);
    tOpen->frames.erase(it);
    writeFrames(std::move(full));
  }
  return true;
}

void RuntimeImpl::writeHeld(HeldRequests held) {
  for (auto& h : held) {
    enqueueWrites(h.pipe, *h.writes, std::move(h.messages), h.writes);
  }
}

CallBatch::CallBatch(Runtime& runtime) {
  if (tOpen != nullptr) return;
  tOpen = new OpenBatch{&runtime.impl(), {}, {}};
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
