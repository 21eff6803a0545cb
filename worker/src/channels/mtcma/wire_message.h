#pragma once
// rpcjob_cma's control message (both ways, fixed size), apart so that tests can
// forge one.
//
// Version 2 added the shared region: a send whose buffer lies in the sender's
// arena (host_memory/shared_arena.h) names it, and the receiver copies from a
// mapping of it instead of calling process_vm_readv. Peers of version 1 sent
// 40-byte messages; the version is part of the channel's device descriptor, so
// TensorPipe never pairs two versions on this channel (they fall back to cma).
//
// Version 3 added the push (mtcma_channel.h): kPushRequest, receiver to sender,
// names the receiver's region as a kSend names the sender's (pid, regionFd,
// token, regionId, regionOffset, length; seq: the send's); kPushed, sender to
// receiver, answers it in status (0 written, 1 failed, 2 refused: pull).

#include <cstdint>

#include "../copy_channel.h"

namespace rpcjob::runtime::channels {

inline constexpr int kMtCmaWireVersion = 3;

struct MtCmaWire {
  CopyKind kind = CopyKind::kSend;
  uint32_t status = 0;  // kAck: 0 ok, 1 the receiver failed to read; kPushed: above
  uint64_t seq = 0;
  int64_t pid = 0;
  uint64_t address = 0;
  uint64_t length = 0;
  // kSend: the buffer lies in the sender's shared region `regionId`, whose
  // memfd is the sender's descriptor regionFd, at regionOffset; token is the
  // sender's arena's. regionFd -1: not in a shared region.
  int32_t regionFd = -1;
  uint32_t reserved = 0;
  uint64_t token = 0;
  uint64_t regionId = 0;
  uint64_t regionOffset = 0;
};
static_assert(sizeof(MtCmaWire) == 72, "version 3's wire format: change kMtCmaWireVersion with it");

}  // namespace rpcjob::runtime::channels
