#pragma once
// Host tensors in rpcjob's shared-memory arena: the opt-in for CPU tensors that
// travel between processes of one host.
//
// rpcjob_cma, the channel between local workers, reads a tensor that lies in the
// arena with memcpy from a mapping of the sender's memory, at memory speed.
// Received CPU tensors of 4 MiB and more land in the arena, so a tensor a worker
// forwards or returns takes that path by itself, and any other tensor sent to
// such a buffer is pushed: the sender memcpys it into a mapping of the
// receiver's region, one control message more. What is left to
// process_vm_readv(2), whose page-by-page pinning bounds it well below memcpy,
// is a private tensor received into private memory (under 4 MiB).
// emptySharedHost() is for the tensors a program makes itself and sends: they
// skip the push's extra message, and travel at memcpy speed below 4 MiB too.
//
// Memory: each tensor takes a region of whole 2 MiB units (meant for tensors of
// a MiB and more; use at::empty for small ones), backed by a memfd. Freed
// regions are kept for reuse up to RPCJOB_RECV_CACHE_MB MiB (default 1024),
// then unmapped. A peer that read from (or pushed into) a region keeps it mapped until its own
// cache (RPCJOB_PEER_MAP_CACHE_MB, default 2048) drops it, so the memory of a
// freed region may outlive it there. Where memfds are not available
// (seccomp), the tensors are private memory and travel as any other.
//
// Thread-safe.

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>

namespace rpcjob::runtime {

// An uninitialised contiguous CPU tensor of `sizes` in the shared arena.
// options: dtype (the rest must be CPU, strided, no pinned memory, or this
// throws std::invalid_argument).
at::Tensor emptySharedHost(at::IntArrayRef sizes, at::TensorOptions options = {});

// Whether `t`'s bytes lie in a shared region of this process's arena (what
// rpcjob_cma reads with memcpy).
bool isSharedHost(const at::Tensor& t);

inline constexpr size_t kSharedHostAllocatorMinBytes = size_t{4} << 20;

// Opt-in, for the whole process and until it exits: from now on every CPU
// tensor of `minBytes` and more that libtorch allocates (at::empty, at::ones,
// torch::randn, the results of operations) lives in the arena, as if made by
// emptySharedHost(); smaller ones stay with libtorch's allocator. A program
// that sends large CPU tensors to workers on its host calls it once, before
// it makes them (RuntimeOptions::sharedHostAllocator, RPCJOB_SHARED_HOST_ALLOCATOR=1,
// does it in Runtime::start()). Calling it again changes minBytes.
// Costs: the arena's rounding to 2 MiB units, a memfd per region (capped at
// half of RLIMIT_NOFILE; beyond it tensors come from libtorch's allocator
// again), and regions shared with children forked later rather than copied.
// Throws std::invalid_argument for minBytes == 0 and std::runtime_error when
// another CPU allocator of higher priority is set in libtorch.
void useSharedHostAllocator(size_t minBytes = kSharedHostAllocatorMinBytes);

// The threshold in use, or 0 when useSharedHostAllocator() was not called.
size_t sharedHostAllocatorMinBytes();

// How this process's receives of host tensors from workers on its host moved
// their bytes, counted since it started (successful receives over rpcjob_cma):
// which path a transfer took, e.g. for a benchmark to say why a round trip ran at
// process_vm_readv's speed rather than memory speed.
struct HostReceivePaths {
  uint64_t sharedReads = 0;  // memcpy from a mapping of the sender's region
  uint64_t pushedReads = 0;  // the sender wrote into our region (a push)
  uint64_t cmaReads = 0;     // process_vm_readv
  uint64_t sharedBytes = 0;
  uint64_t pushedBytes = 0;
  uint64_t cmaBytes = 0;
};
HostReceivePaths hostReceivePaths();

}  // namespace rpcjob::runtime
