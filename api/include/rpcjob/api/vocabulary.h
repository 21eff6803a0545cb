#pragma once
// The TensorPipe transports and channels an RpcJob may name, in the default
// priority order (fastest first). The CRD's enums list the same names.

#include <string>
#include <vector>

namespace rpcjob::api {

const std::vector<std::string>& knownTransports();  // shm, ibv, uv
const std::vector<std::string>& knownChannels();    // cuda_ipc, cuda_gdr, cuda_xth, cuda_basic,
                                                    // cma, mpt, xth, basic
bool isKnownTransport(const std::string& name);
bool isKnownChannel(const std::string& name);
// Channels that move CUDA tensors (cuda_*).
bool isCudaChannel(const std::string& name);

}  // namespace rpcjob::api
