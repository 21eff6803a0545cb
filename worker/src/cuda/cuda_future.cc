#include "cuda_future.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>

namespace rpcjob::runtime::cuda {
namespace {

class CudaDeviceEvent final : public DeviceEvent {
 public:
  CudaDeviceEvent(const c10::cuda::CUDAStream& stream, std::vector<c10::Storage> storages)
      : device_(stream.device_index()), storages_(std::move(storages)) {
    event_.record(stream);
  }

  std::string device() const override { return "cuda:" + std::to_string(device_); }

  void synchronize() override { event_.synchronize(); }

  void blockCurrentStream() override { waitOn(c10::cuda::getCurrentCUDAStream(device_)); }

  std::unique_ptr<StreamScope> enterPoolStream() override {
    auto stream = c10::cuda::getStreamFromPool(false, device_);
    waitOn(stream);
    return std::make_unique<Scope>(stream);
  }

  std::shared_ptr<DeviceEvent> recordOnCurrentStream() const override {
    return std::make_shared<CudaDeviceEvent>(c10::cuda::getCurrentCUDAStream(device_), storages_);
  }

 private:
  struct Scope final : StreamScope {
    explicit Scope(const c10::cuda::CUDAStream& stream) : guard(stream) {}
    c10::cuda::CUDAStreamGuard guard;
  };

  void waitOn(const c10::cuda::CUDAStream& stream) {
    event_.block(stream);
    for (const auto& s : storages_) recordOnStream(s, stream);
  }

  c10::DeviceIndex device_;
  std::vector<c10::Storage> storages_;
  at::cuda::CUDAEvent event_;  // cudaEventDisableTiming
};

}  // namespace

int deviceCount() {
  return static_cast<int>(c10::cuda::device_count());
}

std::shared_ptr<DeviceEvent> recordEvent(const c10::cuda::CUDAStream& stream,
                                         std::vector<c10::Storage> storages) {
  c10::cuda::CUDAGuard guard(stream.device_index());
  return std::make_shared<CudaDeviceEvent>(stream, std::move(storages));
}

c10::cuda::CUDAStream sendStream(c10::DeviceIndex device) {
  c10::cuda::CUDAGuard guard(device);
  auto stream = c10::cuda::getStreamFromPool(false, device);
  at::cuda::CUDAEvent ready;
  ready.record(c10::cuda::getCurrentCUDAStream(device));
  ready.block(stream);
  return stream;
}

void recordOnStream(const c10::Storage& storage, const c10::cuda::CUDAStream& stream) {
  if (storage.device().is_cuda()) {
    c10::cuda::CUDACachingAllocator::recordStream(storage.data_ptr(), stream);
  }
}

}  // namespace rpcjob::runtime::cuda
