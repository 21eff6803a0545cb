#pragma once
// Sets the calling thread's current CUDA device for a scope (CUDA build only).

#include <cuda_runtime.h>

namespace rpcjob::runtime::cuda {

class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    cudaGetDevice(&previous_);
    changed_ = previous_ != device;
    if (changed_) cudaSetDevice(device);
  }
  // Nothing to restore when unchanged: one CUDA call fewer on every copy's path.
  ~DeviceScope() {
    if (changed_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

// The same for several devices in turn: switches only when the device changes,
// and restores the thread's own once, at the end (each cudaSetDevice costs
// microseconds on the GPU hosts' virtual machines).
class DeviceSwitch {
 public:
  DeviceSwitch() {
    cudaGetDevice(&previous_);
    current_ = previous_;
  }
  void to(int device) {
    if (device != current_) {
      cudaSetDevice(device);
      current_ = device;
    }
  }
  ~DeviceSwitch() {
    if (current_ != previous_) cudaSetDevice(previous_);
  }
  DeviceSwitch(const DeviceSwitch&) = delete;
  DeviceSwitch& operator=(const DeviceSwitch&) = delete;

 private:
  int previous_ = 0;
  int current_ = 0;
};

}  // namespace rpcjob::runtime::cuda
