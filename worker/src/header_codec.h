#pragma once
// The wire format of rpcjob's own message headers: what travels in a TensorPipe
// message's metadata, in each tensor's metadata, and in the pipe handshake.
//
// Everything a peer sends is untrusted: every decoder here is bounds-checked and
// returns an error string instead of throwing or reading past the input. The
// decoders are fuzzed (worker/fuzz/header_codec_fuzzer.cc).
//
// Header layout, version 1, little-endian:
//   "RJ" magic (2) | version u8 | type u8 | errorKind u8 | flags u8 | id u64 |
//   timeoutMs u32 | function (u16 length + bytes) | error (u32 length + bytes) |
//   if flags & kHasRRef: rref (i32 worker, u64 local) and fork (i32 worker, u64 local)
// A newer minor addition appends fields after these; a different version byte is
// rejected so that mismatched builds fail loudly instead of misreading.
//
// No libtorch and no TensorPipe here.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace rpcjob::wire {

inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kMaxFunctionName = 1024;
inline constexpr size_t kMaxErrorLength = 1 << 20;
inline constexpr size_t kMaxTensorDims = 64;
inline constexpr size_t kMaxDescriptorEntries = 256;
inline constexpr size_t kMaxDescriptorString = 4096;

enum class MessageType : uint8_t {
  kHello = 1,        // handshake, caller -> callee; payload: channel descriptors
  kHelloReply,       // handshake answer; payload: the callee's descriptors
  kCall,             // run a registered function, answer kResponse / kError
  kResponse,         // a call's value
  kError,            // a call's failure (errorKind, error)
  kRemoteCall,       // run a function and keep its value in an owner RRef
  kRRefFetch,        // toHere(): send back an owner RRef's value
  kRRefUserDelete,   // a user RRef is gone
  kRRefForkRequest,  // a user received a fork from a non-owner: register it
  kRRefChildAccept,  // the fork is registered: its parent may drop it
  kLast = kRRefChildAccept,
};

enum class ErrorKind : uint8_t {
  kNone = 0,
  kRemoteException,  // the function threw
  kUnknownFunction,
  kBadRequest,  // undecodable arguments, unsupported tensor, ...
  kShuttingDown,
  kLast = kShuttingDown,
};

inline constexpr uint8_t kHasRRef = 1;

struct GloballyUniqueId {
  int32_t worker = -1;
  uint64_t local = 0;
  bool operator==(const GloballyUniqueId& o) const {
    return worker == o.worker && local == o.local;
  }
  bool operator<(const GloballyUniqueId& o) const {
    return worker != o.worker ? worker < o.worker : local < o.local;
  }
};

struct Header {
  MessageType type = MessageType::kCall;
  ErrorKind errorKind = ErrorKind::kNone;
  uint64_t id = 0;
  uint32_t timeoutMs = 0;  // 0: none
  std::string function;
  std::string error;
  bool hasRRef = false;
  GloballyUniqueId rref;
  GloballyUniqueId fork;
};

std::string encodeHeader(const Header& header);
// Returns an empty string on success, else what is wrong.
std::string decodeHeader(const char* data, size_t size, Header& out);

// Tensor metadata, in each TensorPipe tensor's metadata so the receiver can
// allocate before reading. dtype is c10::ScalarType's value; the runtime checks it.
struct TensorMeta {
  int8_t dtype = 0;
  int8_t deviceType = 0;  // 0 cpu, 1 cuda
  int8_t deviceIndex = -1;
  std::vector<int64_t> sizes;
};
std::string encodeTensorMeta(const TensorMeta& meta);
std::string decodeTensorMeta(const char* data, size_t size, TensorMeta& out);
// Number of elements, or -1 on overflow (over 2^62).
int64_t numElements(const std::vector<int64_t>& sizes);

// Channel device descriptors, exchanged in the handshake so each side can tell
// which channel TensorPipe picked for a device pair: channel -> [(device, descriptor)].
using DeviceDescriptors = std::vector<std::pair<std::string, std::string>>;
using ChannelDescriptors = std::vector<std::pair<std::string, DeviceDescriptors>>;
std::string encodeChannelDescriptors(const ChannelDescriptors& descriptors);
std::string decodeChannelDescriptors(const char* data, size_t size, ChannelDescriptors& out);

}  // namespace rpcjob::wire
