#pragma once
// cuda_nvlink: rpcjob's TensorPipe channel for CUDA tensors between processes on
// one host whose GPUs have peer access (NVLink), registered above cuda_ipc.
//
// One copy, from the sender's allocation into the receiver's buffer:
//   sender:   IPC handle of the allocation (cached per allocation base and CUDA
//             buffer id, so a freed and reused address is never served stale),
//             an interprocess event recorded on the sender's stream, and one
//             fixed-size message {handle, offset, length, event} on the control
//             connection;
//   receiver: opens the handle once per (sender, base, buffer id) and caches it,
//             makes its streams wait on the sender's event, copies (large tensors
//             split over several streams: copy engines, or a pull kernel with
//             RPCJOB_NVLINK_COPY=kernel), makes the buffer's stream wait on the
//             pieces, records a "done" interprocess event and acks with it;
//   sender:   on the ack its stream waits on "done" (so the caching allocator
//             does not hand the memory out before the copy finished), then the
//             send completes.
// No host waits on the GPU anywhere.
//
// Two processes on one GPU (the receiver compares the PCI bus id of its GPU with
// that of the sender's, from the sender's descriptor: nvlink_descriptor.h): no GPU-side waits
// across processes, which would stall the GPU's time-slicing between the two contexts
// (event_poller.h); the receiver waits for "ready" on the host, copies once on its stream,
// completes the receive, and acks once the copy has finished (flagged), so the sender has nothing
// to wait for.
//
// Viability: a CUDA device here; a pair of devices is served when both
// processes run on the same host (boot id), are different processes, and the
// two GPUs are the same or have peer access both ways.
// Tuning (environment): RPCJOB_NVLINK_STREAMS (1: on the H200 pair one copy-engine
// copy measured best, 353.6 GB/s against 345.7 with 4 and 342.4 with 8),
// RPCJOB_NVLINK_SPLIT_BYTES
// (32 MiB: smaller tensors are one copy), RPCJOB_NVLINK_COPY (ce | kernel),
// RPCJOB_NVLINK_SAME_GPU_BY (bus | pointer: the former test of a shared GPU, which
// takes every cross-GPU pair for one; kept to measure one against the other).

#include <memory>

namespace tensorpipe::channel {
class Context;
}

namespace rpcjob::runtime::cuda {

inline constexpr const char* kNvlinkChannel = "cuda_nvlink";

std::shared_ptr<tensorpipe::channel::Context> createNvlinkChannel();

}  // namespace rpcjob::runtime::cuda
