// libFuzzer target for everything a peer can make the runtime decode before any
// libtorch code sees it. Any crash, hang or sanitizer report is a bug; an error
// string is the expected outcome for malformed input.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cuda_lane/handles_wire.h"
#include "header_codec.h"

namespace {

// The fast format is canonical: what decodes re-encodes to the same bytes.
void reencode(const rpcjob::wire::FastValue& v, const char* payload, rpcjob::wire::FastEncoder& e) {
  using rpcjob::wire::FastTag;
  switch (v.tag) {
    case FastTag::kNone:
      return e.none();
    case FastTag::kFalse:
      return e.boolean(false);
    case FastTag::kTrue:
      return e.boolean(true);
    case FastTag::kInt:
      return e.integer(v.i);
    case FastTag::kDouble:
      return e.real(v.d);
    case FastTag::kString:
      return e.string(payload + v.offset, v.length);
    case FastTag::kTuple:
      e.tuple(static_cast<uint32_t>(v.items.size()));
      for (const auto& item : v.items) reencode(item, payload, e);
      return;
    case FastTag::kTensorInline:
      return e.tensorInline(v.dtype, v.sizes.data(), v.sizes.size(), payload + v.offset, v.length);
    case FastTag::kTensorRef:
      return e.tensorRef(v.index);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const char* bytes = reinterpret_cast<const char*>(data);
  rpcjob::wire::Header header;
  if (rpcjob::wire::decodeHeader(bytes, size, header).empty()) {
    // What decodes must re-encode to something that decodes to the same header.
    std::string again = rpcjob::wire::encodeHeader(header);
    rpcjob::wire::Header second;
    if (!rpcjob::wire::decodeHeader(again.data(), again.size(), second).empty() ||
        second.id != header.id || second.function != header.function) {
      __builtin_trap();
    }
  }
  rpcjob::wire::TensorMeta meta;
  (void)rpcjob::wire::decodeTensorMeta(bytes, size, meta);
  rpcjob::wire::ChannelDescriptors descriptors;
  (void)rpcjob::wire::decodeChannelDescriptors(bytes, size, descriptors);
  std::vector<rpcjob::wire::BatchEntry> batch;
  if (rpcjob::wire::decodeBatch(bytes, size, batch).empty()) {
    for (const auto& e : batch) {
      if (e.headerOffset + e.headerLength > size || e.payloadOffset + e.payloadLength > size) {
        __builtin_trap();
      }
      rpcjob::wire::Header sub;
      (void)rpcjob::wire::decodeHeader(bytes + e.headerOffset, e.headerLength, sub);
    }
  }
  // Fast values: the input as a payload, with a tensor table of 0..3 entries.
  rpcjob::wire::FastValue value;
  size_t table = size > 0 ? data[size - 1] % 4 : 0;
  if (rpcjob::wire::decodeFastValue(bytes, size, table, value).empty()) {
    std::vector<char> again;
    rpcjob::wire::FastEncoder encoder(again);
    reencode(value, bytes, encoder);
    if (again.size() != size || std::memcmp(again.data(), bytes, size) != 0) __builtin_trap();
  }
  // A lane frame's CUDA tensors and its kLaneCopied answer: canonical as well.
  rpcjob::wire::LaneTensors lane;
  if (rpcjob::wire::decodeLaneTensors(bytes, size, lane, rpcjob::wire::fastElementSize).empty()) {
    if (rpcjob::wire::encodeLaneTensors(lane) != std::string(bytes, size)) __builtin_trap();
  }
  (void)rpcjob::wire::decodeLaneTensors(bytes, size, lane, nullptr);
  rpcjob::wire::LaneCopied copied;
  if (rpcjob::wire::decodeLaneCopied(bytes, size, copied).empty()) {
    if (rpcjob::wire::encodeLaneCopied(copied) != std::string(bytes, size)) __builtin_trap();
  }
  return 0;
}
