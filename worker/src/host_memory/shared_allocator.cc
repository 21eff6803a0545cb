#include "shared_allocator.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <sys/resource.h>
#include <torch/version.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

#include "shared_arena.h"

// PyTorch 2.3 made Allocator::allocate non-const and added copy_data; the
// builds here are Debian's 1.13 (CPU) and PyTorch 2.11's libtorch (GPU).
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define RPCJOB_ALLOCATE_CONST
#define RPCJOB_HAS_COPY_DATA 1
#else
#define RPCJOB_ALLOCATE_CONST const
#define RPCJOB_HAS_COPY_DATA 0
#endif

namespace rpcjob::runtime::host_memory {
namespace {

// Priority 1: above libtorch's default CPU allocator (0), so that setting ours
// cannot be ignored for a tie with it; a higher one someone set is detected.
constexpr uint8_t kPriority = 1;

std::atomic<uint64_t> arenaAllocations{0};
std::atomic<uint64_t> overflowed{0};

// The replaced allocator's raw deleter: what rawDelete hands what is not ours.
c10::DeleterFnPtr replacedRawDeleter = nullptr;

void deleteRegion(void* p) {
  SharedArena::instance().release(p);
}

void rawDelete(void* p) {
  if (!SharedArena::instance().release(p)) replacedRawDeleter(p);
}

uint64_t softFdLimit() {
  rlimit limit{};
  return getrlimit(RLIMIT_NOFILE, &limit) == 0 ? static_cast<uint64_t>(limit.rlim_cur) : 0;
}

class SharedAllocator final : public c10::Allocator {
 public:
  explicit SharedAllocator(c10::Allocator* replaced) : replaced_(replaced) {}

  void setMinBytes(size_t minBytes) { minBytes_.store(minBytes, std::memory_order_relaxed); }
  size_t minBytes() const { return minBytes_.load(std::memory_order_relaxed); }
  bool replaces(const c10::Allocator* other) const { return other == replaced_; }

  c10::DataPtr allocate(size_t n) RPCJOB_ALLOCATE_CONST override {
    // The path of every small CPU tensor in the process: one relaxed load.
    if (n < minBytes_.load(std::memory_order_relaxed)) return replaced_->allocate(n);
    SharedArena& arena = SharedArena::instance();
    if (arena.shared() && underCap(arena)) {
      if (void* p = arena.allocate(n)) {
        // Out of descriptors below the cap, the arena maps a region privately:
        // such a tensor travels as any other, and is counted so.
        (arena.find(p, 0) ? arenaAllocations : overflowed).fetch_add(1, std::memory_order_relaxed);
        return {p, p, &deleteRegion, c10::Device(c10::DeviceType::CPU)};
      }
    }
    overflowed.fetch_add(1, std::memory_order_relaxed);
    return replaced_->allocate(n);
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return replacedRawDeleter != nullptr ? &rawDelete : nullptr;
  }

#if RPCJOB_HAS_COPY_DATA
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
#endif

 private:
  // A syscall per large allocation, against the region's own mapping: the
  // limit may change (Runtime::start raises it).
  static bool underCap(const SharedArena& arena) {
    return arena.mappedRegions() < regionCap(softFdLimit());
  }

  c10::Allocator* const replaced_;
  std::atomic<size_t> minBytes_{0};
};

std::mutex installMu;
SharedAllocator* installed = nullptr;  // never freed: tensors it made may outlive anything

}  // namespace

void installSharedAllocator(size_t minBytes) {
  if (minBytes == 0) {
    throw std::invalid_argument("useSharedHostAllocator: minBytes must be positive");
  }
  std::lock_guard<std::mutex> lock(installMu);
  if (installed == nullptr) {
    c10::Allocator* current = c10::GetCPUAllocator();
    replacedRawDeleter = current->raw_deleter();
    installed = new SharedAllocator(current);
  }
  installed->setMinBytes(minBytes);
  c10::Allocator* current = c10::GetCPUAllocator();
  if (current == installed) return;
  if (!installed->replaces(current)) {
    throw std::runtime_error(
        "useSharedHostAllocator: libtorch's CPU allocator was replaced by someone else since "
        "rpcjob's was made; rpcjob's would not see their allocations");
  }
  // libtorch reads this pointer without a lock: a thread allocating meanwhile
  // gets either allocator, and each tensor frees through its own deleter.
  c10::SetCPUAllocator(installed, kPriority);
  if (c10::GetCPUAllocator() != installed) {
    throw std::runtime_error(
        "useSharedHostAllocator: libtorch kept another CPU allocator set with a priority above " +
        std::to_string(kPriority));
  }
}

size_t sharedAllocatorMinBytes() {
  std::lock_guard<std::mutex> lock(installMu);
  return installed != nullptr && c10::GetCPUAllocator() == installed ? installed->minBytes() : 0;
}

SharedAllocatorCounters sharedAllocatorCounters() {
  return {arenaAllocations.load(std::memory_order_relaxed),
          overflowed.load(std::memory_order_relaxed)};
}

}  // namespace rpcjob::runtime::host_memory
