#pragma once
// rpcjob_cma: a multi-threaded cross-memory-attach channel for CPU tensors
// between processes of one host (TensorPipe channel::Context / Channel).
//
// Like TensorPipe's stock `cma`, the receiver pulls the sender's bytes with
// process_vm_readv(2); unlike it, a large transfer is split into chunks read in
// parallel by a small pool of threads (one `cma` context copies on one thread,
// about 5.6 GB/s effective at 400 MB on the 32-core GPU host).
//
//   send: a control message {pid, address, length, sequence id} over the
//         channel's connection; the send callback runs once the receiver acks
//         (the sender's memory must stay valid until then). When the buffer lies
//         in a shared region of the sender's arena (host_memory/shared_arena.h:
//         received tensors of 4 MiB and more, and rpcjob::runtime::
//         emptySharedHost()), the message also names the region: the memfd's
//         descriptor number in the sender, the region's id, the offset, and the
//         sender's random token (wire_message.h).
//   recv: the bytes of the sender's range into the buffer, one of three ways:
//     - the message names a region: memcpy from a read-only mapping of it
//       (host_memory/peer_regions.h: /proc/<pid>/fd/<fd> opened, checked to
//       be the memfd "rpcjob-<token>-<id>", sealed against shrinking and large
//       enough, mapped once and cached);
//     - the sender's bytes are private but our buffer lies in our arena (every
//       received tensor of 4 MiB and more does) and is 512 KiB or more: a push.
//       We name our region to the sender (kPushRequest); it maps the region
//       writable, as above, memcpys its bytes in, and answers (kPushed): then
//       both sides are done, with no ack. A sender that cannot map the region
//       answers "refused" and we pull as below (counted: pushesRefused);
//     - else process_vm_readv from the sender's memory, then the ack.
//     A copy runs in one piece on the thread that has the message below
//     512 KiB; above it in pieces over the pool, that thread copying one of
//     them while a piece is at most 1 MiB (chunk_plan.h, copy_pool.h).
//     Failures (EPERM, ESRCH, short reads, a region that is not what the
//     message says) go to the callbacks as TensorPipe errors on both sides;
//     nothing aborts, and nothing outside the named region or range is read or
//     written. A receive that fails while the sender may still write into its
//     region retires that region (shared_arena.h): it never holds another
//     tensor.
//
// Why the mappings: process_vm_readv pins and copies the sender's pages one by
// one; on the GPU host it reached 77 % of the memcpy bound at 400 MB and 0.59 ms
// for a 4 MB round trip, 99 % and 86 % of what the syscall itself reaches. A
// mapping of either side's memory copies at memcpy speed; the push costs one
// control message more than a pull (about 10 us on the GPU hosts).
//
// Trust: the same as cma's. Both sides pass the same viability rule, so a peer
// could already read our memory with process_vm_readv; opening its descriptors
// through /proc needs the same ptrace access, and a peer that asks for a push
// could already write our memory (process_vm_writev, the same rule). The checks
// are against a broken or hostile message reading or writing anything but the
// region it names (never one of ours), or crashing us. A push request could
// name a region of a third rpcjob process of the same user: TensorPipe's
// connections carry no peer credentials to check it against, and that process
// is open to the requester's process_vm_writev as well.
//
// Viability follows cma's rule: same boot id, PID and user namespaces, real ==
// effective == saved user/group ids, dumpable, the same permitted capabilities,
// a Yama ptrace scope of 0 or 1 (1: PR_SET_PTRACER_ANY, as cma does), and a
// process_vm_readv on ourselves that works (seccomp may block it). Those facts,
// except the probe, make up the CPU device descriptor, compared as strings.
//
// Settings: RPCJOB_MTCMA_THREADS (pool size; default min(8, hardware threads)),
// RPCJOB_MTCMA_CHUNK_BYTES (piece size, all pieces on the pool; default:
// chunk_plan.h's, threads + 1 pieces of at least 256 KiB where each is at most
// 1 MiB, else 2 x threads pieces; 1048576 reproduces the split before 256 KiB
// pieces for transfers of 1 MiB and more), RPCJOB_MTCMA_SPIN_US (how long an
// idle pool thread polls for work before it sleeps; default 0, sleeps at once),
// RPCJOB_PEER_MAP_CACHE_MB (how much of peers' shared regions stays mapped
// between transfers; default 2048, once for reading and once for pushes),
// RPCJOB_MTCMA_PUSH=0 (never ask a sender to push: every private source is
// read with process_vm_readv, as before version 3).
//
// The descriptor carries the wire's version ("rpcjob_cma/3:..."): peers of
// another version do not pair on this channel and fall back to cma.

#include <cstddef>
#include <cstdint>
#include <memory>

namespace tensorpipe::channel {
class Context;
}

namespace rpcjob::runtime::channels {

inline constexpr const char* kMtCmaChannelName = "rpcjob_cma";

// threads == 0: RPCJOB_MTCMA_THREADS, else min(8, hardware threads). Never
// throws for lack of permissions: the context reports isViable() == false.
std::shared_ptr<tensorpipe::channel::Context> createMtCmaChannel(size_t threads = 0);

// Transfers this process received over rpcjob_cma, by path (successful ones).
struct MtCmaCounters {
  uint64_t sharedReads = 0;  // memcpy from a mapping of the sender's region
  uint64_t sharedBytes = 0;
  uint64_t cmaReads = 0;  // process_vm_readv
  uint64_t cmaBytes = 0;
  uint64_t pushedReads = 0;  // written into our arena by the sender (a push)
  uint64_t pushedBytes = 0;
  uint64_t pushesRefused = 0;  // pushes asked for that the sender could not make
};
MtCmaCounters mtCmaCounters();

}  // namespace rpcjob::runtime::channels
