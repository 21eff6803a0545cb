#include <cstdint>

#include "nvlink_copy.h"

namespace rpcjob::runtime::cuda {
namespace {

__global__ void pullCopy(uint4* __restrict__ dst, const uint4* __restrict__ src, size_t count) {
  size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // Four loads in flight per thread before the stores.
  for (; i + 3 * stride < count; i += 4 * stride) {
    uint4 a = src[i];
    uint4 b = src[i + stride];
    uint4 c = src[i + 2 * stride];
    uint4 d = src[i + 3 * stride];
    dst[i] = a;
    dst[i + stride] = b;
    dst[i + 2 * stride] = c;
    dst[i + 3 * stride] = d;
  }
  for (; i < count; i += stride) dst[i] = src[i];
}

}  // namespace

bool launchPullCopy(void* dst, const void* src, size_t length, int smCount, cudaStream_t stream) {
  if ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) | length) % 16 != 0) {
    return false;
  }
  size_t count = length / 16;
  int threads = 512;
  int blocks = smCount > 0 ? smCount * 2 : 264;
  pullCopy<<<blocks, threads, 0, stream>>>(static_cast<uint4*>(dst), static_cast<const uint4*>(src),
                                           count);
  return cudaGetLastError() == cudaSuccess;
}

}  // namespace rpcjob::runtime::cuda
