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
//         (the sender's memory must stay valid until then).
//   recv: process_vm_readv of the sender's range into the buffer: in one call
//         on the receiving thread below 512 KiB; above it in pieces over the
//         pool, the receiving thread reading one of them while a piece is at
//         most 1 MiB (chunk_plan.h). Then the ack. Failures (EPERM, ESRCH, short reads) go to the
//         callbacks as TensorPipe errors on both sides; nothing aborts.
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
// idle pool thread polls for work before it sleeps; default 0, sleeps at once).

#include <cstddef>
#include <memory>

namespace tensorpipe::channel {
class Context;
}

namespace rpcjob::runtime::channels {

inline constexpr const char* kMtCmaChannelName = "rpcjob_cma";

// threads == 0: RPCJOB_MTCMA_THREADS, else min(8, hardware threads). Never
// throws for lack of permissions: the context reports isViable() == false.
std::shared_ptr<tensorpipe::channel::Context> createMtCmaChannel(size_t threads = 0);

}  // namespace rpcjob::runtime::channels
