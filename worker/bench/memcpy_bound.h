#pragma once
// The host's memory-copy bandwidth: the bound of a CPU round trip of a large
// tensor between two processes on one host. rpcjob_cma moves each direction
// with one copy (process_vm_readv from the sender's tensor into the receiver's),
// split over its threads, so a round trip of B bytes copies 2 x B bytes, and at
// best takes 2 x B / (the best bandwidth a copy of B bytes reaches with that
// many threads). Measured in the same run as the round trip it bounds.

#include <cstddef>

namespace rpcjob::bench {

struct CopyBound {
  double gbps = 0;  // the best copy bandwidth, 1e9 bytes/s (bytes copied per second)
  int threads = 0;  // with this many threads
};

// Best of `rounds` copies of `bytes` between two buffers touched beforehand,
// with 1 and with `threads` threads (each copying its own contiguous slice).
CopyBound measureCopyBound(size_t bytes, int threads, int rounds = 5);

// The same copies with threads started once, before any is timed (the calling
// thread copies the first slice, threads - 1 spinning helpers the others): the
// fairer bound where a copy takes well under a millisecond, since
// measureCopyBound() starts its threads inside each timed copy (tens of
// microseconds, a sizeable part of a 4 MiB copy). The helpers spin on the
// start signal: the bound assumes no wake-up cost either.
CopyBound measureCopyBoundPooled(size_t bytes, int threads, int rounds = 5);

// A round trip's two copies without the messages around them: two groups of
// `threads` spinning threads (fewer where the cores cannot hold both) pass the
// bytes back and forth, group A from buffer a into b, then group B from b into
// a, timed per pair. So each copy reads lines the other group just wrote and
// writes lines the other group just read, as the two processes of a round trip
// do (the pooled bound above copies the same hot buffers on the same cores).
// gbps = 2 x bytes / the best pair's time: the round trip's bound is
// 2 x bytes / gbps, as for the others.
CopyBound measureCopyPingPong(size_t bytes, int threads, int rounds = 5);

// The same for process_vm_readv(2) from this process into a buffer of its own
// (rpcjob_cma's copy: the kernel pins the source's pages and copies page by
// page, which on the hosts measured so far runs well below memcpy). Not the
// bound of record: it says how much of the gap to the memcpy bound is the
// syscall's own cost rather than the channel's. The destination is mapped like
// the runtime's large receive buffers (transparent huge pages), the source like
// a tensor from libtorch's allocator (plain pages).
CopyBound measureCmaCopy(size_t bytes, int threads, int rounds = 5);

// The copy channel's threads, as rpcjob_cma picks them: RPCJOB_MTCMA_THREADS,
// else min(8, hardware threads).
int copyChannelThreads();

}  // namespace rpcjob::bench
