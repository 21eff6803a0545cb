#pragma once
// What a lane frame says of the CUDA tensors it carries as IPC handles
// (kDeviceHandles, header_codec.h), and the receiver's kLaneCopied answer once
// their copies are enqueued. Pure: no CUDA here; the handles are the driver's
// opaque 64-byte blobs (cudaIpcMemHandle_t, cudaIpcEventHandle_t). A peer's
// bytes are untrusted: every decoder is bounds-checked and returns why not.
//
// Layout, little-endian:
//   handles := version u8 (1) | handoff u64 | u32 count | tensor x count
//   tensor  := u32 length + encodeTensorMeta bytes | pid i32 | device i32 |
//              base u64 | bufferId u64 | offset u64 | length u64 |
//              memory (64 bytes) | ready (64 bytes)
//   copied  := version u8 (1) | u32 count | done (64 bytes) x count

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "header_codec.h"

namespace rpcjob::wire {

inline constexpr uint8_t kLaneHandlesVersion = 1;
inline constexpr size_t kIpcHandleBytes = 64;
inline constexpr size_t kMaxLaneTensors = 256;
using IpcHandle = std::array<char, kIpcHandleBytes>;

// One tensor, as the receiver needs it to allocate and pull.
struct LaneTensor {
  TensorMeta meta;        // dtype, shape; the device is the receiver's (cuda:N)
  int32_t pid = 0;        // the sender's process
  int32_t device = -1;    // the sender's CUDA index of the memory
  uint64_t base = 0;      // the sender's allocation: its base address,
  uint64_t bufferId = 0;  // CUDA's id of it (never reused in a process),
  uint64_t offset = 0;    // where the tensor starts in it,
  uint64_t length = 0;    // and its bytes
  IpcHandle memory{};     // cudaIpcMemHandle_t of the allocation
  IpcHandle ready{};      // cudaIpcEventHandle_t: the data is ready once it occurred
};

struct LaneTensors {
  uint64_t handoff = 0;  // the sender's, for its kLaneCopied; never 0
  std::vector<LaneTensor> tensors;
};

std::string encodeLaneTensors(const LaneTensors& in);
// "" or what is wrong: a version other than 1, a handoff of 0, no tensors or
// more than kMaxLaneTensors, tensor metadata that decodeTensorMeta refuses or
// that is not on a CUDA device, a pid that is not positive, a negative device,
// offset + length that overflows, a length that is not the shape's elements
// times `elementSize(dtype)` (0: a dtype the caller does not know), trailing
// bytes.
std::string decodeLaneTensors(const char* data, size_t size, LaneTensors& out,
                              size_t (*elementSize)(int8_t dtype));

// The receiver's answer: one "done" event per stream its copies ran on.
struct LaneCopied {
  std::vector<IpcHandle> done;
};
std::string encodeLaneCopied(const LaneCopied& in);
// "" or what is wrong: a version other than 1, no event or more than
// kMaxLaneTensors, a size that is not the count's, trailing bytes.
std::string decodeLaneCopied(const char* data, size_t size, LaneCopied& out);

}  // namespace rpcjob::wire
