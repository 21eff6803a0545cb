#pragma once
// The cursors the wire decoders and encoders share (header_codec.cc,
// cuda_lane/handles_wire.cc): fixed-width little-endian fields, every read
// bounds-checked, the first failure kept. No libtorch, no TensorPipe.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace rpcjob::wire::io {

// Writes through a cursor into a string sized once (`size`; it grows by
// doubling past that), with room reserved for `spare` bytes the caller appends
// later: a std::string append per field was an out-of-line call each, about a
// dozen per header and 5 % of an async caller's time on the GPU host.
class Writer {
 public:
  Writer() = default;  // grows as the fields go in
  // Into `reuse`'s memory: a thread's scratch string, written once per call.
  Writer(std::string reuse, size_t size, size_t spare) : out_(std::move(reuse)) {
    out_.clear();
    out_.reserve(size + spare);
    out_.resize(size);
  }
  void u8(uint8_t v) { put(&v, 1); }
  template <typename T>
  void fixed(T v) {
    put(&v, sizeof(T));  // little-endian hosts only (x86_64, aarch64)
  }
  // At most `max` bytes of `s` (longer ones are cut, not rejected).
  void str16(const std::string& s, size_t max = SIZE_MAX) {
    const size_t n = std::min(s.size(), max);
    fixed<uint16_t>(static_cast<uint16_t>(n));
    put(s.data(), n);
  }
  void str32(const std::string& s, size_t max = SIZE_MAX) {
    const size_t n = std::min(s.size(), max);
    fixed<uint32_t>(static_cast<uint32_t>(n));
    put(s.data(), n);
  }
  // The bytes written; the capacity asked for stays (for the caller's appends).
  std::string take() {
    out_.resize(pos_);
    return std::move(out_);
  }
  void put(const void* data, size_t n) {
    if (n > out_.size() - pos_) out_.resize(std::max(pos_ + n, 2 * out_.size()));
    std::memcpy(&out_[pos_], data, n);
    pos_ += n;
  }

 private:
  std::string out_;
  size_t pos_ = 0;
};

// Writes through a raw cursor into memory the caller sized exactly beforehand
// (encodedHeaderSize): no bounds check or growth per field, which Writer pays.
// A header is encoded once per message, and its fields were ~7 % of a busy
// lane poller's instructions per async call through Writer.
class Cursor {
 public:
  explicit Cursor(char* at) : at_(at) {}
  template <typename T>
  void fixed(T v) {
    std::memcpy(at_, &v, sizeof(T));  // little-endian hosts only, as Writer
    at_ += sizeof(T);
  }
  void put(const void* data, size_t n) {
    std::memcpy(at_, data, n);
    at_ += n;
  }
  char* at() const { return at_; }

 private:
  char* at_;
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
  // The same into `out`, whose buffer is reused: a header's strings, once per
  // message, were a temporary built and moved from each (empty: cleared).
  void str16Into(std::string& out, size_t max, const char* what) {
    strInto(out, fixed<uint16_t>(), max, what);
  }
  void str32Into(std::string& out, size_t max, const char* what) {
    strInto(out, fixed<uint32_t>(), max, what);
  }
  void strInto(std::string& out, size_t length, size_t max, const char* what) {
    if (length > max) {
      out.clear();
      fail(std::string(what) + " too long");
    } else if (take(length)) {
      out.assign(data_ + pos_ - length, length);
    } else {
      out.clear();
    }
  }
  void fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
  }
  bool ok() const { return error_.empty(); }
  bool atEnd() const { return pos_ == size_; }
  size_t position() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }
  bool skip(size_t n) { return take(n); }
  // `n` bytes where they lie, or null (truncated: failed).
  const char* bytes(size_t n) { return take(n) ? data_ + pos_ - n : nullptr; }
  const std::string& error() const { return error_; }

 private:
  bool take(size_t n) {
    if (!ok()) return false;
    if (n > size_ - pos_) return truncated();
    pos_ += n;
    return true;
  }
  // Out of line: with the string built inline, take() was not inlined, and
  // its call was ~6 % of a busy lane poller's instructions per async call.
  [[gnu::cold, gnu::noinline]] bool truncated() {
    fail("truncated at byte " + std::to_string(pos_));
    return false;
  }
  const char* data_;
  size_t size_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace rpcjob::wire::io
