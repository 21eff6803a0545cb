#include "lane_frame.h"

#include <utility>

namespace rpcjob::runtime {
namespace {

// The thread's frame buffer between sends: its capacity, grown to the largest
// frame the thread sent, is what spares the allocations.
thread_local std::vector<char> tBuffer;

// What makeMessage makes of the frame's message.
std::shared_ptr<OutgoingMessage> messageOf(const char* frame, size_t size,
                                           const wire::LaneFrameLayout& layout) {
  auto out = std::make_shared<OutgoingMessage>();
  size_t spare = wire::kOrderBytes;  // makeMessage's room for the order field
  if (layout.lengthAt != 0) {
    const size_t payloadAt = layout.lengthAt + sizeof(uint32_t);
    out->payload.assign(frame + payloadAt, frame + size);
    out->hasPayload = true;
    spare += sizeof(uint32_t) + out->payload.size();  // and for the payload inline
  }
  out->header = wire::laneFrameHeader(frame, layout, spare);
  return out;
}

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
  return messageOf(bytes_.data(), bytes_.size(), layout_);
}

void LaneFrames::add(const LaneFrame& frame) {
  spans_.push_back(Span{bytes_.size(), frame.size(), frame.layout_});
  bytes_.insert(bytes_.end(), frame.bytes_.begin(), frame.bytes_.end());
}

void LaneFrames::setOrder(size_t i, uint64_t before) {
  wire::setLaneFrameOrder(bytes_.data() + spans_[i].offset, spans_[i].layout, before);
}

std::shared_ptr<OutgoingMessage> LaneFrames::toMessage(size_t i) const {
  return messageOf(data(i), size(i), spans_[i].layout);
}

void LaneFrames::clear() {
  bytes_.clear();
  spans_.clear();
}

}  // namespace rpcjob::runtime
