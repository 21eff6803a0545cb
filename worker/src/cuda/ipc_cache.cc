#include "ipc_cache.h"

#include <cuda.h>

#include <cstdlib>
#include <iterator>

#include "cuda_error.h"
#include "device_scope.h"

namespace rpcjob::runtime::cuda {
// Interprocess events of one device, handed out by index.
struct IpcCache::EventPool {
  int device = 0;
  std::vector<cudaEvent_t> events;
  std::vector<cudaIpcEventHandle_t> handles;
  std::vector<size_t> freeList;
  size_t roundRobin = 0;

  size_t take() {
    if (!freeList.empty()) {
      size_t i = freeList.back();
      freeList.pop_back();
      return i;
    }
    return grow();
  }
  size_t grow() {
    DeviceScope scope(device);
    cudaEvent_t e;
    cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventInterprocess);
    cudaIpcEventHandle_t h;
    cudaIpcGetEventHandle(&h, e);
    events.push_back(e);
    handles.push_back(h);
    return events.size() - 1;
  }
  size_t next(size_t ring) {
    if (events.size() < ring) return grow();
    return roundRobin++ % ring;
  }
  ~EventPool() {
    for (auto e : events) cudaEventDestroy(e);
  }
};

IpcCache::IpcCache() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  const char* sameGpuBy = std::getenv("RPCJOB_NVLINK_SAME_GPU_BY");
  sameGpuByPointer_ = sameGpuBy != nullptr && std::string(sameGpuBy) == "pointer";
  buses_.resize(count);
  for (int i = 0; i < count; ++i) {
    char bus[32] = {0};
    cudaDeviceGetPCIBusId(bus, sizeof(bus), i);
    buses_[i] = bus;
    readyEvents_.push_back(std::make_unique<EventPool>());
    readyEvents_.back()->device = i;
  }
}

IpcCache::~IpcCache() {
  for (auto& [key, opened] : opened_) {
    DeviceScope scope(opened.device);
    cudaIpcCloseMemHandle(opened.ptr);
  }
  for (auto& [key, e] : remoteEvents_) cudaEventDestroy(e);
}

void* IpcCache::openMemory(const PeerMemory& m, int device, bool& sameGpu, uint64_t& bytes,
                           std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  auto key = std::make_pair(m.pid, m.base);
  auto it = opened_.find(key);
  if (it != opened_.end() && it->second.bufferId == m.bufferId && it->second.device == device) {
    sameGpu = it->second.sameGpu;
    bytes = it->second.bytes;
    return it->second.ptr;
  }
  DeviceScope scope(device);
  if (it != opened_.end()) {  // the sender freed it and reused the address
    cudaIpcCloseMemHandle(it->second.ptr);
    opened_.erase(it);
  }
  void* ptr = nullptr;
  cudaError_t e = cudaIpcOpenMemHandle(&ptr, m.handle, cudaIpcMemLazyEnablePeerAccess);
  if (e != cudaSuccess) {
    cudaGetLastError();
    error = cudaWhat("cudaIpcOpenMemHandle", e);
    return nullptr;
  }
  auto bus = sameGpuByPointer_ ? std::nullopt : peerGpus_.busOf(m.pid, m.device);
  if (bus) {
    sameGpu = *bus == buses_[device];
  } else {
    // No descriptor of the sender's GPU seen (a peer that predates its index), or
    // RPCJOB_NVLINK_SAME_GPU_BY=pointer (the former test, for an A/B): the
    // pointer's device ordinal, which names the device of the context that
    // opened it and so errs towards the one-GPU protocol (slower, not wrong).
    int ordinal = -1;
    sameGpu = cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                    reinterpret_cast<CUdeviceptr>(ptr)) == CUDA_SUCCESS &&
              ordinal == device;
  }
  CUdeviceptr rangeBase = 0;
  size_t rangeBytes = 0;
  if (cuMemGetAddressRange(&rangeBase, &rangeBytes, reinterpret_cast<CUdeviceptr>(ptr)) !=
      CUDA_SUCCESS) {
    cudaIpcCloseMemHandle(ptr);
    error = "cuMemGetAddressRange failed on a peer's allocation";
    return nullptr;
  }
  bytes = rangeBytes - (reinterpret_cast<CUdeviceptr>(ptr) - rangeBase);
  opened_[key] = Opened{ptr, m.bufferId, device, sameGpu, bytes};
  return ptr;
}

cudaEvent_t IpcCache::openEvent(const cudaIpcEventHandle_t& handle, int device,
                                std::string& error) {
  std::string key(reinterpret_cast<const char*>(&handle), sizeof(handle));
  key += std::to_string(device);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = remoteEvents_.find(key);
  if (it != remoteEvents_.end()) return it->second;
  DeviceScope scope(device);
  cudaEvent_t e = nullptr;
  cudaError_t r = cudaIpcOpenEventHandle(&e, handle);
  if (r != cudaSuccess) {
    cudaGetLastError();
    error = cudaWhat("cudaIpcOpenEventHandle", r);
    return nullptr;
  }
  remoteEvents_[key] = e;
  return e;
}

bool IpcCache::exportMemory(const void* ptr, int device, ExportedMemory& out, std::string& error) {
  CUdeviceptr base = 0;
  unsigned long long bufferId = 0;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_BUFFER_ID};
  void* values[] = {&base, &bufferId};
  CUresult r = cuPointerGetAttributes(2, attrs, values, reinterpret_cast<CUdeviceptr>(ptr));
  if (r != CUDA_SUCCESS || base == 0) {
    error = "cuPointerGetAttributes failed (" + std::to_string(static_cast<int>(r)) + ")";
    return false;
  }
  out.base = static_cast<uint64_t>(base);
  out.bufferId = bufferId;
  out.offset = reinterpret_cast<uint64_t>(ptr) - out.base;
  std::lock_guard<std::mutex> lock(mu_);
  auto key = std::make_pair(out.base, out.bufferId);
  auto it = exported_.find(key);
  if (it == exported_.end()) {
    DeviceScope scope(device);
    cudaIpcMemHandle_t h;
    cudaError_t e = cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base));
    if (e != cudaSuccess) {
      cudaGetLastError();
      error = cudaWhat("cudaIpcGetMemHandle", e);
      return false;
    }
    // Entries of freed allocations are dropped when the address comes back
    // with a new buffer id.
    for (auto old = exported_.begin(); old != exported_.end();) {
      old = old->first.first == out.base ? exported_.erase(old) : std::next(old);
    }
    it = exported_.emplace(key, h).first;
  }
  out.handle = it->second;
  return true;
}

size_t IpcCache::takeReady(int device, cudaEvent_t& event, cudaIpcEventHandle_t& handle) {
  std::lock_guard<std::mutex> lock(mu_);
  EventPool& pool = *readyEvents_[device];
  size_t i = pool.take();
  event = pool.events[i];
  handle = pool.handles[i];
  return i;
}

void IpcCache::releaseReady(int device, size_t slot) {
  std::lock_guard<std::mutex> lock(mu_);
  readyEvents_[device]->freeList.push_back(slot);
}

void IpcCache::takeDone(int device, cudaStream_t stream, cudaEvent_t& event,
                        cudaIpcEventHandle_t& handle) {
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<EventPool>& slot = doneEvents_[{device, stream}];
  if (!slot) {
    slot = std::make_unique<EventPool>();
    slot->device = device;
  }
  EventPool& pool = *slot;
  size_t i = pool.next(64);
  event = pool.events[i];
  handle = pool.handles[i];
}

std::shared_ptr<IpcCache> sharedIpcCache() {
  static std::mutex mu;
  static std::weak_ptr<IpcCache> live;
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<IpcCache> cache = live.lock();
  if (!cache) {
    cache = std::make_shared<IpcCache>();
    live = cache;
  }
  return cache;
}

}  // namespace rpcjob::runtime::cuda
