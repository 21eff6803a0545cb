#include "cuda_serialization.h"

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <tensorpipe/tensorpipe.h>
#include <tensorpipe/tensorpipe_cuda.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>

#include "cuda_future.h"
#include "device_maps.h"
#include "receive_spares.h"
#include "release_later.h"
#include "rpcjob/runtime/errors.h"
#include "trace/trace.h"

namespace rpcjob::runtime::cuda {
namespace {

RpcError unmapped(const DeviceTargets* targets, int local) {
  std::string device = deviceName(local);
  if (targets == nullptr) {
    return RpcError(ErrorCode::kInvalidArgument, "",
                    "a tensor on " + device + " cannot be sent here (no device map applies)");
  }
  if (targets->direction == "response") {
    return RpcError(ErrorCode::kInvalidArgument, targets->peer,
                    "the response to worker '" + targets->peer + "' has a tensor on " + device +
                        ", which the caller's device map to this worker does not name (device "
                        "maps are per caller; responses use the inverse map)");
  }
  return RpcError(ErrorCode::kInvalidArgument, targets->peer,
                  "a tensor on " + device + " has no device mapping to worker '" + targets->peer +
                      "' (add \"" + device + "\" to deviceMaps[\"" + targets->peer + "\"])");
}

// The stream receive buffers are allocated on: one per device, created here and
// never given work. PyTorch's caching allocator keeps freed blocks per
// allocation stream; allocating on the round-robin pool stream of each receive
// found no cached block most of the time and paid a cudaMalloc (and, for the
// peer, a fresh IPC handle to open) per large message. On an idle stream the
// block comes back once the streams recorded on it are done with it.
c10::cuda::CUDAStream allocationStream(c10::DeviceIndex device) {
  static std::mutex mu;
  static std::map<c10::DeviceIndex, cudaStream_t> streams;
  std::lock_guard<std::mutex> lock(mu);
  auto it = streams.find(device);
  if (it == streams.end()) {
    c10::cuda::CUDAGuard guard(device);
    cudaStream_t s = nullptr;
    C10_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    it = streams.emplace(device, s).first;
  }
  return c10::cuda::getStreamFromExternal(it->second, device);
}

size_t spareBudget() {
  std::string problem;
  const size_t budget =
      ReceiveSpares::budgetFrom(std::getenv("RPCJOB_RECEIVE_SPARE_BYTES"), problem);
  if (!problem.empty()) std::cerr << "rpcjob: " << problem << "\n";
  return budget;
}

// The process's instance once made (quiesceReceiveSpares() makes none).
std::atomic<ReceiveSpares*> madeSpares{nullptr};

}  // namespace

ReceiveSpares& receiveSpares() {
  // Never destroyed: what it holds goes back at each runtime's shutdown.
  static auto* spares = [] {
    auto* made = new ReceiveSpares(spareBudget(), [](int device, size_t bytes) {
      auto index = static_cast<c10::DeviceIndex>(device);
      c10::cuda::CUDAGuard guard(index);
      c10::cuda::CUDAStreamGuard onStream(allocationStream(index));
      // Beside the call's own steps in a trace: does it overlap them?
      trace::point("spares.allocating", bytes);
      auto held = c10::cuda::CUDACachingAllocator::get()->allocate(bytes);
      trace::point("spares.allocated", bytes);
      return held;
    });
    madeSpares.store(made);
    return made;
  }();
  return *spares;
}

void quiesceReceiveSpares() {
  if (ReceiveSpares* spares = madeSpares.load()) spares->quiesce();
}

void holdReceiveBuffers(const IncomingMessage& in) {
  std::vector<std::pair<int, size_t>> received;
  for (size_t i = 0; i < in.streams.size() && i < in.tensors.size(); ++i) {
    const at::Tensor& t = in.tensors[i];
    if (in.streams[i] != nullptr && t.defined() && t.nbytes() >= ReceiveSpares::kMinBytes) {
      received.emplace_back(t.device().index(), t.nbytes());
    }
  }
  if (!received.empty()) receiveSpares().hold(received);
}

at::Tensor prepareSend(OutgoingMessage& out, at::Tensor t, const DeviceTargets* targets,
                       wire::TensorMeta& meta) {
  int local = t.is_cuda() ? t.device().index() : -1;
  int target = -1;
  if (targets != nullptr) {
    auto it = targets->map.find(local);
    if (it != targets->map.end()) {
      if (!targets->error.empty()) {
        throw RpcError(ErrorCode::kInvalidArgument, targets->peer, targets->error);
      }
      target = it->second;
    } else if (local >= 0) {
      throw unmapped(targets, local);
    }
  } else if (local >= 0) {
    throw unmapped(targets, local);
  }
  if (local >= 0 && target < 0) {
    t = t.cpu();  // mapped to the peer's host memory: staged here
    local = -1;
  }
  meta.deviceType = target >= 0 ? 1 : 0;
  meta.deviceIndex = static_cast<int8_t>(target);
  size_t index = out.tensors.size();
  out.targets.resize(index + 1, -1);
  out.streams.resize(index + 1, nullptr);
  out.targets[index] = target;
  if (local >= 0) {
    noteGpuStep();  // a GPU step of ours: what waited for one goes after it
    void* stream = nullptr;
    for (size_t i = 0; i < index; ++i) {  // one send stream per device and message
      if (out.streams[i] != nullptr && out.tensors[i].device().index() == local) {
        stream = out.streams[i];
      }
    }
    c10::cuda::CUDAStream s =
        stream != nullptr ? c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(stream),
                                                             static_cast<c10::DeviceIndex>(local))
                          : sendStream(static_cast<c10::DeviceIndex>(local));
    recordOnStream(t.storage(), s);
    out.streams[index] = s.stream();
  }
  return t;
}

bool fillTensor(const OutgoingMessage& out, size_t index, void* tensorpipeTensor) {
  auto& t = *static_cast<tensorpipe::Message::Tensor*>(tensorpipeTensor);
  if (index >= out.streams.size() || out.streams[index] == nullptr) {
    if (index < out.targets.size() && out.targets[index] >= 0) {
      t.targetDevice = tensorpipe::Device{tensorpipe::kCpuDeviceType, 0};  // moved there
    }
    return false;
  }
  t.buffer = tensorpipe::CudaBuffer{out.tensors[index].data_ptr(),
                                    static_cast<cudaStream_t>(out.streams[index])};
  t.targetDevice = tensorpipe::Device{tensorpipe::kCudaDeviceType, out.targets[index]};
  return true;
}

at::Tensor pinnedHostTensor(const std::vector<int64_t>& sizes, c10::ScalarType dtype,
                            size_t bytes) {
  static const bool enabled = [] {
    const char* env = std::getenv("RPCJOB_PINNED_RECEIVE");
    return env == nullptr || std::string(env) != "0";
  }();
  if (!enabled || bytes == 0 || bytes > kPinnedReceiveBytes || deviceCount() == 0) return {};
  if (!c10::cuda::getDeviceIndexWithPrimaryContext().has_value()) return {};
  try {
    return at::empty(sizes, at::TensorOptions().dtype(dtype).pinned_memory(true));
  } catch (const std::exception&) {
    return {};  // no page-locked memory to be had: pageable memory does as well
  }
}

std::string allocate(const void* descriptorTensor, const wire::TensorMeta& meta,
                     c10::ScalarType dtype, IncomingMessage& in,
                     tensorpipe::Allocation& allocation) {
  const auto& d = *static_cast<const tensorpipe::Descriptor::Tensor*>(descriptorTensor);
  int count = deviceCount();
  if (meta.deviceIndex < 0 || meta.deviceIndex >= count) {
    return "a tensor bound for cuda:" + std::to_string(meta.deviceIndex) +
           ", but this worker has " + std::to_string(count) + " CUDA device(s)";
  }
  auto device = static_cast<c10::DeviceIndex>(meta.deviceIndex);
  size_t index = in.tensors.size();
  in.streams.resize(index + 1, nullptr);
  in.moveTo.resize(index + 1, -1);
  if (d.sourceDevice.type == tensorpipe::kCpuDeviceType) {
    at::Tensor t = at::empty(meta.sizes, at::TensorOptions().dtype(dtype));
    allocation.tensors.push_back({tensorpipe::CpuBuffer{t.data_ptr()}});
    in.moveTo[index] = device;
    in.tensors.push_back(std::move(t));
    return {};
  }
  void* stream = receiveStream(in, device);
  at::Tensor t = receiveBuffer(device, d.length, meta.sizes, dtype, stream);
  allocation.tensors.push_back(
      {tensorpipe::CudaBuffer{t.data_ptr(), static_cast<cudaStream_t>(stream)}});
  in.streams[index] = stream;
  in.tensors.push_back(std::move(t));
  return {};
}

void* receiveStream(const IncomingMessage& in, int device) {
  for (size_t i = 0; i < in.streams.size() && i < in.tensors.size(); ++i) {
    if (in.streams[i] != nullptr && in.tensors[i].device().index() == device) return in.streams[i];
  }
  return c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(device)).stream();
}

c10::DataPtr landingBuffer(int device, size_t bytes) {
  if (c10::DataPtr held = receiveSpares().take(device, bytes)) return held;
  auto index = static_cast<c10::DeviceIndex>(device);
  c10::cuda::CUDAGuard guard(index);
  c10::cuda::CUDAStreamGuard onStream(allocationStream(index));
  return c10::cuda::CUDACachingAllocator::get()->allocate(bytes);
}

at::Tensor receiveBuffer(int device, size_t bytes, const std::vector<int64_t>& sizes,
                         c10::ScalarType dtype, void* stream, c10::DataPtr landed) {
  auto index = static_cast<c10::DeviceIndex>(device);
  at::Tensor t;
  trace::point("read.allocating", bytes);
  c10::DataPtr held = landed                              ? std::move(landed)
                      : bytes >= ReceiveSpares::kMinBytes ? receiveSpares().take(device, bytes)
                                                          : c10::DataPtr();
  if (held) {
    t = tensorOnBuffer(std::move(held), bytes, sizes, dtype, c10::cuda::CUDACachingAllocator::get(),
                       c10::DispatchKey::CUDA);
  } else {
    c10::cuda::CUDAStreamGuard guard(allocationStream(index));
    t = at::empty(sizes, at::TensorOptions().dtype(dtype).device(c10::kCUDA, index));
  }
  // Between pipe.descriptor and read.prepared: the caching allocator's part apart.
  trace::point("read.allocated", bytes);
  recordOnStream(t.storage(),  // the copy into it runs there
                 c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(stream), index));
  return t;
}

void finishRead(IncomingMessage& in) {
  if (in.streams.empty()) return;
  // The copies into this message are enqueued: the GPU is ours now (the sender's
  // work they waited for is done), so what waited for a GPU step goes behind
  // them, once the message is dispatched (AfterGpuStep). Not sooner: when the
  // descriptor arrives the sender may still compute.
  noteGpuStep();
  std::map<int, std::pair<c10::cuda::CUDAStream, std::vector<c10::Storage>>> perDevice;
  auto streamOf = [&](int device,
                      void* raw) -> std::pair<c10::cuda::CUDAStream, std::vector<c10::Storage>>& {
    auto it = perDevice.find(device);
    if (it == perDevice.end()) {
      auto s = raw != nullptr
                   ? c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(raw),
                                                      static_cast<c10::DeviceIndex>(device))
                   : c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(device));
      it = perDevice.emplace(device, std::make_pair(s, std::vector<c10::Storage>())).first;
    }
    return it->second;
  };
  for (size_t i = 0; i < in.streams.size() && i < in.tensors.size(); ++i) {
    if (in.streams[i] != nullptr) {
      streamOf(in.tensors[i].device().index(), in.streams[i])
          .second.push_back(in.tensors[i].storage());
    }
  }
  for (size_t i = 0; i < in.moveTo.size() && i < in.tensors.size(); ++i) {
    if (in.moveTo[i] < 0) continue;
    auto& entry = streamOf(in.moveTo[i], nullptr);
    c10::cuda::CUDAStreamGuard guard(entry.first);
    in.tensors[i] = in.tensors[i].to(c10::Device(c10::kCUDA, in.moveTo[i]), /*non_blocking=*/true);
    entry.second.push_back(in.tensors[i].storage());
  }
  for (auto& [device, entry] : perDevice) {
    in.events.push_back(recordEvent(entry.first, std::move(entry.second)));
  }
}

}  // namespace rpcjob::runtime::cuda
