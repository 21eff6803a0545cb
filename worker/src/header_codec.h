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
//   if flags & kHasRRef: rref (i32 worker, u64 local) and fork (i32 worker, u64 local) |
//   if flags & kHasAutograd: context i64 | sendId i64 | u32 tensor count +
//     ceil(count / 8) bytes of bits, one per tensor of the value in walk order
//     (autograd/tensor_walk.h): set for a tensor that requires grad |
//   if flags & kHasOrder: u64, messages of the pipe's other path sent before
//     this one (a pipe and its shared-memory lane: worker/src/lane/order.h) |
//   if flags & kInlinePayload: the message's payload, u32 length + bytes |
//   if flags & kDeviceHandles: u32 length + bytes of the CUDA tensors that a
//     lane frame carries as IPC handles (cuda_lane/handles_wire.h) (last)
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
  kBatch,            // several tensorless messages in one payload (encodeBatch)
  // A shared-memory lane (worker/src/lane/), only to a peer that offers one in
  // its handshake descriptors (kLaneDescriptor): older peers never see these.
  kLaneOffer,  // client -> server; payload: lane::encodeOffer
  kLaneReply,  // server -> client; error empty: accepted, payload: the server's bell
  kLaneStart,  // client -> server: its requests may take the lane from here on
  // A lane frame only, server -> client, to a client whose lane the server
  // said takes CUDA tensors (cuda_lane/): the tensors of the request frame
  // `id` names (its handoff, not its call id) are copied once the events in
  // the payload (cuda_lane/handles_wire.h: encodeLaneCopied) have occurred.
  // Unordered on the lane; ordered, as an answer, when its ring was full.
  kLaneCopied,
  // A lane frame only, server -> client, unordered, to a client whose lane
  // offer said it takes them (LaneOffer::landing): buffers the server holds for
  // the client's next CUDA tensors of a size, which the client then copies
  // into itself (cuda_lane/handles_wire.h: encodeLandingOffers). Never on the
  // pipe: offers that find the ring full are withdrawn, as if never made.
  kLaneOffers,
  kLast = kLaneOffers,
};

// The requests a server answers by id (kResponse or kError): their caller waits.
inline bool expectsAnswer(MessageType type) {
  switch (type) {
    case MessageType::kCall:
    case MessageType::kRemoteCall:
    case MessageType::kRRefFetch:
    case MessageType::kRRefUserDelete:
    case MessageType::kRRefForkRequest:
    case MessageType::kRRefChildAccept:
      return true;
    default:
      return false;
  }
}

enum class ErrorKind : uint8_t {
  kNone = 0,
  kRemoteException,  // the function threw
  kUnknownFunction,
  kBadRequest,  // undecodable arguments, unsupported tensor, ...
  kShuttingDown,
  // The callee refused to read the request (over its message limit, bad
  // tensors) and reads nothing more from this pipe: the caller closes it.
  kRefused,
  kLast = kRefused,
};

inline constexpr uint8_t kHasRRef = 1;
// The message belongs to a distributed autograd context (worker/src/autograd/).
inline constexpr uint8_t kHasAutograd = 2;
inline constexpr size_t kMaxAutogradTensors = size_t{1} << 20;
// The payload travels inside the metadata, after the header (appendInlinePayload):
// one transport message per RPC message instead of two (the descriptor, then the
// payload), which was a third of TensorPipe's work per small call. Payloads up to
// kMaxInlinePayload only: TensorPipe's shm and ibv transports need the whole
// descriptor in their ring buffer (2 MiB) at once.
inline constexpr uint8_t kInlinePayload = 4;
inline constexpr size_t kMaxInlinePayload = 32 * 1024;
// See kHasOrder in the layout above; only sent on pipes with a lane.
inline constexpr uint8_t kHasOrder = 8;
inline constexpr size_t kOrderBytes = 8;
// See kDeviceHandles in the layout above; only on a lane whose server said it
// takes CUDA tensors. At most kMaxDeviceHandles bytes.
inline constexpr uint8_t kDeviceHandles = 16;
inline constexpr size_t kMaxDeviceHandles = 64 * 1024;
// The handshake descriptors' entry by which a worker says it takes lanes:
// (kLaneDescriptor, [(boot id, pid namespace + ":" + pid)]).
inline constexpr const char* kLaneDescriptor = "rpcjob_lane";

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
  // Distributed autograd (kHasAutograd): the context the message belongs to;
  // the sender's send function for its tensors (0: none require grad); which
  // tensors of the value require grad, one flag per tensor in walk order.
  bool hasAutograd = false;
  int64_t autogradContext = 0;
  int64_t autogradSendId = 0;
  std::vector<bool> requiresGrad;
  // kHasOrder: how many messages of the other path preceded this one.
  bool hasOrder = false;
  uint64_t orderBefore = 0;
  // Set by decodeHeader for kInlinePayload: where the payload lies in the
  // decoded bytes (the caller copies it out). encodeHeader ignores them.
  bool inlinePayload = false;
  size_t payloadOffset = 0;
  size_t payloadLength = 0;
  // The same for kDeviceHandles.
  bool deviceHandles = false;
  size_t handlesOffset = 0;
  size_t handlesLength = 0;
};

// `spare`: capacity reserved beyond the header, for an inline payload that
// appendInlinePayload() adds later without reallocating.
std::string encodeHeader(const Header& header, size_t spare = 0);
// The same into `out`, whose memory it reuses (a thread's scratch string).
void encodeHeaderInto(const Header& header, size_t spare, std::string& out);
// What encodeHeader() writes, in bytes.
size_t encodedHeaderSize(const Header& header);
// Returns an empty string on success, else what is wrong.
std::string decodeHeader(const char* data, size_t size, Header& out);
// Appends the order field (kHasOrder) to an encoded header that has neither
// it nor an inline payload yet.
void appendOrder(std::string& encodedHeader, uint64_t before);
// Appends `size` (at most kMaxInlinePayload) bytes of payload to an encoded
// header and sets its kInlinePayload flag.
void appendInlinePayload(std::string& encodedHeader, const char* data, size_t size);
// Appends `size` (at most kMaxDeviceHandles) bytes of device handles to an
// encoded header, after its inline payload if it has one, and sets its
// kDeviceHandles flag. Last: nothing is appended after it.
void appendDeviceHandles(std::string& encodedHeader, const char* data, size_t size);

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

// Fast value payloads: the common call values (None, bools, ints, doubles,
// strings, tuples of them, dense CPU tensors) without the pickler. A payload
// starting with kFastMagic is this format; anything else is a pickle (whose first
// byte is always 0x80). Small tensors travel inline in the payload (no channel
// round for them); larger ones reference TensorPipe's tensor table.
//   payload := kFastMagic kFastVersion value
//   value   := tag u8, then: kInt i64 | kDouble f64 | kString u32 length + bytes |
//              kTuple u32 count + values | kTensorInline dtype i8, ndim u8,
//              sizes i64 x ndim, u64 nbytes + bytes | kTensorRef u32 table index
inline constexpr uint8_t kFastMagic = 0xF5;
inline constexpr uint8_t kFastVersion = 1;
inline constexpr size_t kFastMaxDepth = 32;
inline constexpr size_t kFastInlineTensorBytes = 64 * 1024;  // larger ones go by channel

enum class FastTag : uint8_t {
  kNone = 0,
  kFalse,
  kTrue,
  kInt,
  kDouble,
  kString,
  kTuple,
  kTensorInline,
  kTensorRef,
  kLast = kTensorRef,
};

// Element size of the dtypes (c10::ScalarType values) the fast path carries; 0
// for any other (those values are pickled).
size_t fastElementSize(int8_t dtype);

class FastEncoder {
 public:
  explicit FastEncoder(std::vector<char>& out);
  void none() { tag(FastTag::kNone); }
  void boolean(bool v) { tag(v ? FastTag::kTrue : FastTag::kFalse); }
  void integer(int64_t v);
  void real(double v);
  void string(const char* data, size_t size);
  void tuple(uint32_t count);
  void tensorInline(int8_t dtype, const int64_t* sizes, size_t ndim, const void* data,
                    size_t nbytes);
  void tensorRef(uint32_t index);

 private:
  void tag(FastTag t) { out_.push_back(static_cast<char>(t)); }
  template <typename T>
  void fixed(T v);
  std::vector<char>& out_;
};

// A decoded fast value. Strings and inline tensor bytes point into the payload
// (offset, length), so the payload must outlive the tree.
struct FastValue {
  FastTag tag = FastTag::kNone;
  int64_t i = 0;
  double d = 0;
  size_t offset = 0;  // kString / kTensorInline: bytes in the payload
  size_t length = 0;
  int8_t dtype = 0;
  std::vector<int64_t> sizes;  // tensors
  uint32_t index = 0;          // kTensorRef
  std::vector<FastValue> items;
};

bool isFastPayload(const char* data, size_t size);
// Returns an empty string on success, else what is wrong; `tableSize` bounds the
// tensor references. `out` may hold a value decoded before: its tuple's storage
// is reused (a thread's scratch value allocates nothing for a call's arguments).
std::string decodeFastValue(const char* data, size_t size, size_t tableSize, FastValue& out);

// kBatch payloads: messages without TensorPipe tensors, coalesced while a write
// to the same pipe is in flight.
//   payload := u32 count, then per message: u32 header length + header bytes,
//              u32 payload length + payload bytes (0: no payload)
inline constexpr size_t kMaxBatch = 1 << 16;
void appendBatchCount(std::vector<char>& out, uint32_t count);
void appendBatchEntry(std::vector<char>& out, const std::string& header, const char* payload,
                      size_t payloadSize);
struct BatchEntry {
  size_t headerOffset = 0, headerLength = 0;
  size_t payloadOffset = 0, payloadLength = 0;
};
// Splits a batch payload (offsets into it); the headers are decoded by the caller.
std::string decodeBatch(const char* data, size_t size, std::vector<BatchEntry>& out);

}  // namespace rpcjob::wire
