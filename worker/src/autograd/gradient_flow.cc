// What libtorch's engine does to a gradient between two nodes (gradient_flow.h).
#include "autograd/gradient_flow.h"

#include <ATen/TensorSubclassLikeUtils.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/function.h>

#include <sstream>
#include <utility>

namespace rpcjob::runtime::autograd {
namespace {

namespace ta = torch::autograd;
using Stream = OptionalStream;

// The engine's InputBuffer::accumulate: in place into a buffer nobody else
// holds, else out of place (a sparse buffer adds onto the dense gradient).
bool canAccumulateInPlace(const at::Tensor& v) {
  return !(at::isTensorSubclassLike(v) || v._is_zerotensor() || v.is_nested()) &&
         v.is_non_overlapping_and_dense() && v.use_count() == 1 && v.has_storage() &&
         v.storage().use_count() == 1;
}

void accumulate(at::Tensor& slot, at::Tensor&& var) {
  if (slot.is_sparse() || slot.is_sparse_csr()) {
    slot = canAccumulateInPlace(var) ? var.add_(slot) : var.add(slot);
  } else if (canAccumulateInPlace(slot) && !var.is_sparse() && !var.is_sparse_csr()) {
    slot.add_(var);
  } else {
    slot = slot.add(var);
  }
}

// The caching allocator must not reuse `var`'s memory before `stream` used it.
void recordOn(const at::Tensor& var, const c10::Stream& stream) {
  c10::impl::VirtualGuardImpl impl(stream.device_type());
  if (var.is_sparse()) {
    recordOn(var._indices(), stream);
    recordOn(var._values(), stream);
  } else if (var.has_storage()) {
    impl.recordDataPtrOnStream(var.storage().data_ptr(), stream);
  }
}

}  // namespace

OptionalStream nodeStream(const ta::Node& node) {
  for (uint32_t i = 0; i < node.num_inputs(); ++i) {
    const auto& meta = node.input_metadata(i);
    if (meta.device().type() == kStreamDevice) return meta.stream();
  }
  return std::nullopt;
}

void validateOutputs(const std::vector<ta::Edge>& edges, std::vector<at::Tensor>& grads,
                     const std::function<std::string(const std::string&)>& format) {
  if (grads.size() != edges.size()) {
    std::ostringstream ss;
    ss << "invalid number of gradients - expected " << edges.size() << ", but got " << grads.size();
    TORCH_CHECK(false, format(ss.str()));
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    const ta::Edge& edge = edges[i];
    at::Tensor& grad = grads[i];
    if (!edge.is_valid() || !grad.defined()) continue;
    const auto& meta = edge.function->input_metadata(edge.input_nr);
    if (!meta.is_same_shape(grad)) {
      if (!meta.is_expandable_to_shape(grad)) {
        TORCH_CHECK(false, format(meta.incompatible_shape_error_message(i, grad).str()));
      }
      grad = meta.reduce_grad(grad);
    }
    const at::ScalarType expected = c10::typeMetaToScalarType(meta.dtype());
    TORCH_CHECK(c10::isFloatingType(grad.scalar_type()) ||
                c10::isComplexType(expected) == c10::isComplexType(grad.scalar_type()));
    if (grad.scalar_type() != expected) grad = grad.to(expected);
    if (grad.layout() != meta.layout()) {
      const at::Layout l = meta.layout();
      const bool sparseMeta = l == at::kSparse || l == at::kSparseCsr || l == at::kSparseCsc ||
                              l == at::kSparseBsr || l == at::kSparseBsc;
      if (!grad.is_sparse() && !(grad.layout() == at::kStrided && sparseMeta)) {
        std::ostringstream ss;
        ss << "invalid gradient at index " << i << " - expected layout " << meta.layout()
           << " but got " << grad.layout();
        TORCH_CHECK(false, format(ss.str()));
      }
    }
    if (grad.device() != meta.device() &&
        !(meta.is_tensor_subclass() || grad.unsafeGetTensorImpl()->is_python_dispatch())) {
      if (grad.dim() != 0) {
        std::ostringstream ss;
        ss << "invalid gradient at index " << i << " - expected device " << meta.device()
           << " but got " << grad.device();
        TORCH_CHECK(false, format(ss.str()));
      }
      grad = grad.to(meta.device());
    }
    TORCH_INTERNAL_ASSERT(c10::isFloatingType(grad.scalar_type()) ||
                          c10::isComplexType(grad.scalar_type()));
  }
}

void orderStreams(const c10::Stream& signaller, const c10::Stream& waiter) {
  c10::Event event(signaller.device_type());
  event.record(signaller);
  event.block(waiter);
}

void addInput(std::vector<at::Tensor>& buffer, size_t pos, at::Tensor&& var, const Stream& producer,
              const Stream& consumer) {
  if (!var.defined()) return;
  Stream accumulateOn;
  if (var.device().type() == kStreamDevice) {
    const c10::Device device = var.device();
    const bool onProducer = producer && producer->device() == device;
    const bool onConsumer = consumer && consumer->device() == device;
    if (onProducer && onConsumer) {
      accumulateOn = consumer;
      if (*consumer != *producer) {
        orderStreams(*producer, *consumer);
        recordOn(var, *consumer);
      }
    } else {
      c10::impl::VirtualGuardImpl impl(kStreamDevice);
      Stream syncWith;
      if (onConsumer) {
        accumulateOn = consumer;
        syncWith = impl.getDefaultStream(device);
      } else if (onProducer) {
        accumulateOn = impl.getDefaultStream(device);
        syncWith = producer;
      } else {
        accumulateOn = impl.getDefaultStream(device);
      }
      if (syncWith && *syncWith != *accumulateOn) {
        c10::DeviceGuard deviceGuard(syncWith->device());
        orderStreams(*syncWith, *accumulateOn);
        recordOn(var, *accumulateOn);
      }
    }
  }
  at::Tensor& slot = buffer[pos];
  if (!slot.defined()) {
    slot = std::move(var);
  } else if (accumulateOn) {
    c10::StreamGuard guard(*accumulateOn);
    accumulate(slot, std::move(var));
  } else {
    c10::DeviceGuard guard(var.device());
    accumulate(slot, std::move(var));
  }
}

}  // namespace rpcjob::runtime::autograd
