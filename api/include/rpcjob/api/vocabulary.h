#pragma once
// The TensorPipe transports and channels an RpcJob may name, in the default
// priority order (fastest first). The CRD's enums list the same names.

#include <string>
#include <vector>

namespace rpcjob::api {

const std::vector<std::string>& knownTransports();  // shm, ibv, uv
// cuda_nvlink and rpcjob_cma are rpcjob's own channels (worker/src/cuda/nvlink_channel.h,
// worker/src/channels/mtcma/): one-copy NVLink and multi-threaded CMA, each ranked above
// the stock channel it replaces; a peer without them falls back to that one.
const std::vector<std::string>& knownChannels();  // cuda_nvlink, cuda_ipc, cuda_gdr, cuda_xth,
                                                  // cuda_basic, rpcjob_cma, cma, mpt, xth, basic
bool isKnownTransport(const std::string& name);
bool isKnownChannel(const std::string& name);
// Channels that move CUDA tensors (cuda_*).
bool isCudaChannel(const std::string& name);

}  // namespace rpcjob::api
