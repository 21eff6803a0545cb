#pragma once
// The CUDA channels (CUDA build only): TensorPipe's cuda_xth, cuda_ipc, cuda_gdr
// and cuda_basic, and rpcjob's cuda_nvlink. TensorPipe aborts the process when
// some of them meet a host they cannot work on (tensorpipe#412: NVML not seeing
// a GPU, no InfiniBand), so their requirements are checked here first and a
// channel that fails them is "not viable", never created.

#include <memory>
#include <string>
#include <vector>

namespace tensorpipe::channel {
class Context;
}

namespace rpcjob::runtime::cuda {

// Highest priority first.
inline const std::vector<std::string> kCudaChannels = {"cuda_xth", "cuda_nvlink", "cuda_ipc",
                                                       "cuda_gdr", "cuda_basic"};
bool isCudaChannel(const std::string& name);

// The context, or null with `why` saying which requirement failed.
std::shared_ptr<tensorpipe::channel::Context> createCudaChannel(const std::string& name,
                                                                std::string& why);

}  // namespace rpcjob::runtime::cuda
