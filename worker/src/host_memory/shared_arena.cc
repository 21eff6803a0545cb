#include "shared_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <random>

namespace rpcjob::runtime::host_memory {
namespace {

uint64_t randomToken() {
  std::random_device device;  // getrandom(2)
  uint64_t token = 0;
  while (token == 0) token = (uint64_t{device()} << 32) ^ device();
  return token;
}

size_t cacheLimitFromEnv() {
  const char* env = std::getenv("RPCJOB_RECV_CACHE_MB");
  const unsigned long long mb = env != nullptr ? std::strtoull(env, nullptr, 10) : 1024;
  return static_cast<size_t>(mb) << 20;
}

}  // namespace

std::string regionName(uint64_t token, uint64_t id) {
  char name[64];
  std::snprintf(name, sizeof(name), "rpcjob-%016" PRIx64 "-%" PRIu64, token, id);
  return name;
}

SharedArena::SharedArena(size_t cacheBytes) : cacheLimit_(cacheBytes), token_(randomToken()) {}

SharedArena::~SharedArena() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [base, region] : regions_) unmap(base, region);
  regions_.clear();
}

SharedArena& SharedArena::instance() {
  static auto* arena = new SharedArena(cacheLimitFromEnv());
  return *arena;
}

void* SharedArena::mapNew(size_t size, Region& region) {
  region.size = size;
  if (shared_) {
    // A memfd's pages are not accounted when it is sized or mapped (shmem
    // files are VM_NORESERVE), so a region the system cannot back would map
    // fine and fail as an OOM kill mid-copy (a hostile peer announcing a 1 TiB
    // tensor). Ask the overcommit policy first, as a private mapping does.
    void* probe = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (probe == MAP_FAILED) return nullptr;
    ::munmap(probe, size);
    const std::string name = regionName(token_, region.id);
    const int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
    int error = errno;
    if (fd >= 0) {
      void* p = MAP_FAILED;
      if (::ftruncate(fd, static_cast<off_t>(size)) == 0 &&
          ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0) {
        p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      }
      error = errno;
      if (p != MAP_FAILED) {
        // Huge pages where shmem_enabled is "advise" (no effect on "never").
        ::madvise(p, size, MADV_HUGEPAGE);
        region.fd = fd;
        return p;
      }
      ::close(fd);
    }
    // Out of memory or address space: a private mapping would fail too.
    if (error == ENOMEM) return nullptr;
    // Out of descriptors: this region private, the next may be shared again.
    // Anything else (ENOSYS, EPERM from seccomp, EINVAL without sealing): no
    // memfds here, private mappings from now on.
    if (error != EMFILE && error != ENFILE) shared_ = false;
  }
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  // A fresh 400 MB buffer otherwise takes ~100k page faults during the copy.
  ::madvise(p, size, MADV_HUGEPAGE);
  region.fd = -1;
  return p;
}

void SharedArena::unmap(uintptr_t base, const Region& region) {
  ::munmap(reinterpret_cast<void*>(base), region.size);
  if (region.fd >= 0) ::close(region.fd);
}

void* SharedArena::allocate(size_t bytes) {
  const size_t size = std::max<size_t>(1, (bytes + kRegionAlign - 1) / kRegionAlign) * kRegionAlign;
  if (size < bytes) return nullptr;  // overflow
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    Region& region = regions_.at(*it);
    if (region.size == size) {
      const uintptr_t base = *it;
      cache_.erase(it);
      cachedBytes_ -= size;
      region.cached = false;
      return reinterpret_cast<void*>(base);
    }
  }
  Region region;
  region.id = nextId_++;
  void* p = mapNew(size, region);
  if (p == nullptr) return nullptr;
  regions_.emplace(reinterpret_cast<uintptr_t>(p), region);
  count_.store(regions_.size(), std::memory_order_release);
  return p;
}

bool SharedArena::release(void* ptr) {
  const auto base = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = regions_.find(base);
  if (it == regions_.end() || it->second.cached) return false;
  Region& region = it->second;
  if (!region.retired && region.size <= cacheLimit_) {
    while (cachedBytes_ + region.size > cacheLimit_ && !cache_.empty()) {
      auto oldest = regions_.find(cache_.front());
      cachedBytes_ -= oldest->second.size;
      unmap(oldest->first, oldest->second);
      regions_.erase(oldest);
      cache_.erase(cache_.begin());
    }
    region.cached = true;
    cache_.push_back(base);
    cachedBytes_ += region.size;
  } else {
    unmap(base, region);
    regions_.erase(it);
  }
  count_.store(regions_.size(), std::memory_order_release);
  return true;
}

bool SharedArena::retire(const void* ptr) {
  const auto at = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = holding(regions_, at);
  if (it == regions_.end()) return false;
  it->second.retired = true;
  return true;
}

std::optional<SharedSpan> SharedArena::find(const void* ptr, size_t length) const {
  if (count_.load(std::memory_order_acquire) == 0) return std::nullopt;
  const auto at = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = holding(regions_, at);
  if (it == regions_.end()) return std::nullopt;
  const Region& region = it->second;
  const uintptr_t offset = at - it->first;
  if (region.fd < 0 || length > region.size - offset) return std::nullopt;
  return SharedSpan{region.fd, region.id, offset, region.size};
}

size_t SharedArena::cachedBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cachedBytes_;
}

size_t SharedArena::mappedRegions() const {
  return count_.load(std::memory_order_acquire);
}

}  // namespace rpcjob::runtime::host_memory
