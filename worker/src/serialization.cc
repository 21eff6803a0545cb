// The only translation unit that includes the pickler (seconds of compile time).
#include "serialization.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty.h>
#include <tensorpipe/tensorpipe.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cstring>

#include "host_memory/shared_tensor.h"
#include "rpcjob/runtime/errors.h"
#if RPCJOB_WITH_CUDA
#include "cuda/cuda_serialization.h"
#include "cuda/device_maps.h"
#include "trace/trace.h"
#endif

namespace rpcjob::runtime {
namespace {

wire::TensorMeta metaOf(const at::Tensor& t) {
  wire::TensorMeta meta;
  meta.dtype = static_cast<int8_t>(t.scalar_type());
  meta.deviceType = t.device().is_cuda() ? 1 : 0;
  meta.deviceIndex = t.device().is_cuda() ? static_cast<int8_t>(t.device().index()) : -1;
  meta.sizes.assign(t.sizes().begin(), t.sizes().end());
  return meta;
}

RpcError badMessage(const std::string& what) {
  return RpcError(ErrorCode::kBadMessage, "", what);
}

// c10::ScalarType values that wire::fastElementSize() assumes.
static_assert(static_cast<int>(c10::ScalarType::Byte) == 0 &&
              static_cast<int>(c10::ScalarType::Char) == 1 &&
              static_cast<int>(c10::ScalarType::Short) == 2 &&
              static_cast<int>(c10::ScalarType::Int) == 3 &&
              static_cast<int>(c10::ScalarType::Long) == 4 &&
              static_cast<int>(c10::ScalarType::Half) == 5 &&
              static_cast<int>(c10::ScalarType::Float) == 6 &&
              static_cast<int>(c10::ScalarType::Double) == 7 &&
              static_cast<int>(c10::ScalarType::Bool) == 11 &&
              static_cast<int>(c10::ScalarType::BFloat16) == 15);

// A plain dense CPU tensor the fast path may carry (anything else is pickled).
bool fastTensor(const at::Tensor& t) {
  return t.defined() && t.layout() == c10::kStrided && t.device().is_cpu() && !t.requires_grad() &&
         !t.is_quantized() && !t.has_names() && !t.is_neg() && !t.is_conj() &&
         wire::fastElementSize(static_cast<int8_t>(t.scalar_type())) ==
             static_cast<size_t>(t.element_size()) &&
         t.dim() <= static_cast<int64_t>(wire::kMaxTensorDims);
}

#if RPCJOB_WITH_CUDA
// Whether host tensors are mapped to a GPU of the peer: they then go through
// the tensor table, not the fast encoding.
bool hostToDevice(const DeviceTargets* targets) {
  if (targets == nullptr) return false;
  const auto it = targets->map.find(-1);
  return it != targets->map.end() && it->second >= 0;
}
#endif

// Whether `v` is made only of what the fast encoding carries; adds its encoded
// size to `bytes`, so that the payload is allocated once (not grown field by field).
bool fastEncodable(const c10::IValue& v, size_t depth, size_t& bytes, size_t& tableRefs) {
  if (depth > wire::kFastMaxDepth) return false;
  if (v.isNone() || v.isBool()) {
    bytes += 1;
    return true;
  }
  if (v.isInt() || v.isDouble()) {
    bytes += 1 + 8;
    return true;
  }
  if (v.isString()) {
    const size_t n = v.toStringRef().size();
    bytes += 1 + 4 + n;
    return n <= UINT32_MAX;
  }
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!fastTensor(t)) return false;
    // tag, dtype, ndim, sizes, nbytes, bytes; or tag and table index
    const size_t n = t.nbytes();
    const bool inlined = n <= wire::kFastInlineTensorBytes;
    bytes += inlined ? 1 + 1 + 1 + 8 * t.dim() + 8 + n : 1 + 4;
    if (!inlined) ++tableRefs;
    return true;
  }
  if (v.isTuple()) {
    bytes += 1 + 4;
    for (const auto& e : v.toTupleRef().elements()) {
      if (!fastEncodable(e, depth + 1, bytes, tableRefs)) return false;
    }
    return true;
  }
  return false;
}

void fastEncode(const c10::IValue& v, wire::FastEncoder& e, std::vector<at::Tensor>& table) {
  if (v.isNone()) return e.none();
  if (v.isBool()) return e.boolean(v.toBool());
  if (v.isInt()) return e.integer(v.toInt());
  if (v.isDouble()) return e.real(v.toDouble());
  if (v.isString()) {
    const std::string& s = v.toStringRef();
    return e.string(s.data(), s.size());
  }
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (t.nbytes() <= wire::kFastInlineTensorBytes) {
      at::Tensor c = t.is_contiguous() ? t : t.contiguous();
      return e.tensorInline(static_cast<int8_t>(c.scalar_type()), c.sizes().data(), c.dim(),
                            c.data_ptr(), c.nbytes());
    }
    e.tensorRef(static_cast<uint32_t>(table.size()));
    table.push_back(t);
    return;
  }
  const auto& elements = v.toTupleRef().elements();
  e.tuple(static_cast<uint32_t>(elements.size()));
  for (const auto& item : elements) fastEncode(item, e, table);
}

c10::IValue fastDecode(const wire::FastValue& v, const char* payload,
                       const std::vector<at::Tensor>& table) {
  switch (v.tag) {
    case wire::FastTag::kNone:
      return c10::IValue();
    case wire::FastTag::kFalse:
      return c10::IValue(false);
    case wire::FastTag::kTrue:
      return c10::IValue(true);
    case wire::FastTag::kInt:
      return c10::IValue(v.i);
    case wire::FastTag::kDouble:
      return c10::IValue(v.d);
    case wire::FastTag::kString:
      return c10::IValue(std::string(payload + v.offset, v.length));
    case wire::FastTag::kTuple: {
      // Up to three items (a call's usual arguments) go in the tuple's own
      // storage: no vector to allocate and hand over, per message.
      const auto item = [&](size_t i) { return fastDecode(v.items[i], payload, table); };
      switch (v.items.size()) {
        case 1:
          return c10::ivalue::Tuple::create(item(0));
        case 2: {
          c10::IValue first = item(0);
          return c10::ivalue::Tuple::create(std::move(first), item(1));
        }
        case 3: {
          c10::IValue first = item(0);
          c10::IValue second = item(1);
          return c10::ivalue::Tuple::create(std::move(first), std::move(second), item(2));
        }
        default: {
          std::vector<c10::IValue> items;
          items.reserve(v.items.size());
          for (size_t i = 0; i < v.items.size(); ++i) items.push_back(item(i));
          return c10::ivalue::Tuple::create(std::move(items));
        }
      }
    }
    case wire::FastTag::kTensorInline: {
      // The CPU allocator directly: at::empty's trip through the dispatcher
      // was half of a small call's decode.
      at::Tensor t = at::detail::empty_cpu(v.sizes, static_cast<c10::ScalarType>(v.dtype));
      if (v.length > 0) std::memcpy(t.data_ptr(), payload + v.offset, v.length);
      return t;
    }
    case wire::FastTag::kTensorRef:
      return table[v.index];  // bounds-checked by the decoder
  }
  return c10::IValue();
}

// Received CPU tensors from here up live in the shared arena
// (host_memory/shared_arena.h): mapped once and reused from its cache (a fresh
// 400 MB buffer takes ~100k page faults during the copy), and a peer on this
// host reads them with memcpy when this worker sends them on.
constexpr size_t kLargeReceive = size_t{4} << 20;

}  // namespace

void IncomingMessage::clear() {
  // Copied from an empty one, not moved from a fresh one: no temporary made
  // and destroyed per message, and the strings keep their buffers.
  static const wire::Header kEmpty;
  header = kEmpty;
  // A large payload's buffer is let go: kept, one per pipe, it would hold that
  // memory for as long as the pipe lives.
  constexpr size_t kKeptPayload = 64 * 1024;
  if (payload.capacity() > kKeptPayload) {
    std::vector<char>().swap(payload);
  } else {
    payload.clear();
  }
  tensors.clear();
  streams.clear();
  moveTo.clear();
  events.clear();
  arrived = nullptr;
}

tensorpipe::Message OutgoingMessage::toTensorpipe() {
  tensorpipe::Message m;
  // Moved, not copied: the header is written once (its capacity has room for an
  // inline payload, makeMessage), and nothing reads it after this.
  m.metadata = std::move(header);
  if (hasPayload && inlinePayload && payload.size() <= wire::kMaxInlinePayload) {
    wire::appendInlinePayload(m.metadata, payload.data(), payload.size());
  } else if (hasPayload) {
    tensorpipe::Message::Payload p;
    p.data = payload.data();
    p.length = payload.size();
    m.payloads.push_back(std::move(p));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    tensorpipe::Message::Tensor t;
    // A host tensor always lands in host memory (prepareRead), so we say so:
    // with every tensor's target device known, TensorPipe starts the channels'
    // sends at once instead of waiting for the receiver's descriptor reply, a
    // round trip on the pipe's connection (25-40 us of a 4 MB call's direction
    // on the GPU host). fillTensor sets a device tensor's target likewise.
    t.targetDevice = tensorpipe::Device{tensorpipe::kCpuDeviceType, 0};
#if RPCJOB_WITH_CUDA
    // A CudaBuffer on the tensor's send stream, and the device it lands on.
    if (!cuda::fillTensor(*this, i, &t)) t.buffer = tensorpipe::CpuBuffer{tensors[i].data_ptr()};
#else
    t.buffer = tensorpipe::CpuBuffer{tensors[i].data_ptr()};
#endif
    t.length = tensors[i].nbytes();
    t.metadata = tensorMeta[i];
    m.tensors.push_back(std::move(t));
  }
  return m;
}

std::shared_ptr<OutgoingMessage> makeMessage(const wire::Header& header, const c10::IValue* value,
                                             [[maybe_unused]] const DeviceTargets* targets) {
  auto out = std::make_shared<OutgoingMessage>();
  if (value == nullptr) {
    out->header = wire::encodeHeader(header, wire::kOrderBytes);
    return out;
  }
  std::vector<at::Tensor> table;
  size_t fastBytes = 2;  // kFastMagic, kFastVersion
  size_t tableRefs = 0;
  bool fast = fastEncodable(*value, 0, fastBytes, tableRefs);
#if RPCJOB_WITH_CUDA
  if (hostToDevice(targets)) fast = false;
#endif
  if (fast) {
    out->payload.reserve(fastBytes);
    wire::FastEncoder encoder(out->payload);
    fastEncode(*value, encoder, table);
  } else {
    try {
      out->payload = torch::jit::pickle(*value, &table);
    } catch (const std::exception& e) {
      throw badMessage(std::string("cannot serialize the value: ") + e.what());
    }
  }
  out->hasPayload = true;
  // Room for the payload after the header, should it travel inline (toTensorpipe).
  // And for the order field of a pipe with a lane (wire::appendOrder).
  out->header = wire::encodeHeader(
      header, wire::kOrderBytes +
                  (out->payload.size() <= wire::kMaxInlinePayload ? 4 + out->payload.size() : 0));
  out->tensors.reserve(table.size());
  for (auto& t : table) {
    if (t.layout() != c10::kStrided) throw badMessage("only strided (dense) tensors can be sent");
    if (t.is_quantized()) throw badMessage("quantized tensors cannot be sent");
#if !RPCJOB_WITH_CUDA
    if (!t.device().is_cpu()) throw badMessage("CUDA tensors need the CUDA build");
#endif
    // A view sends only the bytes it covers; a non-contiguous one is compacted.
    at::Tensor c = t.is_contiguous() ? t : t.contiguous();
#if RPCJOB_WITH_CUDA
    wire::TensorMeta meta = metaOf(c);
    c = cuda::prepareSend(*out, std::move(c), targets, meta);
    out->tensorMeta.push_back(wire::encodeTensorMeta(meta));
#else
    out->tensorMeta.push_back(wire::encodeTensorMeta(metaOf(c)));
#endif
    out->tensors.push_back(std::move(c));
  }
  return out;
}

bool encodeInline(const wire::Header& header, const c10::IValue& value,
                  [[maybe_unused]] const DeviceTargets* targets, std::string& headerOut,
                  std::vector<char>& payload) {
  size_t bytes = 2;  // kFastMagic, kFastVersion
  size_t tableRefs = 0;
  if (!fastEncodable(value, 0, bytes, tableRefs) || tableRefs != 0 ||
      bytes > wire::kMaxInlinePayload) {
    return false;
  }
#if RPCJOB_WITH_CUDA
  if (hostToDevice(targets)) return false;
#endif
  payload.clear();
  payload.reserve(bytes);
  wire::FastEncoder encoder(payload);
  std::vector<at::Tensor> none;  // no reference into a table: checked above
  fastEncode(value, encoder, none);
  wire::encodeHeaderInto(header, wire::kOrderBytes + 4 + payload.size(), headerOut);
  return true;
}

std::shared_ptr<OutgoingMessage> makeRawMessage(const wire::Header& header, std::string bytes) {
  auto out = std::make_shared<OutgoingMessage>();
  out->header = wire::encodeHeader(header);
  out->payload.assign(bytes.begin(), bytes.end());
  out->hasPayload = true;
  return out;
}

std::string dtypeProblem(int8_t dtype) {
  if (dtype < 0 || dtype >= static_cast<int8_t>(c10::ScalarType::NumOptions) ||
      dtype == static_cast<int8_t>(c10::ScalarType::Undefined)) {
    return "bad tensor dtype " + std::to_string(dtype);
  }
  if (c10::isQIntType(static_cast<c10::ScalarType>(dtype))) return "quantized dtype";
  return {};
}

std::string prepareRead(const tensorpipe::Descriptor& descriptor, IncomingMessage& in,
                        tensorpipe::Allocation& allocation, std::uint64_t maxBytes) {
  std::string error =
      wire::decodeHeader(descriptor.metadata.data(), descriptor.metadata.size(), in.header);
  if (!error.empty()) return "bad header: " + error;
  if (in.header.deviceHandles)
    return "device handles in a pipe message (only lane frames carry them)";
  if (descriptor.payloads.size() > (in.header.inlinePayload ? 0 : 1)) {
    return "more than one payload";
  }
  if (descriptor.payloads.size() == 1 && descriptor.payloads[0].length > kMaxPayload) {
    return "payload too large";
  }
  // Everything is checked before anything is allocated.
  std::vector<wire::TensorMeta> metas(descriptor.tensors.size());
  std::uint64_t hostBytes =
      descriptor.payloads.empty() ? in.header.payloadLength : descriptor.payloads[0].length;
  for (size_t i = 0; i < descriptor.tensors.size(); ++i) {
    const auto& d = descriptor.tensors[i];
    wire::TensorMeta& meta = metas[i];
    error = wire::decodeTensorMeta(d.metadata.data(), d.metadata.size(), meta);
    if (!error.empty()) return "bad tensor metadata: " + error;
    error = dtypeProblem(meta.dtype);
    if (!error.empty()) return error;
    auto dtype = static_cast<c10::ScalarType>(meta.dtype);
#if !RPCJOB_WITH_CUDA
    if (meta.deviceType != 0) return "CUDA tensor received by a CPU-only worker";
#endif
    int64_t n = wire::numElements(meta.sizes);
    size_t elementSize = c10::elementSize(dtype);
    if (n < 0 || static_cast<uint64_t>(n) > (uint64_t{1} << 40) / elementSize ||
        static_cast<uint64_t>(n) * elementSize != d.length) {
      return "tensor length does not match its shape";
    }
    // Host memory only: a CUDA tensor's bound is its device's memory (an
    // allocation that fails there closes the pipe too). Saturating: a hostile
    // descriptor may list enough tensors to wrap the sum.
    if (meta.deviceType == 0) {
      hostBytes = d.length > UINT64_MAX - hostBytes ? UINT64_MAX : hostBytes + d.length;
    }
  }
  if (hostBytes > maxBytes) {
    return "a message of " + std::to_string(hostBytes) +
           " bytes of host memory is over this worker's limit of " + std::to_string(maxBytes) +
           " bytes (RuntimeOptions::maxMessageBytes, RPCJOB_MAX_MESSAGE_BYTES)";
  }
  if (in.header.inlinePayload) {  // bounded by kMaxInlinePayload, already received
    const char* inlined = descriptor.metadata.data() + in.header.payloadOffset;
    in.payload.assign(inlined, inlined + in.header.payloadLength);
  } else if (descriptor.payloads.size() == 1) {
    in.payload.resize(descriptor.payloads[0].length);
    allocation.payloads.push_back({in.payload.data()});
  }
  in.tensors.reserve(descriptor.tensors.size());
  for (size_t i = 0; i < descriptor.tensors.size(); ++i) {
    const auto& d = descriptor.tensors[i];
    const wire::TensorMeta& meta = metas[i];
    auto dtype = static_cast<c10::ScalarType>(meta.dtype);
#if RPCJOB_WITH_CUDA
    if (meta.deviceType != 0) {
      error = cuda::allocate(&d, meta, dtype, in, allocation);
      if (!error.empty()) return error;
      continue;
    }
#endif
    at::Tensor t;
#if RPCJOB_WITH_CUDA
    t = cuda::pinnedHostTensor(meta.sizes, dtype, d.length);
#endif
    if (!t.defined()) {
      if (d.length >= kLargeReceive) t = host_memory::arenaTensor(meta.sizes, dtype);
      if (!t.defined()) t = at::empty(meta.sizes, at::TensorOptions().dtype(dtype));
    }
    allocation.tensors.push_back({tensorpipe::CpuBuffer{t.data_ptr()}});
    in.tensors.push_back(std::move(t));
  }
  return {};
}

c10::IValue decodeValue(IncomingMessage& in) {
#if RPCJOB_WITH_CUDA
  cuda::finishRead(in);  // the read was enqueued: events on the receive streams
  // After pipe.read: the receive streams' events and what waited for a GPU step.
  if (!in.streams.empty()) trace::point("read.finished");
#endif
  if (in.payload.empty()) return c10::IValue();
  if (wire::isFastPayload(in.payload.data(), in.payload.size())) {
    // The thread's scratch value: a call's argument tuple decodes into storage
    // kept from the last message (one allocation less per message), unless a
    // large one would keep its memory.
    thread_local wire::FastValue v;
    constexpr size_t kKeptItems = 256;
    const auto keepSmall = [] {
      if (v.items.capacity() > kKeptItems) std::vector<wire::FastValue>().swap(v.items);
    };
    const std::string bad =
        wire::decodeFastValue(in.payload.data(), in.payload.size(), in.tensors.size(), v);
    if (!bad.empty()) {
      keepSmall();
      throw badMessage("cannot deserialize the value: " + bad);
    }
    // Made where it is returned: no IValue moved and destroyed in between.
    c10::IValue value = fastDecode(v, in.payload.data(), in.tensors);
    keepSmall();
    return value;
  }
  try {
    return torch::jit::unpickle(in.payload.data(), in.payload.size(), nullptr, in.tensors);
  } catch (const std::exception& e) {
    throw badMessage(std::string("cannot deserialize the value: ") + e.what());
  }
}

}  // namespace rpcjob::runtime
