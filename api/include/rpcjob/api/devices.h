#pragma once
// CUDA device names as written in manifests and assignments: "cuda:N".

#include <optional>
#include <string>

namespace rpcjob::api {

// "cuda:3" -> 3; nullopt for anything else (including "cpu" and "cuda:-1").
std::optional<int> parseCudaDevice(const std::string& device);
std::string cudaDevice(int index);  // 3 -> "cuda:3"

}  // namespace rpcjob::api
