#pragma once
// Host tensors in rpcjob's shared-memory arena: the opt-in for CPU tensors that
// travel between processes of one host.
//
// rpcjob_cma, the channel between local workers, reads a tensor that lies in the
// arena with memcpy from a mapping of the sender's memory, at memory speed;
// any other CPU tensor it reads with process_vm_readv(2), whose page-by-page
// pinning bounds it well below memcpy (about 77 % of the memcpy bound for a
// 400 MB round trip on the 16-core GPU host). Received CPU tensors of 4 MiB and
// more already land in the arena, so a tensor a worker forwards or returns
// takes the fast path by itself; emptySharedHost() is for the tensors a program
// makes itself and sends.
//
// Memory: each tensor takes a region of whole 2 MiB units (meant for tensors of
// a MiB and more; use at::empty for small ones), backed by a memfd. Freed
// regions are kept for reuse up to RPCJOB_RECV_CACHE_MB MiB (default 1024),
// then unmapped. A peer that read from a region keeps it mapped until its own
// cache (RPCJOB_PEER_MAP_CACHE_MB, default 2048) drops it, so the memory of a
// freed region may outlive it there. Where memfds are not available
// (seccomp), the tensors are private memory and travel as any other.
//
// Thread-safe.

#include <ATen/core/Tensor.h>

namespace rpcjob::runtime {

// An uninitialised contiguous CPU tensor of `sizes` in the shared arena.
// options: dtype (the rest must be CPU, strided, no pinned memory, or this
// throws std::invalid_argument).
at::Tensor emptySharedHost(at::IntArrayRef sizes, at::TensorOptions options = {});

// Whether `t`'s bytes lie in a shared region of this process's arena (what
// rpcjob_cma reads with memcpy).
bool isSharedHost(const at::Tensor& t);

}  // namespace rpcjob::runtime
