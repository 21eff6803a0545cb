#include "autograd/gradient_wire.h"

#include <stdexcept>
#include <vector>

namespace rpcjob::runtime::autograd {

c10::IValue packGradient(const at::Tensor& gradient) {
  if (!gradient.defined() || gradient.layout() != c10::kStrided || gradient.numel() == 0) {
    return gradient;
  }
  std::vector<int64_t> compact = gradient.sizes().vec();
  bool expanded = false;
  for (int64_t d = 0; d < gradient.dim(); ++d) {
    if (gradient.stride(d) == 0 && gradient.size(d) > 1) {
      compact[d] = 1;
      expanded = true;
    }
  }
  if (!expanded) return gradient;
  std::vector<c10::IValue> sizes(gradient.sizes().begin(), gradient.sizes().end());
  return c10::ivalue::Tuple::create(
      {gradient.as_strided(compact, gradient.strides(), gradient.storage_offset()),
       c10::ivalue::Tuple::create(std::move(sizes))});
}

at::Tensor unpackGradient(const c10::IValue& item, const c10::Device& device) {
  if (item.isTensor()) return item.toTensor().to(device, /*non_blocking=*/true);
  const auto bad = [] { return std::invalid_argument("a gradient is not a tensor"); };
  if (!item.isTuple()) throw bad();
  const auto& parts = item.toTupleRef().elements();
  if (parts.size() != 2 || !parts[0].isTensor() || !parts[1].isTuple()) throw bad();
  const at::Tensor& compact = parts[0].toTensor();
  const auto& sizeItems = parts[1].toTupleRef().elements();
  if (static_cast<int64_t>(sizeItems.size()) != compact.dim()) {
    throw std::invalid_argument("an expanded gradient's sizes do not match its dimensions");
  }
  std::vector<int64_t> sizes;
  for (size_t d = 0; d < sizeItems.size(); ++d) {
    if (!sizeItems[d].isInt()) throw bad();
    int64_t size = sizeItems[d].toInt();
    int64_t from = compact.size(static_cast<int64_t>(d));
    if (size < 0 || (from != 1 && from != size)) {
      throw std::invalid_argument("an expanded gradient's sizes do not match its dimensions");
    }
    sizes.push_back(size);
  }
  return compact.to(device, /*non_blocking=*/true).expand(sizes);
}

}  // namespace rpcjob::runtime::autograd
