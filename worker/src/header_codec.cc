#include "header_codec.h"

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cstring>

#include "wire_io.h"

namespace rpcjob::wire {
namespace {

using io::Reader;
using io::Writer;

GloballyUniqueId readId(Reader& r) {
  GloballyUniqueId id;
  id.worker = r.fixed<int32_t>();
  id.local = r.fixed<uint64_t>();
  return id;
}

void writeId(io::Cursor& w, const GloballyUniqueId& id) {
  w.fixed<int32_t>(id.worker);
  w.fixed<uint64_t>(id.local);
}

// A u32 length and that many bytes, left where they lie: where, and how many.
// False when the length is over `max` (a truncation is the reader's error).
bool readSection(Reader& r, size_t max, size_t& offset, size_t& length) {
  const uint32_t n = r.fixed<uint32_t>();
  if (n > max) return false;
  offset = r.position();
  length = n;
  r.skip(n);
  return true;
}

// Sets `flag` in an encoded header and appends a u32 length and the bytes.
void appendSection(std::string& encodedHeader, uint8_t flag, const char* data, size_t size) {
  constexpr size_t kFlagsAt = 5;  // "RJ", version, type, errorKind, flags
  encodedHeader[kFlagsAt] = static_cast<char>(encodedHeader[kFlagsAt] | flag);
  const auto length = static_cast<uint32_t>(size);
  char bytes[sizeof(length)];
  std::memcpy(bytes, &length, sizeof(length));
  encodedHeader.append(bytes, sizeof(length));
  encodedHeader.append(data, size);
}

}  // namespace

size_t encodedHeaderSize(const Header& h) {
  size_t size = 6 + 8 + 4 + 2 + std::min(h.function.size(), kMaxFunctionName) + 4 +
                std::min(h.error.size(), kMaxErrorLength);
  if (h.hasRRef) size += 2 * (4 + 8);
  if (h.hasAutograd) size += 8 + 8 + 4 + (h.requiresGrad.size() + 7) / 8;
  if (h.hasOrder) size += kOrderBytes;
  return size;
}

std::string encodeHeader(const Header& h, size_t spare) {
  std::string out;
  encodeHeaderInto(h, spare, out);
  return out;
}

void encodeHeaderInto(const Header& h, size_t spare, std::string& out) {
  // One allocation at most: the exact size, plus what the caller appends (an
  // inline payload), instead of the string's doublings as the fields go in.
  const size_t size = encodedHeaderSize(h);
  out.clear();
  out.reserve(size + spare);
  out.resize(size);
  io::Cursor w(out.data());
  const uint8_t head[6] = {
      'R',
      'J',
      kVersion,
      static_cast<uint8_t>(h.type),
      static_cast<uint8_t>(h.errorKind),
      static_cast<uint8_t>((h.hasRRef ? kHasRRef : 0) | (h.hasAutograd ? kHasAutograd : 0) |
                           (h.hasOrder ? kHasOrder : 0))};
  w.put(head, sizeof(head));
  w.fixed<uint64_t>(h.id);
  w.fixed<uint32_t>(h.timeoutMs);
  const size_t function = std::min(h.function.size(), kMaxFunctionName);
  w.fixed<uint16_t>(static_cast<uint16_t>(function));
  w.put(h.function.data(), function);
  const size_t error = std::min(h.error.size(), kMaxErrorLength);
  w.fixed<uint32_t>(static_cast<uint32_t>(error));
  w.put(h.error.data(), error);
  if (h.hasRRef) {
    writeId(w, h.rref);
    writeId(w, h.fork);
  }
  if (h.hasAutograd) {
    w.fixed<int64_t>(h.autogradContext);
    w.fixed<int64_t>(h.autogradSendId);
    w.fixed<uint32_t>(static_cast<uint32_t>(h.requiresGrad.size()));
    for (size_t i = 0; i < h.requiresGrad.size(); i += 8) {
      uint8_t bits = 0;
      for (size_t b = 0; b < 8 && i + b < h.requiresGrad.size(); ++b) {
        if (h.requiresGrad[i + b]) bits |= static_cast<uint8_t>(1u << b);
      }
      w.fixed<uint8_t>(bits);
    }
  }
  if (h.hasOrder) w.fixed<uint64_t>(h.orderBefore);
  assert(w.at() == out.data() + size);  // encodedHeaderSize is exact: the cursor checks nothing
}

std::string decodeHeader(const char* data, size_t size, Header& out) {
  Reader r(data, size);
  if (r.u8() != 'R' || r.u8() != 'J') return r.ok() ? "bad magic" : r.error();
  uint8_t version = r.u8();
  if (r.ok() && version != kVersion) {
    return "unsupported header version " + std::to_string(version);
  }
  uint8_t type = r.u8();
  uint8_t errorKind = r.u8();
  uint8_t flags = r.u8();
  out.id = r.fixed<uint64_t>();
  out.timeoutMs = r.fixed<uint32_t>();
  r.str16Into(out.function, kMaxFunctionName, "function name");
  r.str32Into(out.error, kMaxErrorLength, "error message");
  out.hasRRef = (flags & kHasRRef) != 0;
  if (out.hasRRef) {
    out.rref = readId(r);
    out.fork = readId(r);
  }
  out.hasAutograd = (flags & kHasAutograd) != 0;
  out.requiresGrad.clear();
  if (out.hasAutograd) {
    out.autogradContext = r.fixed<int64_t>();
    out.autogradSendId = r.fixed<int64_t>();
    uint32_t count = r.fixed<uint32_t>();
    if (count > kMaxAutogradTensors) return "too many autograd tensors";
    if (r.ok() && (count + 7) / 8 > r.remaining()) return "truncated autograd flags";
    out.requiresGrad.assign(r.ok() ? count : 0, false);
    for (size_t i = 0; i < out.requiresGrad.size(); i += 8) {
      uint8_t bits = r.u8();
      for (size_t b = 0; b < 8 && i + b < out.requiresGrad.size(); ++b) {
        out.requiresGrad[i + b] = (bits >> b) & 1;
      }
    }
  }
  out.hasOrder = (flags & kHasOrder) != 0;
  out.orderBefore = out.hasOrder ? r.fixed<uint64_t>() : 0;
  out.inlinePayload = (flags & kInlinePayload) != 0;
  out.payloadOffset = out.payloadLength = 0;
  if (out.inlinePayload &&
      !readSection(r, kMaxInlinePayload, out.payloadOffset, out.payloadLength)) {
    return "inline payload too long";
  }
  out.deviceHandles = (flags & kDeviceHandles) != 0;
  out.handlesOffset = out.handlesLength = 0;
  if (out.deviceHandles &&
      !readSection(r, kMaxDeviceHandles, out.handlesOffset, out.handlesLength)) {
    return "device handles too long";
  }
  if (!r.ok()) return r.error();
  if (type < static_cast<uint8_t>(MessageType::kHello) ||
      type > static_cast<uint8_t>(MessageType::kLast)) {
    return "unknown message type " + std::to_string(type);
  }
  if (errorKind > static_cast<uint8_t>(ErrorKind::kLast)) {
    return "unknown error kind " + std::to_string(errorKind);
  }
  if ((flags & ~(kHasRRef | kHasAutograd | kHasOrder | kInlinePayload | kDeviceHandles)) != 0) {
    return "unknown flags " + std::to_string(flags);
  }
  out.type = static_cast<MessageType>(type);
  out.errorKind = static_cast<ErrorKind>(errorKind);
  return {};
}

void appendOrder(std::string& encodedHeader, uint64_t before) {
  constexpr size_t kFlagsAt = 5;  // "RJ", version, type, errorKind, flags
  encodedHeader[kFlagsAt] = static_cast<char>(encodedHeader[kFlagsAt] | kHasOrder);
  char bytes[kOrderBytes];
  std::memcpy(bytes, &before, sizeof(before));
  encodedHeader.append(bytes, sizeof(bytes));
}

void appendDeviceHandles(std::string& encodedHeader, const char* data, size_t size) {
  appendSection(encodedHeader, kDeviceHandles, data, size);
}

void appendInlinePayload(std::string& encodedHeader, const char* data, size_t size) {
  appendSection(encodedHeader, kInlinePayload, data, size);
}

int64_t numElements(const std::vector<int64_t>& sizes) {
  constexpr int64_t kLimit = int64_t{1} << 62;
  int64_t n = 1;
  for (int64_t s : sizes) {
    if (s < 0) return -1;
    if (s == 0) return 0;
    if (n > kLimit / s) return -1;
    n *= s;
  }
  return n;
}

std::string encodeTensorMeta(const TensorMeta& m) {
  Writer w;
  w.u8(kVersion);
  w.fixed<int8_t>(m.dtype);
  w.fixed<int8_t>(m.deviceType);
  w.fixed<int8_t>(m.deviceIndex);
  w.u8(static_cast<uint8_t>(m.sizes.size()));
  for (int64_t s : m.sizes) w.fixed<int64_t>(s);
  return w.take();
}

std::string decodeTensorMeta(const char* data, size_t size, TensorMeta& out) {
  Reader r(data, size);
  uint8_t version = r.u8();
  if (r.ok() && version != kVersion) return "unsupported tensor metadata version";
  out.dtype = r.fixed<int8_t>();
  out.deviceType = r.fixed<int8_t>();
  out.deviceIndex = r.fixed<int8_t>();
  size_t dims = r.u8();
  if (dims > kMaxTensorDims) return "too many tensor dimensions";
  out.sizes.assign(dims, 0);
  for (size_t i = 0; i < dims && r.ok(); ++i) out.sizes[i] = r.fixed<int64_t>();
  if (!r.ok()) return r.error();
  if (!r.atEnd()) return "trailing bytes in tensor metadata";
  if (out.deviceType != 0 && out.deviceType != 1) return "unknown device type";
  if (out.deviceType == 1 && out.deviceIndex < 0) return "bad cuda device index";
  if (numElements(out.sizes) < 0) return "bad tensor shape";
  return {};
}

std::string encodeChannelDescriptors(const ChannelDescriptors& descriptors) {
  Writer w;
  w.u8(kVersion);
  w.fixed<uint16_t>(static_cast<uint16_t>(descriptors.size()));
  for (const auto& [channel, devices] : descriptors) {
    w.str16(channel);
    w.fixed<uint16_t>(static_cast<uint16_t>(devices.size()));
    for (const auto& [device, descriptor] : devices) {
      w.str16(device);
      w.str16(descriptor);
    }
  }
  return w.take();
}

std::string decodeChannelDescriptors(const char* data, size_t size, ChannelDescriptors& out) {
  Reader r(data, size);
  uint8_t version = r.u8();
  if (r.ok() && version != kVersion) return "unsupported descriptor version";
  size_t channels = r.fixed<uint16_t>();
  if (channels > kMaxDescriptorEntries) return "too many channels";
  out.clear();
  for (size_t i = 0; i < channels && r.ok(); ++i) {
    std::string channel = r.str16(kMaxDescriptorString, "channel name");
    size_t devices = r.fixed<uint16_t>();
    if (devices > kMaxDescriptorEntries) return "too many devices";
    DeviceDescriptors list;
    for (size_t j = 0; j < devices && r.ok(); ++j) {
      std::string device = r.str16(kMaxDescriptorString, "device");
      std::string descriptor = r.str16(kMaxDescriptorString, "descriptor");
      list.emplace_back(std::move(device), std::move(descriptor));
    }
    out.emplace_back(std::move(channel), std::move(list));
  }
  if (!r.ok()) return r.error();
  if (!r.atEnd()) return "trailing bytes in descriptors";
  return {};
}

// ---- fast values

size_t fastElementSize(int8_t dtype) {
  switch (dtype) {
    case 0:   // Byte
    case 1:   // Char
    case 11:  // Bool
      return 1;
    case 2:   // Short
    case 5:   // Half
    case 15:  // BFloat16
      return 2;
    case 3:  // Int
    case 6:  // Float
      return 4;
    case 4:  // Long
    case 7:  // Double
      return 8;
    default:
      return 0;
  }
}

FastEncoder::FastEncoder(std::vector<char>& out) : out_(out) {
  out_.push_back(static_cast<char>(kFastMagic));
  out_.push_back(static_cast<char>(kFastVersion));
}

template <typename T>
void FastEncoder::fixed(T v) {
  size_t at = out_.size();
  out_.resize(at + sizeof(T));
  std::memcpy(out_.data() + at, &v, sizeof(T));
}

void FastEncoder::integer(int64_t v) {
  tag(FastTag::kInt);
  fixed<int64_t>(v);
}
void FastEncoder::real(double v) {
  tag(FastTag::kDouble);
  fixed<double>(v);
}
void FastEncoder::string(const char* data, size_t size) {
  tag(FastTag::kString);
  fixed<uint32_t>(static_cast<uint32_t>(size));
  out_.insert(out_.end(), data, data + size);
}
void FastEncoder::tuple(uint32_t count) {
  tag(FastTag::kTuple);
  fixed<uint32_t>(count);
}
void FastEncoder::tensorInline(int8_t dtype, const int64_t* sizes, size_t ndim, const void* data,
                               size_t nbytes) {
  tag(FastTag::kTensorInline);
  fixed<int8_t>(dtype);
  out_.push_back(static_cast<char>(static_cast<uint8_t>(ndim)));
  for (size_t i = 0; i < ndim; ++i) fixed<int64_t>(sizes[i]);
  fixed<uint64_t>(nbytes);
  const char* bytes = static_cast<const char*>(data);
  if (nbytes > 0) out_.insert(out_.end(), bytes, bytes + nbytes);
}
void FastEncoder::tensorRef(uint32_t index) {
  tag(FastTag::kTensorRef);
  fixed<uint32_t>(index);
}

bool isFastPayload(const char* data, size_t size) {
  return size >= 1 && static_cast<uint8_t>(data[0]) == kFastMagic;
}

namespace {

void decodeFast(Reader& r, size_t tableSize, size_t depth, FastValue& v) {
  if (depth > kFastMaxDepth) return r.fail("fast value nested too deeply");
  uint8_t tag = r.u8();
  if (!r.ok()) return;
  if (tag > static_cast<uint8_t>(FastTag::kLast)) {
    return r.fail("unknown fast value tag " + std::to_string(tag));
  }
  v.tag = static_cast<FastTag>(tag);
  switch (v.tag) {
    case FastTag::kNone:
    case FastTag::kFalse:
    case FastTag::kTrue:
      return;
    case FastTag::kInt:
      v.i = r.fixed<int64_t>();
      return;
    case FastTag::kDouble:
      v.d = r.fixed<double>();
      return;
    case FastTag::kString: {
      size_t length = r.fixed<uint32_t>();
      v.offset = r.position();
      v.length = length;
      r.skip(length);
      return;
    }
    case FastTag::kTuple: {
      size_t count = r.fixed<uint32_t>();
      if (!r.ok()) return;
      if (count > r.remaining()) return r.fail("tuple longer than the payload");
      // Grown as items decode, so a lying count costs no more than the bytes present.
      // A value decoded before keeps its items' storage (decodeFastValue's `out`).
      v.items.clear();
      v.items.reserve(count < 64 ? count : 64);
      for (size_t i = 0; i < count && r.ok(); ++i) {
        decodeFast(r, tableSize, depth + 1, v.items.emplace_back());
      }
      return;
    }
    case FastTag::kTensorInline: {
      v.dtype = r.fixed<int8_t>();
      size_t ndim = r.u8();
      if (!r.ok()) return;
      size_t elementSize = fastElementSize(v.dtype);
      if (elementSize == 0) return r.fail("bad fast tensor dtype " + std::to_string(v.dtype));
      if (ndim > kMaxTensorDims) return r.fail("too many tensor dimensions");
      v.sizes.assign(ndim, 0);
      for (size_t i = 0; i < ndim && r.ok(); ++i) v.sizes[i] = r.fixed<int64_t>();
      uint64_t nbytes = r.fixed<uint64_t>();
      if (!r.ok()) return;
      int64_t n = numElements(v.sizes);
      if (n < 0 || static_cast<uint64_t>(n) > (uint64_t{1} << 40) / elementSize ||
          static_cast<uint64_t>(n) * elementSize != nbytes) {
        return r.fail("fast tensor length does not match its shape");
      }
      if (nbytes > r.remaining()) return r.fail("fast tensor longer than the payload");
      v.offset = r.position();
      v.length = nbytes;
      r.skip(nbytes);
      return;
    }
    case FastTag::kTensorRef:
      v.index = r.fixed<uint32_t>();
      if (r.ok() && v.index >= tableSize) r.fail("tensor reference out of range");
      return;
  }
}

}  // namespace

std::string decodeFastValue(const char* data, size_t size, size_t tableSize, FastValue& out) {
  Reader r(data, size);
  if (r.u8() != kFastMagic) return r.ok() ? "bad fast value magic" : r.error();
  uint8_t version = r.u8();
  if (r.ok() && version != kFastVersion) {
    return "unsupported fast value version " + std::to_string(version);
  }
  decodeFast(r, tableSize, 0, out);
  if (!r.ok()) return r.error();
  if (!r.atEnd()) return "trailing bytes after the fast value";
  return {};
}

// ---- batches

void appendBatchCount(std::vector<char>& out, uint32_t count) {
  size_t at = out.size();
  out.resize(at + 4);
  std::memcpy(out.data() + at, &count, 4);
}

void appendBatchEntry(std::vector<char>& out, const std::string& header, const char* payload,
                      size_t payloadSize) {
  appendBatchCount(out, static_cast<uint32_t>(header.size()));
  out.insert(out.end(), header.begin(), header.end());
  appendBatchCount(out, static_cast<uint32_t>(payloadSize));
  if (payloadSize > 0) out.insert(out.end(), payload, payload + payloadSize);
}

std::string decodeBatch(const char* data, size_t size, std::vector<BatchEntry>& out) {
  Reader r(data, size);
  size_t count = r.fixed<uint32_t>();
  if (!r.ok()) return r.error();
  if (count == 0 || count > kMaxBatch) return "bad batch count " + std::to_string(count);
  if (count > r.remaining() / 8) return "batch count larger than the payload";
  out.clear();
  out.reserve(count);
  for (size_t i = 0; i < count && r.ok(); ++i) {
    BatchEntry& e = out.emplace_back();
    e.headerLength = r.fixed<uint32_t>();
    e.headerOffset = r.position();
    r.skip(e.headerLength);
    e.payloadLength = r.fixed<uint32_t>();
    e.payloadOffset = r.position();
    r.skip(e.payloadLength);
  }
  if (!r.ok()) return r.error();
  if (!r.atEnd()) return "trailing bytes after the batch";
  return {};
}

}  // namespace rpcjob::wire
