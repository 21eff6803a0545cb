#include "header_codec.h"

#include <cstring>

namespace rpcjob::wire {
namespace {

class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  template <typename T>
  void fixed(T v) {
    char bytes[sizeof(T)];
    std::memcpy(bytes, &v, sizeof(T));  // little-endian hosts only (x86_64, aarch64)
    out_.append(bytes, sizeof(T));
  }
  void str16(const std::string& s) {
    fixed<uint16_t>(static_cast<uint16_t>(s.size()));
    out_.append(s);
  }
  void str32(const std::string& s) {
    fixed<uint32_t>(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

// Every read checks the remaining length; the first failure sticks, so decoders
// read on and check ok() once, which keeps them short.
class Reader {
 public:
  Reader(const char* data, size_t size) : data_(data), size_(size) {}
  template <typename T>
  T fixed() {
    T v{};
    if (!take(sizeof(T))) return v;
    std::memcpy(&v, data_ + pos_ - sizeof(T), sizeof(T));
    return v;
  }
  uint8_t u8() { return fixed<uint8_t>(); }
  std::string str(size_t length, size_t max, const char* what) {
    if (length > max) return fail(std::string(what) + " too long"), std::string();
    if (!take(length)) return {};
    return std::string(data_ + pos_ - length, length);
  }
  std::string str16(size_t max, const char* what) { return str(fixed<uint16_t>(), max, what); }
  std::string str32(size_t max, const char* what) { return str(fixed<uint32_t>(), max, what); }
  void fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
  }
  bool ok() const { return error_.empty(); }
  bool atEnd() const { return pos_ == size_; }
  const std::string& error() const { return error_; }

 private:
  bool take(size_t n) {
    if (!ok()) return false;
    if (n > size_ - pos_) {
      fail("truncated at byte " + std::to_string(pos_));
      return false;
    }
    pos_ += n;
    return true;
  }
  const char* data_;
  size_t size_;
  size_t pos_ = 0;
  std::string error_;
};

GloballyUniqueId readId(Reader& r) {
  GloballyUniqueId id;
  id.worker = r.fixed<int32_t>();
  id.local = r.fixed<uint64_t>();
  return id;
}

void writeId(Writer& w, const GloballyUniqueId& id) {
  w.fixed<int32_t>(id.worker);
  w.fixed<uint64_t>(id.local);
}

}  // namespace

std::string encodeHeader(const Header& h) {
  Writer w;
  w.u8('R');
  w.u8('J');
  w.u8(kVersion);
  w.u8(static_cast<uint8_t>(h.type));
  w.u8(static_cast<uint8_t>(h.errorKind));
  w.u8(h.hasRRef ? kHasRRef : 0);
  w.fixed<uint64_t>(h.id);
  w.fixed<uint32_t>(h.timeoutMs);
  w.str16(h.function.size() > kMaxFunctionName ? h.function.substr(0, kMaxFunctionName)
                                               : h.function);
  w.str32(h.error.size() > kMaxErrorLength ? h.error.substr(0, kMaxErrorLength) : h.error);
  if (h.hasRRef) {
    writeId(w, h.rref);
    writeId(w, h.fork);
  }
  return w.take();
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
  out.function = r.str16(kMaxFunctionName, "function name");
  out.error = r.str32(kMaxErrorLength, "error message");
  out.hasRRef = (flags & kHasRRef) != 0;
  if (out.hasRRef) {
    out.rref = readId(r);
    out.fork = readId(r);
  }
  if (!r.ok()) return r.error();
  if (type < static_cast<uint8_t>(MessageType::kHello) ||
      type > static_cast<uint8_t>(MessageType::kLast)) {
    return "unknown message type " + std::to_string(type);
  }
  if (errorKind > static_cast<uint8_t>(ErrorKind::kLast)) {
    return "unknown error kind " + std::to_string(errorKind);
  }
  if ((flags & ~kHasRRef) != 0) return "unknown flags " + std::to_string(flags);
  out.type = static_cast<MessageType>(type);
  out.errorKind = static_cast<ErrorKind>(errorKind);
  return {};
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

}  // namespace rpcjob::wire
