#pragma once
// Two workers on one host for the GPU tests and the GPU bench: this process is
// "driver" (rank 0); "w1" is this same executable run again with
// RPCJOB_GPU_ROLE=worker. Options travel in the environment:
//   RPCJOB_GPU_CHANNELS   comma-separated allowed channels (empty: defaults)
//   RPCJOB_GPU_MAP        the worker's device map to the driver, "cuda:1=cuda:0;..."
#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "rpcjob/assignment/environment.h"
#include "rpcjob/runtime/runtime.h"

namespace rpcjob::gpu {

inline int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

// The machine's GPUs, and the one the worker of a pair uses: cuda:1 where there is
// a second GPU, else cuda:0, which the two processes then share.
inline int gpuCount() {
  return static_cast<int>(c10::cuda::device_count());
}
inline int workerGpu() {
  return gpuCount() > 1 ? 1 : 0;
}
inline std::string cudaName(int device) {
  return "cuda:" + std::to_string(device);
}

inline std::vector<std::string> splitList(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep)) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

inline DeviceMap parseMap(const std::string& s) {
  DeviceMap map;
  for (const auto& item : splitList(s, ';')) {
    auto eq = item.find('=');
    map[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return map;
}

// The worker's functions (registered on both sides).
inline void registerGpuFunctions(runtime::Runtime& rt) {
  using runtime::CallInfo;
  rt.registerFunction("add_one", [](const CallInfo&, std::vector<c10::IValue> args) {
    return c10::IValue(args[0].toTensor() + 1);
  });
  rt.registerFunction("device_of", [](const CallInfo&, std::vector<c10::IValue> args) {
    return c10::IValue(args[0].toTensor().device().str());
  });
  rt.registerFunction("is_pinned", [](const CallInfo&, std::vector<c10::IValue> args) {
    return c10::IValue(args[0].toTensor().is_pinned());
  });
  auto makeOn = [](const CallInfo&, std::vector<c10::IValue> args) {
    auto device = c10::Device(args[0].toStringRef());
    return c10::IValue(at::full({1024}, args[1].toDouble(), at::TensorOptions().device(device)));
  };
  rt.registerFunction("make_on", makeOn);
  // The same, answered on the thread that read the call (for a small call on a
  // shared-memory lane: the lane's poller).
  rt.registerFunction("make_on_inline", makeOn, {true});
  // The remote shard of the model-split experiment: a 1000x1000 linear on the
  // worker's GPU (whatever device its input arrives on).
  auto weight = std::make_shared<at::Tensor>();
  auto bias = std::make_shared<at::Tensor>();
  rt.registerFunction("linear1", [weight, bias](const CallInfo&, std::vector<c10::IValue> args) {
    at::Tensor x = args[0].toTensor();
    if (!weight->defined()) {
      at::manual_seed(1);
      *weight = at::randn({1000, 1000}, at::TensorOptions().device(x.device())) * 0.03;
      *bias = at::zeros({1000}, at::TensorOptions().device(x.device()));
    }
    return c10::IValue(at::linear(x, *weight, *bias));
  });
}

inline runtime::RuntimeOptions optionsFromEnv(const std::string& peer) {
  runtime::RuntimeOptions o;
  if (const char* c = std::getenv("RPCJOB_GPU_CHANNELS")) o.channels = splitList(c, ',');
  if (const char* m = std::getenv("RPCJOB_GPU_MAP")) {
    if (*m) o.deviceMaps[peer] = parseMap(m);
  }
  return o;
}

// More functions a binary registers on both sides (beside registerGpuFunctions).
using Registrar = std::function<void(runtime::Runtime&)>;

// Worker mode: returns true (after serving until the driver shuts down) when
// this process was started as the worker.
inline bool runWorkerIfAsked(const Registrar& more = nullptr) {
  const char* role = std::getenv("RPCJOB_GPU_ROLE");
  if (role == nullptr || std::string(role) != "worker") return false;
  try {
    auto assignment = assignmentFromPeerList(std::getenv("RPCJOB_GPU_PEERS"));
    runtime::Runtime rt(assignment, "w1", optionsFromEnv("driver"));
    registerGpuFunctions(rt);
    if (more) more(rt);
    rt.start();
    rt.shutdown(runtime::ShutdownMode::kGraceful, std::chrono::seconds(600));
  } catch (const std::exception& e) {
    std::cerr << "gpu worker: " << e.what() << "\n";
    std::_Exit(1);
  }
  std::_Exit(0);
}

class Pair {
 public:
  // driverMap: the driver's map to w1; workerMap: w1's map to the driver.
  Pair(DeviceMap driverMap, const std::string& workerMap, const std::string& channels,
       const Registrar& more = nullptr) {
    peers_ = "driver@127.0.0.1:" + std::to_string(freePort()) +
             ",w1@127.0.0.1:" + std::to_string(freePort());
    pid_ = fork();
    if (pid_ == 0) {
      setenv("RPCJOB_GPU_ROLE", "worker", 1);
      setenv("RPCJOB_GPU_PEERS", peers_.c_str(), 1);
      setenv("RPCJOB_GPU_MAP", workerMap.c_str(), 1);
      setenv("RPCJOB_GPU_CHANNELS", channels.c_str(), 1);
      execl("/proc/self/exe", "gpu-worker", static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    runtime::RuntimeOptions o;
    o.channels = splitList(channels, ',');
    if (!driverMap.empty()) o.deviceMaps["w1"] = driverMap;
    o.startTimeout = std::chrono::seconds(60);
    driver_ = std::make_unique<runtime::Runtime>(assignmentFromPeerList(peers_), "driver", o);
    registerGpuFunctions(*driver_);
    if (more) more(*driver_);
  }
  void start() {
    driver_->start();
    started_ = true;
  }
  ~Pair() {
    try {
      driver_->shutdown(
          started_ ? runtime::ShutdownMode::kGraceful : runtime::ShutdownMode::kImmediate,
          std::chrono::seconds(20));
    } catch (...) {
    }
    driver_.reset();
    for (int i = 0; i < 200; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  runtime::Runtime& rt() { return *driver_; }
  std::string channelFor(const std::string& local, const std::string& remote) {
    for (const auto& c : driver_->channelChoices()) {
      if (c.peer == "w1" && c.localDevice == local && c.remoteDevice == remote) return c.channel;
    }
    return "";
  }

 private:
  std::string peers_;
  pid_t pid_ = -1;
  bool started_ = false;
  std::unique_ptr<runtime::Runtime> driver_;
};

}  // namespace rpcjob::gpu
