#pragma once
// A CUDA runtime call's failure as the errors that the CUDA parts return say it
// (CUDA build only): "<call>: <CUDA's description>".

#include <cuda_runtime.h>

#include <string>

namespace rpcjob::runtime::cuda {

inline std::string cudaWhat(const char* call, cudaError_t e) {
  return std::string(call) + ": " + cudaGetErrorString(e);
}

}  // namespace rpcjob::runtime::cuda
