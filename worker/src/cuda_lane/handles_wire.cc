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
constexpr size_t kOfferBytes = 8 + 4 + 4 + 4 * 8 + kIpcHandleBytes;

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
  bool pushed = !in.returned.empty();
  for (const LaneTensor& t : in.tensors) pushed = pushed || t.offer != 0;
  Writer w;
  w.fixed<uint8_t>(pushed ? kLaneHandlesPushVersion : kLaneHandlesVersion);
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
    if (pushed) w.fixed<uint64_t>(t.offer);
  }
  if (pushed) {
    w.fixed<uint32_t>(static_cast<uint32_t>(in.returned.size()));
    for (uint64_t id : in.returned) w.fixed<uint64_t>(id);
  }
  return w.take();
}

std::string decodeLaneTensors(const char* data, size_t size, LaneTensors& out,
                              size_t (*elementSize)(int8_t dtype)) {
  Reader r(data, size);
  out.tensors.clear();
  out.returned.clear();
  const auto version = r.fixed<uint8_t>();
  if (r.ok() && version != kLaneHandlesVersion && version != kLaneHandlesPushVersion) {
    return "unsupported lane handles version " + std::to_string(version);
  }
  const bool pushed = version == kLaneHandlesPushVersion;
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
      if (pushed) t.offer = r.fixed<uint64_t>();
      if (!r.ok()) return r.error();
      why = checkTensor(t, elementSize);
    }
    if (!why.empty()) return "lane tensor " + std::to_string(i) + ": " + why;
  }
  if (pushed) {
    const size_t returned = r.fixed<uint32_t>();
    if (!r.ok()) return r.error();
    if (returned > kMaxLaneTensors || returned > r.remaining() / 8) {
      return "lane handles returning " + std::to_string(returned) + " offers in " +
             std::to_string(r.remaining()) + " bytes";
    }
    out.returned.resize(returned);
    for (uint64_t& id : out.returned) {
      id = r.fixed<uint64_t>();
      if (r.ok() && id == 0) return "lane handles returning an offer of id 0";
    }
    if (!r.ok()) return r.error();
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

std::string encodeLandingOffers(const std::vector<LandingOffer>& in) {
  Writer w;
  w.fixed<uint8_t>(kLaneHandlesVersion);
  w.fixed<uint32_t>(static_cast<uint32_t>(in.size()));
  for (const LandingOffer& o : in) {
    w.fixed<uint64_t>(o.id);
    w.fixed<int32_t>(o.device);
    w.fixed<int32_t>(o.pid);
    w.fixed<uint64_t>(o.base);
    w.fixed<uint64_t>(o.bufferId);
    w.fixed<uint64_t>(o.offset);
    w.fixed<uint64_t>(o.length);
    w.put(o.memory.data(), o.memory.size());
  }
  return w.take();
}

std::string decodeLandingOffers(const char* data, size_t size, std::vector<LandingOffer>& out) {
  Reader r(data, size);
  out.clear();
  const auto version = r.fixed<uint8_t>();
  if (r.ok() && version != kLaneHandlesVersion) {
    return "unsupported lane offers version " + std::to_string(version);
  }
  const size_t count = r.fixed<uint32_t>();
  if (!r.ok()) return r.error();
  if (count == 0) return "lane offers without an offer";
  if (count > kMaxLaneTensors) {
    return "lane offers of " + std::to_string(count) + " buffers, more than " +
           std::to_string(kMaxLaneTensors);
  }
  if (r.remaining() != count * kOfferBytes) {  // at most 32 KiB: no overflow
    return "lane offers of " + std::to_string(count) + " buffers in " +
           std::to_string(r.remaining()) + " bytes";
  }
  out.resize(count);
  for (size_t i = 0; i < count; ++i) {
    LandingOffer& o = out[i];
    o.id = r.fixed<uint64_t>();
    o.device = r.fixed<int32_t>();
    o.pid = r.fixed<int32_t>();
    o.base = r.fixed<uint64_t>();
    o.bufferId = r.fixed<uint64_t>();
    o.offset = r.fixed<uint64_t>();
    o.length = r.fixed<uint64_t>();
    readHandle(r, o.memory);
    std::string why;
    if (o.id == 0)
      why = "an id of 0";
    else if (o.length == 0)
      why = "a length of 0";
    else if (o.device < 0)
      why = "a device of " + std::to_string(o.device);
    else if (o.pid <= 0)
      why = "a pid of " + std::to_string(o.pid);
    else if (o.offset > UINT64_MAX - o.length)
      why = "offset + length overflows";
    if (!why.empty()) return "lane offer " + std::to_string(i) + ": " + why;
  }
  return r.ok() ? std::string() : r.error();
}

}  // namespace rpcjob::wire
