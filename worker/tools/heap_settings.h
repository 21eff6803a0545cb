#pragma once
// How rpcjob-worker's process keeps its freed heap (glibc malloc).

namespace rpcjob::worker {

// glibc gives the free top of its heap back to the kernel once it exceeds
// 128 KB, and a burst of async calls allocates and frees megabytes (a future,
// a message and its values per call): each burst then page-faulted its memory
// back in. On the 2-core development machine that was 9 % of the caller's time
// in the kernel's page-table updates and 11 % in _int_malloc. Keeps up to
// 256 MiB of freed heap and grows it 16 MiB at a time. Call before starting
// threads. SDK programs get the same with
// GLIBC_TUNABLES=glibc.malloc.trim_threshold=268435456:glibc.malloc.top_pad=16777216.
// Returns false where the C library refused (or is not glibc).
bool keepFreedHeap();

}  // namespace rpcjob::worker
