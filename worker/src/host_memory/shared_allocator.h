#pragma once
// The opt-in CPU allocator behind useSharedHostAllocator() (shared_host.h):
// libtorch's CPU allocations of `minBytes` and more come from the process's
// arena (shared_arena.h), everything else from the allocator it replaced.
//
// Why: rpcjob_cma reads a tensor in the arena with memcpy from a mapping, any
// other with process_vm_readv, whose page pinning made a 4 MB round trip take
// 0.53-0.64 ms on the GPU hosts against 0.28-0.38 ms from the arena
// (benchmarks/results/2026-11-25-h100x1-session14.md, 2026-11-28-h200x2-x4.md).
// Since rpcjob_cma's push, a plain tensor received into an arena buffer (4 MiB
// and more) travels by memcpy too; the allocator still spares the push's extra
// control message, and reaches tensors sent to buffers below 4 MiB.
// emptySharedHost() only reaches the tensors a program makes with it; this
// reaches the ones it makes with at::ones, torch::randn or any operation.
//
// Descriptors: each region holds its memfd open, so regions in use (and
// cached) are capped at half of RLIMIT_NOFILE's soft limit (read at each large
// allocation: Runtime::start raises it); an allocation beyond the cap, or
// one the arena cannot map as a memfd, goes to the replaced allocator and
// travels by process_vm_readv as before. Counted (SharedAllocatorCounters).

#include <cstddef>
#include <cstdint>

namespace c10 {
struct Allocator;
}

namespace rpcjob::runtime::host_memory {

// Process-wide, since start (allocations below minBytes are not counted: they
// are every small tensor's, and a shared counter would slow them down).
struct SharedAllocatorCounters {
  uint64_t arenaAllocations = 0;  // at or above minBytes, in the arena's shared memory
  // At or above minBytes, yet not in shared memory: the replaced allocator's
  // (past the descriptor cap), or a region the arena mapped privately (out of
  // descriptors below it).
  uint64_t overflowed = 0;
};

// Installs the allocator for the whole process (the first call) or changes its
// threshold (later calls); minBytes == 0 is std::invalid_argument. Throws
// std::runtime_error when libtorch keeps another CPU allocator of a higher
// priority (it would ignore ours silently).
void installSharedAllocator(size_t minBytes);
// 0 when not installed.
size_t sharedAllocatorMinBytes();
SharedAllocatorCounters sharedAllocatorCounters();

// How many arena regions (each an open memfd) the allocator lets the process
// hold, from RLIMIT_NOFILE's soft limit: the rest stays for sockets and files.
inline uint64_t regionCap(uint64_t limitSoft) {
  return limitSoft / 2;
}

}  // namespace rpcjob::runtime::host_memory
