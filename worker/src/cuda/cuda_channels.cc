#include "cuda_channels.h"

#include <cuda_runtime.h>
#include <dirent.h>
#include <dlfcn.h>

#include <tensorpipe/tensorpipe.h>
#include <tensorpipe/tensorpipe_cuda.h>

#include <algorithm>
#include <cstring>

#include "nvlink_channel.h"

namespace rpcjob::runtime::cuda {
namespace {

int visibleDevices() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

bool nonEmptyDir(const char* path) {
  DIR* dir = opendir(path);
  if (dir == nullptr) return false;
  bool found = false;
  while (dirent* e = readdir(dir)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) found = true;
  }
  closedir(dir);
  return found;
}

// What cuda_ipc's context asserts on at creation: NVML loads, initializes and
// finds every visible GPU by its PCI bus id.
std::string nvmlProblem(int devices) {
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (nvml == nullptr) return "libnvidia-ml.so.1 cannot be loaded";
  using InitFn = int (*)();
  using ByBusFn = int (*)(const char*, void**);
  auto init = reinterpret_cast<InitFn>(dlsym(nvml, "nvmlInit_v2"));
  auto byBus = reinterpret_cast<ByBusFn>(dlsym(nvml, "nvmlDeviceGetHandleByPciBusId_v2"));
  std::string problem;
  if (init == nullptr || byBus == nullptr) {
    problem = "NVML lacks nvmlInit_v2/nvmlDeviceGetHandleByPciBusId_v2";
  } else if (init() != 0) {
    problem = "nvmlInit failed";
  } else {
    for (int i = 0; i < devices && problem.empty(); ++i) {
      char bus[32] = {0};
      cudaDeviceGetPCIBusId(bus, sizeof(bus), i);
      void* handle = nullptr;
      if (byBus(bus, &handle) != 0) problem = std::string("NVML cannot see GPU ") + bus;
    }
  }
  // NVML stays loaded: TensorPipe loads it again and a dlclose gains nothing.
  return problem;
}

}  // namespace

bool isCudaChannel(const std::string& name) {
  return std::find(kCudaChannels.begin(), kCudaChannels.end(), name) != kCudaChannels.end();
}

std::shared_ptr<tensorpipe::channel::Context> createCudaChannel(const std::string& name,
                                                                std::string& why) {
  int devices = visibleDevices();
  if (devices == 0) {
    why = "no CUDA device";
    return nullptr;
  }
  if (name == "cuda_nvlink") return createNvlinkChannel();
  if (name == "cuda_xth") return tensorpipe::channel::cuda_xth::create();
  if (name == "cuda_basic") {
    return tensorpipe::channel::cuda_basic::create(tensorpipe::channel::basic::create());
  }
  if (name == "cuda_ipc") {
    std::string problem = nvmlProblem(devices);
    if (!problem.empty()) {
      why = problem;
      return nullptr;
    }
    return tensorpipe::channel::cuda_ipc::create();
  }
  if (name == "cuda_gdr") {
    if (!nonEmptyDir("/sys/class/infiniband")) {
      why = "no InfiniBand device (/sys/class/infiniband is empty)";
      return nullptr;
    }
    if (!nonEmptyDir("/sys/module/nvidia_peermem") && !nonEmptyDir("/sys/module/nv_peer_mem")) {
      why = "no GPUDirect RDMA kernel module (nvidia_peermem)";
      return nullptr;
    }
    void* ibv = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    if (ibv == nullptr) {
      why = "libibverbs.so.1 cannot be loaded";
      return nullptr;
    }
    return tensorpipe::channel::cuda_gdr::create();
  }
  why = "unknown CUDA channel";
  return nullptr;
}

}  // namespace rpcjob::runtime::cuda
