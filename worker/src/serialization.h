#pragma once
// IValues to TensorPipe messages and back. The header (header_codec.h) is the
// message's metadata; everything but tensors is pickled into one payload with a
// tensor table; each tensor travels as a TensorPipe tensor straight from its
// memory (made contiguous first if it is not), its dtype, shape and device in
// the tensor's metadata so the receiver allocates before reading.

#include <ATen/core/ivalue.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "header_codec.h"
#include "rpcjob/runtime/observer.h"

namespace tensorpipe {
class Message;
class Descriptor;
class Allocation;
}  // namespace tensorpipe

namespace rpcjob::runtime {

class DeviceEvent;
struct DeviceTargets;  // CUDA build: cuda/device_maps.h

// A served call whose response a message carries: the observer records it as
// finished when the message has been written (RuntimeImpl::flushWrites).
struct ServedCall {
  std::string function;
  int callerRank = -1;
  CallStatus status = CallStatus::kOk;
  Observer::CallToken token;
};

// Owns what a TensorPipe write points into until the write completes.
struct OutgoingMessage {
  std::string header;
  std::vector<char> payload;
  std::vector<at::Tensor> tensors;
  std::vector<std::string> tensorMeta;
  bool hasPayload = false;
  // A payload up to wire::kMaxInlinePayload travels inside the metadata (one
  // transport message), unless the sender keeps it apart (RuntimeImpl::WriteQueue
  // says when).
  bool inlinePayload = true;
  // CUDA build: per tensor, its device at the peer (-1: cpu) and the stream it
  // is sent from (a cudaStream_t; null for host memory). Empty otherwise.
  std::vector<int> targets;
  std::vector<void*> streams;
  // A response: the call it answers. A batch: those of its parts (kept apart so
  // that a single response allocates nothing for it).
  std::optional<ServedCall> served;
  std::vector<ServedCall> servedInBatch;
  // Once per message: the header moves into the TensorPipe message.
  tensorpipe::Message toTensorpipe();
};

// `value` may be null (a message with a header only). Throws RpcError
// (kBadMessage) for values that cannot travel (sparse tensors, objects, ...).
// `targets` (CUDA build) says where tensors go on the peer; null: CPU only.
std::shared_ptr<OutgoingMessage> makeMessage(const wire::Header& header, const c10::IValue* value,
                                             const DeviceTargets* targets = nullptr);
// The same for a value that can travel inline as it is (the fast encoding, no
// tensor table, at most wire::kMaxInlinePayload bytes): its payload into
// `payload` and the header into `headerOut` (room left for the order field and
// the payload), reusing their memory, with no OutgoingMessage. False, when the
// value needs makeMessage. A lane frame's path (runtime_lane.cc).
bool encodeInline(const wire::Header& header, const c10::IValue& value,
                  const DeviceTargets* targets, std::string& headerOut, std::vector<char>& payload);
// A message whose payload is raw bytes (the handshake's descriptors).
std::shared_ptr<OutgoingMessage> makeRawMessage(const wire::Header& header, std::string bytes);

// What a read fills in, and what decodeValue() turns back into an IValue.
struct IncomingMessage {
  wire::Header header;
  std::vector<char> payload;
  std::vector<at::Tensor> tensors;
  // CUDA build: per tensor, the stream it is read on (a cudaStream_t; null for
  // host memory) and the device it moves to after the read (-1: none); the
  // events decodeValue() records once the read was enqueued, one per device.
  std::vector<void*> streams;
  std::vector<int> moveTo;
  std::vector<std::shared_ptr<DeviceEvent>> events;
  // When the message arrived, for the observer (read at most once per message
  // read from a pipe; the calls of a batch share it). Set while the message is
  // dispatched, on the read callback's thread; null elsewhere.
  const EventTime* arrived = nullptr;
  // Empty again, buffers' capacity kept: a pipe reads each message into the
  // same one (RuntimeImpl::PipeReader).
  void clear();
};

// Checks the descriptor (header, sizes, tensor metadata, and the total against
// `maxBytes` before anything is allocated) and allocates buffers; returns an
// error string for anything malformed or too large.
std::string prepareRead(const tensorpipe::Descriptor& descriptor, IncomingMessage& in,
                        tensorpipe::Allocation& allocation, std::uint64_t maxBytes);
// Why a tensor of `dtype` (c10::ScalarType's value, as the wire carries it)
// cannot travel, or "": out of range, undefined, quantized.
std::string dtypeProblem(int8_t dtype);
// Unpickles the payload against the tensors; None when there is no payload.
// Throws RpcError (kBadMessage).
c10::IValue decodeValue(IncomingMessage& in);

inline constexpr size_t kMaxPayload = size_t{1} << 31;

}  // namespace rpcjob::runtime
