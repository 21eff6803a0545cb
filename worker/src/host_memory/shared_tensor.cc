#include "shared_tensor.h"

#include <ATen/ops/from_blob.h>
#include <c10/util/safe_numerics.h>

#include <new>
#include <stdexcept>

#include "rpcjob/runtime/shared_host.h"
#include "shared_allocator.h"
#include "shared_arena.h"

namespace rpcjob::runtime {
namespace host_memory {

at::Tensor arenaTensor(at::IntArrayRef sizes, c10::ScalarType dtype) {
  uint64_t count = 1;
  for (int64_t s : sizes) {
    if (s < 0) throw std::invalid_argument("emptySharedHost: negative size");
    if (c10::mul_overflows(count, static_cast<uint64_t>(s), &count)) return {};
  }
  uint64_t bytes = 0;
  if (c10::mul_overflows(count, static_cast<uint64_t>(c10::elementSize(dtype)), &bytes)) return {};
  void* p = SharedArena::instance().allocate(static_cast<size_t>(bytes));
  if (p == nullptr) return {};
  return at::from_blob(
      p, sizes, [](void* q) { SharedArena::instance().release(q); },
      at::TensorOptions().dtype(dtype));
}

}  // namespace host_memory

at::Tensor emptySharedHost(at::IntArrayRef sizes, at::TensorOptions options) {
  if (options.device().type() != c10::DeviceType::CPU || options.layout() != c10::kStrided ||
      options.pinned_memory()) {
    throw std::invalid_argument("emptySharedHost: only strided CPU tensors live in the arena");
  }
  at::Tensor t = host_memory::arenaTensor(sizes, c10::typeMetaToScalarType(options.dtype()));
  if (!t.defined()) throw std::bad_alloc();
  return t;
}

bool isSharedHost(const at::Tensor& t) {
  if (!t.defined() || !t.device().is_cpu() || !t.has_storage()) return false;
  const auto& storage = t.storage();
  return host_memory::SharedArena::instance().find(storage.data(), storage.nbytes()).has_value();
}

void useSharedHostAllocator(size_t minBytes) {
  host_memory::installSharedAllocator(minBytes);
}

size_t sharedHostAllocatorMinBytes() {
  return host_memory::sharedAllocatorMinBytes();
}

}  // namespace rpcjob::runtime
