#pragma once
// The CUDA parts of serialization.cc (CUDA build only): which device a tensor
// lands on at the peer (device maps), the streams sends and receives run on, and
// the events recorded once a read was enqueued.

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "header_codec.h"
#include "serialization.h"

namespace tensorpipe {
class Descriptor;
class Allocation;
}  // namespace tensorpipe

namespace rpcjob::runtime::cuda {

// makeMessage, per tensor in table order: checks the device map (throws RpcError
// kInvalidArgument naming the device and the peer), sets meta's device to the
// tensor's device at the peer, picks the send stream, records the tensor's
// memory on it. Returns the tensor to send (a CUDA tensor mapped to "cpu" is
// copied to the host here).
at::Tensor prepareSend(OutgoingMessage& out, at::Tensor t, const DeviceTargets* targets,
                       wire::TensorMeta& meta);
// toTensorpipe: fills a CUDA tensor's buffer (CudaBuffer with its send stream)
// and target device; false for a tensor sent from host memory.
bool fillTensor(const OutgoingMessage& out, size_t index, void* tensorpipeTensor);
// prepareRead, a tensor bound for a CUDA device here: allocates it on a receive
// stream (or on the host when it comes from the peer's host memory, to be moved
// after the read), in a buffer held ahead for its size when there is one.
// Returns an error string or "".
std::string allocate(const void* descriptorTensor, const wire::TensorMeta& meta,
                     c10::ScalarType dtype, IncomingMessage& in,
                     tensorpipe::Allocation& allocation);
// The stream a message's receives on `device` run on (a cudaStream_t): the one
// its earlier tensors there took, else a pool stream.
void* receiveStream(const IncomingMessage& in, int device);
// A receive buffer of `bytes` on `device` for a tensor of `sizes`: `landed`
// when given (a landingBuffer a peer wrote), else one held ahead for its size
// when there is one, else from the caching allocator (on the allocation
// stream); recorded on `stream`, where the copy into it runs.
at::Tensor receiveBuffer(int device, size_t bytes, const std::vector<int64_t>& sizes,
                         c10::ScalarType dtype, void* stream, c10::DataPtr landed = {});
// A buffer of `bytes` on `device` for a peer to write into (a lane's landing
// offer, cuda_lane/): one held ahead when there is one, else the caching
// allocator's on the allocation stream. Nothing runs on that stream, so no
// work of ours is pending on the block when the peer writes it. May throw
// (out of memory).
c10::DataPtr landingBuffer(int device, size_t bytes);
// prepareRead, a tensor bound for host memory here: page-locked memory from
// PyTorch's caching host allocator, when this process already uses a GPU (a CUDA
// primary context exists: nothing initializes CUDA for a CPU-only worker) and the
// tensor is at most kPinnedReceiveBytes. Moving it to a GPU is then one DMA, not a
// copy staged through the driver's bounce buffers, and its block is reused rather
// than faulted in afresh per message. Undefined when not (RPCJOB_PINNED_RECEIVE=0
// turns it off).
inline constexpr size_t kPinnedReceiveBytes = size_t{64} << 20;
at::Tensor pinnedHostTensor(const std::vector<int64_t>& sizes, c10::ScalarType dtype, size_t bytes);
// The process's receive buffers held ahead (receive_spares.h), on the caching
// allocator: allocate() takes them.
class ReceiveSpares;
ReceiveSpares& receiveSpares();
// After a message is dispatched: one buffer held ahead for each large CUDA
// tensor it received (allocated on the spares' thread, not the caller's).
void holdReceiveBuffers(const IncomingMessage& in);
// A runtime shut down: the spares' thread ends and what they hold goes back,
// until the next hold (quiesce()); nothing when none were made.
void quiesceReceiveSpares();
// decodeValue, before decoding: moves host-received tensors to their devices
// and records one event per device on the receive streams into in.events.
void finishRead(IncomingMessage& in);

}  // namespace rpcjob::runtime::cuda
