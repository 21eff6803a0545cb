// The only translation unit that includes the pickler (seconds of compile time).
#include "serialization.h"

#include <ATen/ops/empty.h>
#include <tensorpipe/tensorpipe.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include "rpcjob/runtime/errors.h"

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

}  // namespace

tensorpipe::Message OutgoingMessage::toTensorpipe() {
  tensorpipe::Message m;
  m.metadata = header;
  if (hasPayload) {
    tensorpipe::Message::Payload p;
    p.data = payload.data();
    p.length = payload.size();
    m.payloads.push_back(std::move(p));
  }
  for (size_t i = 0; i < tensors.size(); ++i) {
    tensorpipe::Message::Tensor t;
    // CPU only in this build; the CUDA build sets a CudaBuffer with the stream here.
    t.buffer = tensorpipe::CpuBuffer{tensors[i].data_ptr()};
    t.length = tensors[i].nbytes();
    t.metadata = tensorMeta[i];
    m.tensors.push_back(std::move(t));
  }
  return m;
}

std::shared_ptr<OutgoingMessage> makeMessage(const wire::Header& header, const c10::IValue* value) {
  auto out = std::make_shared<OutgoingMessage>();
  out->header = wire::encodeHeader(header);
  if (value == nullptr) return out;
  std::vector<at::Tensor> table;
  try {
    out->payload = torch::jit::pickle(*value, &table);
  } catch (const std::exception& e) {
    throw badMessage(std::string("cannot serialize the value: ") + e.what());
  }
  out->hasPayload = true;
  out->tensors.reserve(table.size());
  for (auto& t : table) {
    if (t.layout() != c10::kStrided) throw badMessage("only strided (dense) tensors can be sent");
    if (t.is_quantized()) throw badMessage("quantized tensors cannot be sent");
    if (!t.device().is_cpu()) throw badMessage("CUDA tensors need the CUDA build");
    // A view sends only the bytes it covers; a non-contiguous one is compacted.
    at::Tensor c = t.is_contiguous() ? t : t.contiguous();
    out->tensorMeta.push_back(wire::encodeTensorMeta(metaOf(c)));
    out->tensors.push_back(std::move(c));
  }
  return out;
}

std::shared_ptr<OutgoingMessage> makeRawMessage(const wire::Header& header, std::string bytes) {
  auto out = std::make_shared<OutgoingMessage>();
  out->header = wire::encodeHeader(header);
  out->payload.assign(bytes.begin(), bytes.end());
  out->hasPayload = true;
  return out;
}

std::string prepareRead(const tensorpipe::Descriptor& descriptor, IncomingMessage& in,
                        tensorpipe::Allocation& allocation) {
  std::string error =
      wire::decodeHeader(descriptor.metadata.data(), descriptor.metadata.size(), in.header);
  if (!error.empty()) return "bad header: " + error;
  if (descriptor.payloads.size() > 1) return "more than one payload";
  if (descriptor.payloads.size() == 1) {
    if (descriptor.payloads[0].length > kMaxPayload) return "payload too large";
    in.payload.resize(descriptor.payloads[0].length);
    allocation.payloads.push_back({in.payload.data()});
  }
  in.tensors.reserve(descriptor.tensors.size());
  for (const auto& d : descriptor.tensors) {
    wire::TensorMeta meta;
    error = wire::decodeTensorMeta(d.metadata.data(), d.metadata.size(), meta);
    if (!error.empty()) return "bad tensor metadata: " + error;
    if (meta.dtype < 0 || meta.dtype >= static_cast<int8_t>(c10::ScalarType::NumOptions) ||
        meta.dtype == static_cast<int8_t>(c10::ScalarType::Undefined)) {
      return "bad tensor dtype " + std::to_string(meta.dtype);
    }
    auto dtype = static_cast<c10::ScalarType>(meta.dtype);
    if (c10::isQIntType(dtype)) return "quantized dtype";
    if (meta.deviceType != 0) return "CUDA tensor received by a CPU-only worker";
    int64_t n = wire::numElements(meta.sizes);
    size_t elementSize = c10::elementSize(dtype);
    if (n < 0 || static_cast<uint64_t>(n) > (uint64_t{1} << 40) / elementSize ||
        static_cast<uint64_t>(n) * elementSize != d.length) {
      return "tensor length does not match its shape";
    }
    at::Tensor t = at::empty(meta.sizes, at::TensorOptions().dtype(dtype));
    allocation.tensors.push_back({tensorpipe::CpuBuffer{t.data_ptr()}});
    in.tensors.push_back(std::move(t));
  }
  return {};
}

c10::IValue decodeValue(IncomingMessage& in) {
  if (in.payload.empty()) return c10::IValue();
  try {
    return torch::jit::unpickle(in.payload.data(), in.payload.size(), nullptr, in.tensors);
  } catch (const std::exception& e) {
    throw badMessage(std::string("cannot deserialize the value: ") + e.what());
  }
}

}  // namespace rpcjob::runtime
