#include "lane_frame.h"

#include <utility>

namespace rpcjob::runtime {
namespace {

// The thread's frame buffer between sends: its capacity, grown to the largest
// frame the thread sent, is what spares the allocations.
thread_local std::vector<char> tBuffer;

}  // namespace

LaneFrame::LaneFrame() {
  bytes_.swap(tBuffer);
}

LaneFrame::~LaneFrame() {
  // A nested frame may have given its own back meanwhile: keep the larger.
  if (bytes_.capacity() > tBuffer.capacity()) bytes_.swap(tBuffer);
}

bool LaneFrame::encode(const wire::Header& header, const c10::IValue* value,
                       const DeviceTargets* targets) {
  layout_ = wire::beginLaneFrame(header, value != nullptr, bytes_);
  encoded_ =
      value == nullptr || (appendInlineValue(*value, targets, wire::kMaxInlinePayload, bytes_) &&
                           wire::endLaneFrame(bytes_, layout_));
  return encoded_;
}

std::shared_ptr<OutgoingMessage> LaneFrame::toMessage() const {
  auto out = std::make_shared<OutgoingMessage>();
  size_t spare = wire::kOrderBytes;  // makeMessage's room for the order field
  if (layout_.lengthAt != 0) {
    const size_t payloadAt = layout_.lengthAt + sizeof(uint32_t);
    out->payload.assign(bytes_.begin() + static_cast<std::ptrdiff_t>(payloadAt), bytes_.end());
    out->hasPayload = true;
    spare += sizeof(uint32_t) + out->payload.size();  // and for the payload inline
  }
  out->header = wire::laneFrameHeader(bytes_.data(), layout_, spare);
  return out;
}

}  // namespace rpcjob::runtime
