#include "cuda_lane/handles_wire.h"

#include <cstring>

#include "wire_io.h"

namespace rpcjob::wire {
namespace {

// The fixed bytes of a tensor after its metadata, and the least a tensor takes
// (metadata without dimensions: 5 bytes): what a count is checked against
// before anything is reserved for it.
constexpr size_t kTensorFixedBytes = 4 + 4 + 4 * 8 + 2 * kIpcHandleBytes;
constexpr size_t kMinTensorBytes = 4 + 5 + kTensorFixedBytes;

using io::Reader;
using io::Writer;

void readHandle(Reader& r, IpcHandle& out) {
  if (const char* p = r.bytes(out.size())) std::memcpy(out.data(), p, out.size());
}

std::string checkTensor(const LaneTensor& t, size_t (*elementSize)(int8_t)) {
  if (t.meta.deviceType != 1) return "not on a CUDA device";
  if (t.pid <= 0) return "a pid of " + std::to_string(t.pid);
  if (t.device < 0) return "a device of " + std::to_string(t.device);
  if (t.offset > UINT64_MAX - t.length) return "offset + length overflows";
  if (elementSize == nullptr) return {};  // the caller checks the length itself
  const size_t bytes = elementSize(t.meta.dtype);
  if (bytes == 0) return "dtype " + std::to_string(t.meta.dtype) + " is not known here";
  // decodeTensorMeta refused shapes over 2^62 elements: n is not negative.
  const auto n = static_cast<uint64_t>(numElements(t.meta.sizes));
  if (n > UINT64_MAX / bytes || n * bytes != t.length) {
    return std::to_string(t.length) + " bytes for " + std::to_string(n) + " elements of " +
           std::to_string(bytes) + " bytes";
  }
  return {};
}

}  // namespace

std::string encodeLaneTensors(const LaneTensors& in) {
  Writer w;
  w.fixed<uint8_t>(kLaneHandlesVersion);
  w.fixed<uint64_t>(in.handoff);
  w.fixed<uint32_t>(static_cast<uint32_t>(in.tensors.size()));
  for (const LaneTensor& t : in.tensors) {
    const std::string meta = encodeTensorMeta(t.meta);
    w.fixed<uint32_t>(static_cast<uint32_t>(meta.size()));
    w.put(meta.data(), meta.size());
    w.fixed<int32_t>(t.pid);
    w.fixed<int32_t>(t.device);
    w.fixed<uint64_t>(t.base);
    w.fixed<uint64_t>(t.bufferId);
    w.fixed<uint64_t>(t.offset);
    w.fixed<uint64_t>(t.length);
    w.put(t.memory.data(), t.memory.size());
    w.put(t.ready.data(), t.ready.size());
  }
  return w.take();
}

std::string decodeLaneTensors(const char* data, size_t size, LaneTensors& out,
                              size_t (*elementSize)(int8_t dtype)) {
  Reader r(data, size);
  out.tensors.clear();
  const auto version = r.fixed<uint8_t>();
  if (r.ok() && version != kLaneHandlesVersion) {
    return "unsupported lane handles version " + std::to_string(version);
  }
  out.handoff = r.fixed<uint64_t>();
  if (r.ok() && out.handoff == 0) return "lane handles with a handoff of 0";
  const size_t count = r.fixed<uint32_t>();
  if (!r.ok()) return r.error();
  if (count == 0) return "lane handles without tensors";
  if (count > kMaxLaneTensors) {
    return "lane handles of " + std::to_string(count) + " tensors, more than " +
           std::to_string(kMaxLaneTensors);
  }
  if (count > r.remaining() / kMinTensorBytes) {
    return "lane handles of " + std::to_string(count) + " tensors in " +
           std::to_string(r.remaining()) + " bytes";
  }
  out.tensors.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    LaneTensor& t = out.tensors.emplace_back();
    const size_t metaLength = r.fixed<uint32_t>();
    const char* meta = r.bytes(metaLength);
    if (!r.ok()) return r.error();
    std::string why = decodeTensorMeta(meta, metaLength, t.meta);
    if (why.empty()) {
      t.pid = r.fixed<int32_t>();
      t.device = r.fixed<int32_t>();
      t.base = r.fixed<uint64_t>();
      t.bufferId = r.fixed<uint64_t>();
      t.offset = r.fixed<uint64_t>();
      t.length = r.fixed<uint64_t>();
      readHandle(r, t.memory);
      readHandle(r, t.ready);
      if (!r.ok()) return r.error();
      why = checkTensor(t, elementSize);
    }
    if (!why.empty()) return "lane tensor " + std::to_string(i) + ": " + why;
  }
  if (r.remaining() != 0) return "trailing bytes after the lane handles";
  return {};
}

std::string encodeLaneCopied(const LaneCopied& in) {
  Writer w;
  w.fixed<uint8_t>(kLaneHandlesVersion);
  w.fixed<uint32_t>(static_cast<uint32_t>(in.done.size()));
  for (const IpcHandle& h : in.done) w.put(h.data(), h.size());
  return w.take();
}

std::string decodeLaneCopied(const char* data, size_t size, LaneCopied& out) {
  Reader r(data, size);
  out.done.clear();
  const auto version = r.fixed<uint8_t>();
  if (r.ok() && version != kLaneHandlesVersion) {
    return "unsupported lane copied version " + std::to_string(version);
  }
  const size_t count = r.fixed<uint32_t>();
  if (!r.ok()) return r.error();
  if (count == 0) return "lane copied without events";
  if (count > kMaxLaneTensors) {
    return "lane copied of " + std::to_string(count) + " events, more than " +
           std::to_string(kMaxLaneTensors);
  }
  const size_t bytes = count * kIpcHandleBytes;  // at most 16 KiB: no overflow
  if (r.remaining() < bytes) {
    return "lane copied of " + std::to_string(count) + " events in " +
           std::to_string(r.remaining()) + " bytes";
  }
  if (r.remaining() > bytes) return "trailing bytes after the lane copied events";
  out.done.resize(count);
  for (IpcHandle& h : out.done) readHandle(r, h);
  return r.ok() ? std::string() : r.error();
}

}  // namespace rpcjob::wire
