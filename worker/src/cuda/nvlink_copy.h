#pragma once
// The copy kernel of the cuda_nvlink channel: SMs of the receiving GPU pull from
// the peer's memory over NVLink (an alternative to the copy engines).
#include <cuda_runtime.h>

#include <cstddef>

namespace rpcjob::runtime::cuda {

// Copies `length` bytes on `stream`; false when the kernel cannot (then use
// cudaMemcpyAsync).
bool launchPullCopy(void* dst, const void* src, size_t length, int smCount, cudaStream_t stream);

}  // namespace rpcjob::runtime::cuda
