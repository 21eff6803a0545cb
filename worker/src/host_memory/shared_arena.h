#pragma once
// The shared-memory arena for large host tensors: regions backed by memfd
// (memfd_create(2)), so that a peer process on this host can map them and copy
// with memcpy instead of process_vm_readv (rpcjob_cma, channels/mtcma/).
//
// Each region is a multiple of 2 MiB, has an id unique in this process (never
// reused) and a memfd named "rpcjob-<token>-<id>", where <token> is this
// process's random 64-bit token (16 hex digits): a peer that opens the fd
// through /proc/<pid>/fd checks the name it got, so a recycled fd number or pid
// cannot hand it someone else's file. The memfd is sealed against shrinking
// and growing (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) before it is mapped:
// a peer's mapping can never lose pages under it (no SIGBUS), and the seals
// prove to the peer that the file is a memfd. Where memfd_create or sealing is
// not available (old kernels, seccomp), a region is a private anonymous mapping
// (transparent huge pages advised) that lookups do not report: the channel then
// reads it with process_vm_readv, as before.
//
// Freed regions stay mapped in a cache bounded in bytes (oldest unmapped
// first), so that the next tensor of the same size lands in memory already
// mapped and faulted in, as PyTorch's caching allocators do.
//
// Thread-safe. find() is called on every send of a large CPU tensor: a map
// lookup under a mutex, nothing at all while the arena holds no region.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace rpcjob::runtime::host_memory {

inline constexpr size_t kRegionAlign = size_t{2} << 20;

// Where a range lies in a shared region: what a peer needs to map it.
struct SharedSpan {
  int fd = -1;          // this process's descriptor of the region's memfd
  uint64_t id = 0;      // the region's id (its memfd is named after it)
  uint64_t offset = 0;  // of the range's start from the region's start
  uint64_t regionSize = 0;
};

// "rpcjob-<16 hex digits of token>-<id in decimal>": the name of a region's memfd.
std::string regionName(uint64_t token, uint64_t id);

class SharedArena {
 public:
  // cacheBytes: how much freed memory stays mapped for reuse.
  explicit SharedArena(size_t cacheBytes);
  ~SharedArena();  // unmaps the cache; regions still in use must have been released
  SharedArena(const SharedArena&) = delete;
  SharedArena& operator=(const SharedArena&) = delete;

  // The process's arena, never destroyed (tensor deleters may run at exit); its
  // cache is RPCJOB_RECV_CACHE_MB MiB (default 1024).
  static SharedArena& instance();

  // A region of at least `bytes` (rounded up to kRegionAlign), read-write: from
  // the cache when one of that size is there, else new. nullptr when the
  // system has no memory to map. bytes == 0 gets a region of kRegionAlign.
  void* allocate(size_t bytes);
  // Gives back a region allocate() returned (its start); the cache keeps it or
  // unmaps it. Anything else is ignored: false.
  bool release(void* base);
  // The region holding `ptr` never goes back to the cache: release() unmaps it
  // and closes its memfd. For a region a peer may still write into (a receive
  // that failed while the sender pushed into it, rpcjob_cma): the pages then
  // live on only in the peer's mapping, never under another tensor. False when
  // `ptr` lies in no region.
  bool retire(const void* ptr);

  // The shared region [ptr, ptr + length) lies in entirely, if any (length 0:
  // the byte at ptr). Regions in the cache count too: callers only ask about
  // memory they hold.
  std::optional<SharedSpan> find(const void* ptr, size_t length) const;

  uint64_t token() const { return token_; }
  // Whether regions are memfds (false: private mappings, find() never answers).
  bool shared() const { return shared_; }
  size_t cachedBytes() const;
  size_t mappedRegions() const;

 private:
  struct Region {
    size_t size = 0;
    int fd = -1;  // -1: a private mapping
    uint64_t id = 0;
    bool cached = false;
    bool retired = false;  // retire(): unmapped when released, never cached
  };
  // The entry of the region holding address `at` (regions.end(): none); mu_ held.
  template <typename Regions>
  static auto holding(Regions& regions, uintptr_t at) {
    auto it = regions.upper_bound(at);
    if (it == regions.begin()) return regions.end();
    --it;
    return at - it->first < it->second.size ? it : regions.end();
  }
  void* mapNew(size_t size, Region& region);
  void unmap(uintptr_t base, const Region& region);

  const size_t cacheLimit_;
  const uint64_t token_;
  bool shared_ = true;  // until memfd_create or sealing fails once
  mutable std::mutex mu_;
  std::map<uintptr_t, Region> regions_;  // by start, in use and cached
  std::vector<uintptr_t> cache_;         // cached starts, oldest first
  size_t cachedBytes_ = 0;
  uint64_t nextId_ = 1;
  std::atomic<size_t> count_{0};  // regions_.size(), read without the lock
};

}  // namespace rpcjob::runtime::host_memory
