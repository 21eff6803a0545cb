#pragma once
// The CUDA side of futures and messages (CUDA build only): DeviceEvents over
// at::cuda::CUDAEvent, and the streams that sends and receives run on.
//
// Streams: a send runs on a pool stream of the tensor's device that waits on the
// caller's current stream (an event, never a host wait); a receive runs on a pool
// stream, and one event per device is recorded on it once the transfer was
// enqueued. Nothing here synchronizes a whole device.

#include <c10/core/Storage.h>
#include <c10/cuda/CUDAStream.h>

#include <memory>
#include <vector>

#include "rpcjob/runtime/device_event.h"

namespace rpcjob::runtime::cuda {

// Number of CUDA devices this process sees (0 when there is no driver or GPU).
int deviceCount();

// An event recorded on `stream` now. `storages` are the memory the event
// guards: whichever stream is made to wait on the event is also recorded on
// them with the caching allocator, so their blocks are not reused under it.
std::shared_ptr<DeviceEvent> recordEvent(const c10::cuda::CUDAStream& stream,
                                         std::vector<c10::Storage> storages);

// A pool stream of `device` that waits on the calling thread's current stream
// there. `storage` (when given) is recorded on it, so the allocator keeps the
// block until the work enqueued on it is done.
c10::cuda::CUDAStream sendStream(c10::DeviceIndex device);
void recordOnStream(const c10::Storage& storage, const c10::cuda::CUDAStream& stream);

}  // namespace rpcjob::runtime::cuda
