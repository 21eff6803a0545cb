#pragma once
// What a lane frame says of the CUDA tensors it carries as IPC handles
// (kDeviceHandles, header_codec.h), the receiver's kLaneCopied answer once
// their copies are enqueued, and its landing offers (kLaneOffers): buffers it
// holds for the next tensors of a size, which the sender then copies into
// itself (README.md: "Pushed into landing offers"). Pure: no CUDA here; the
// handles are the driver's opaque 64-byte blobs (cudaIpcMemHandle_t,
// cudaIpcEventHandle_t). A peer's bytes are untrusted: every decoder is
// bounds-checked and returns why not.
//
// Layout, little-endian:
//   handles := version u8 (1 or 2) | handoff u64 | u32 count | tensor x count |
//              [2: u32 returned | offer id u64 x returned]
//   tensor  := u32 length + encodeTensorMeta bytes | pid i32 | device i32 |
//              base u64 | bufferId u64 | offset u64 | length u64 |
//              memory (64 bytes) | ready (64 bytes) | [2: offer id u64]
//   copied  := version u8 (1) | u32 count | done (64 bytes) x count
//   offers  := version u8 (1) | u32 count | offer x count
//   offer   := id u64 | device i32 | pid i32 | base u64 | bufferId u64 |
//              offset u64 | length u64 | memory (64 bytes)
// Version 1 is what a sender that never had an offer writes: a peer from
// before offers reads it as it always did.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "header_codec.h"

namespace rpcjob::wire {

inline constexpr uint8_t kLaneHandlesVersion = 1;
inline constexpr uint8_t kLaneHandlesPushVersion = 2;
inline constexpr size_t kIpcHandleBytes = 64;
inline constexpr size_t kMaxLaneTensors = 256;
using IpcHandle = std::array<char, kIpcHandleBytes>;

// One tensor, as the receiver needs it to allocate and pull, or (offer != 0)
// to take the landing buffer the sender already copied it into.
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
  uint64_t offer = 0;     // pushed into the receiver's offer of this id (0: pull)
};

struct LaneTensors {
  uint64_t handoff = 0;  // the sender's, for its kLaneCopied; never 0
  std::vector<LaneTensor> tensors;
  std::vector<uint64_t> returned;  // offers the sender gives back unused
};

std::string encodeLaneTensors(const LaneTensors& in);
// "" or what is wrong: a version other than 1, a handoff of 0, no tensors or
// more than kMaxLaneTensors, tensor metadata that decodeTensorMeta refuses or
// that is not on a CUDA device, a pid that is not positive, a negative device,
// offset + length that overflows, a length that is not the shape's elements
// times `elementSize(dtype)` (0: a dtype the caller does not know), more than
// kMaxLaneTensors returned offers or one of id 0, trailing bytes.
std::string decodeLaneTensors(const char* data, size_t size, LaneTensors& out,
                              size_t (*elementSize)(int8_t dtype));

// The receiver's answer: one "done" event per stream its copies ran on.
struct LaneCopied {
  std::vector<IpcHandle> done;
};
std::string encodeLaneCopied(const LaneCopied& in);
// "" or what is wrong: a version other than 1, more than kMaxLaneTensors
// events (none: every tensor was pushed), a size that is not the count's,
// trailing bytes.
std::string decodeLaneCopied(const char* data, size_t size, LaneCopied& out);

// A buffer the receiver holds for the sender's next tensor of `length` bytes
// bound for its cuda:`device`, until the sender pushes one into it or gives
// it back.
struct LandingOffer {
  uint64_t id = 0;        // never 0, never reused on a lane
  int32_t device = -1;    // the receiver's CUDA index, as the sender's targets name it
  int32_t pid = 0;        // the receiver's process
  uint64_t base = 0;      // the receiver's allocation, as LaneTensor's
  uint64_t bufferId = 0;  //
  uint64_t offset = 0;    // where the buffer starts in it
  uint64_t length = 0;    // its bytes, never 0
  IpcHandle memory{};
};
std::string encodeLandingOffers(const std::vector<LandingOffer>& in);
// "" or what is wrong: a version other than 1, no offer or more than
// kMaxLaneTensors, an id or a length of 0, a negative device, a pid that is
// not positive, offset + length that overflows, a size that is not the
// count's, trailing bytes.
std::string decodeLandingOffers(const char* data, size_t size, std::vector<LandingOffer>& out);

}  // namespace rpcjob::wire
