#pragma once
// IValues to TensorPipe messages and back. The header (header_codec.h) is the
// message's metadata; everything but tensors is pickled into one payload with a
// tensor table; each tensor travels as a TensorPipe tensor straight from its
// memory (made contiguous first if it is not), its dtype, shape and device in
// the tensor's metadata so the receiver allocates before reading.

#include <ATen/core/ivalue.h>

#include <memory>
#include <string>
#include <vector>

#include "header_codec.h"

namespace tensorpipe {
class Message;
class Descriptor;
class Allocation;
}  // namespace tensorpipe

namespace rpcjob::runtime {

// Owns what a TensorPipe write points into until the write completes.
struct OutgoingMessage {
  std::string header;
  std::vector<char> payload;
  std::vector<at::Tensor> tensors;
  std::vector<std::string> tensorMeta;
  bool hasPayload = false;
  tensorpipe::Message toTensorpipe();
};

// `value` may be null (a message with a header only). Throws RpcError
// (kBadMessage) for values that cannot travel (sparse tensors, objects, ...).
std::shared_ptr<OutgoingMessage> makeMessage(const wire::Header& header, const c10::IValue* value);
// A message whose payload is raw bytes (the handshake's descriptors).
std::shared_ptr<OutgoingMessage> makeRawMessage(const wire::Header& header, std::string bytes);

// What a read fills in, and what decodeValue() turns back into an IValue.
struct IncomingMessage {
  wire::Header header;
  std::vector<char> payload;
  std::vector<at::Tensor> tensors;
};

// Checks the descriptor (header, sizes, tensor metadata) and allocates buffers;
// returns an error string for anything malformed.
std::string prepareRead(const tensorpipe::Descriptor& descriptor, IncomingMessage& in,
                        tensorpipe::Allocation& allocation);
// Unpickles the payload against the tensors; None when there is no payload.
// Throws RpcError (kBadMessage).
c10::IValue decodeValue(IncomingMessage& in);

inline constexpr size_t kMaxPayload = size_t{1} << 31;

}  // namespace rpcjob::runtime
