#pragma once
// CUDA tensors between two workers' GPUs on one host, carried as IPC handles in
// the request frames of their shared-memory lane (../lane/) rather than through
// TensorPipe's pipe and cuda_nvlink's control connection: README.md says why
// and what it costs. CUDA build only; the runtime decides which messages go
// (runtime_lane.cc) and this does the CUDA side of both ends.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lane_pairs.h"
#include "rpcjob/runtime/device_transfers.h"

namespace rpcjob::runtime {
struct OutgoingMessage;
struct IncomingMessage;
namespace cuda {
class IpcCache;
}
}  // namespace rpcjob::runtime

namespace rpcjob::runtime::cuda_lane {

// Whether this process takes CUDA tensors over lanes: it sees a CUDA device,
// and RPCJOB_LANE_CUDA is not "0" (which keeps them on TensorPipe, to compare).
bool enabledHere();
// Whether large tensors go by landing offers (README.md): enabledHere(), and
// RPCJOB_LANE_PUSH is not "0" (which keeps every copy the server's, to
// compare). A client asks for offers in its lane offer; a server makes them
// to a client that asked.
bool landingHere();

// The client's side of one lane: lends the server its requests' CUDA tensors.
// Thread-safe; lend() and unlend() under the lane's write lock, copied() on
// the poller's thread, end() anywhere.
class Sender {
 public:
  // `peer`: the server's name; `observer` (may be null) counts each tensor;
  // `landing`: this client asks for landing offers (landingHere()).
  Sender(LanePairs pairs, std::string peer, std::shared_ptr<DeviceTransferObserver> observer,
         bool landing);
  // The server's process, from the lane's answer: offers in any other
  // process's memory are refused.
  void setServerPid(int64_t pid);
  ~Sender();  // end()
  Sender(const Sender&) = delete;
  Sender& operator=(const Sender&) = delete;

  // Whether `m` may go as handles: it has tensors, and every one is a CUDA
  // tensor on its send stream bound for a device of an allowed pair.
  bool carries(const OutgoingMessage& m) const;
  // Copies each of m's tensors that has a landing offer of its size into it
  // (on its send stream), exports the memory of the others, and records a
  // "ready" event on each send stream after that; `handles`: the bytes for
  // appendDeviceHandles. `m` stays lent (its memory is the server's to read)
  // until copied() names `handoff`, or end(). False with `why`: nothing lent,
  // the pipe takes it.
  bool lend(const std::shared_ptr<OutgoingMessage>& m, std::string& handles, uint64_t& handoff,
            std::string& why);
  // The frame did not go after all (a full ring): its events back, `m` let go,
  // the offers it used held again (after the copies into them: a later push
  // on another stream must not be overwritten by this one).
  void unlend(uint64_t handoff);
  // kLaneOffers: the server's landing offers, held for the next tensors of
  // their sizes. "" or why (a malformed message, offers this client did not
  // ask for, or in another process's memory than the server's): the lane fails.
  std::string offered(const char* data, size_t size);
  // kLaneCopied: each send stream waits (on the GPU) for the server's "done"
  // events, so the memory is reused only after its copies; then `m` goes.
  // "" or why (a handoff never lent, a malformed answer): the lane fails.
  std::string copied(uint64_t handoff, const char* data, size_t size);
  // The lane ended (its peer died or broke it, or shutdown): nothing more is
  // lent, and what is lets go without a "done" to wait for. The calls of
  // those frames fail with the pipe the lane's end fails.
  void end();

 private:
  struct Lent;
  struct State;
  std::unique_ptr<State> state_;
};

// The server's side of one lane. receive(), for a request frame's handles
// (`data`): allocates each tensor on its device here (a buffer held ahead
// when there is one), enqueues its copy after the sender's "ready" event, and
// fills `in` as a pipe's read would (tensors, their streams: decodeValue
// records the events); a tensor the sender pushed into a landing offer takes
// that buffer, its stream waiting on "ready". `handoff` and `copied`: the
// kLaneCopied answer, to send at once. "" or why (the lane fails with it).
// On the poller's thread, as offers() and withdraw().
class Receiver {
 public:
  // `peer`: the client's name, `pid` its process (the lane's offer said so:
  // a frame naming another process's memory is refused); `observer` (may be
  // null) counts each tensor; `landing`: the client takes landing offers.
  Receiver(std::string peer, int64_t pid, std::shared_ptr<DeviceTransferObserver> observer,
           bool landing);
  // What is still offered stays out of the allocator until the client's
  // process is gone: it may have pushed into it in frames never taken here.
  ~Receiver();
  Receiver(const Receiver&) = delete;
  Receiver& operator=(const Receiver&) = delete;
  std::string receive(const char* data, size_t size, IncomingMessage& in, uint64_t& handoff,
                      std::string& copied);
  // After the last frame received is dispatched: a kLaneOffers payload with
  // the offers for its large tensors' sizes that the client does not hold
  // yet, within the spares' budget (RPCJOB_RECEIVE_SPARE_BYTES); "" when none.
  // `ids`: theirs, for withdraw().
  std::string offers(std::vector<uint64_t>& ids);
  // Offers that were never sent (a full ring): their buffers back.
  void withdraw(const std::vector<uint64_t>& ids);

 private:
  struct Offers;
  std::shared_ptr<cuda::IpcCache> ipc_;
  std::string peer_;
  int64_t pid_;
  std::shared_ptr<DeviceTransferObserver> observer_;
  std::unique_ptr<Offers> offers_;  // null: the client takes none
};

// Process-wide, since start: what tests and benchmarks read.
struct Counters {
  uint64_t framesLent = 0;      // request frames sent with CUDA tensors as handles
  uint64_t framesCopied = 0;    // of those, answered by the server's kLaneCopied
  uint64_t framesReceived = 0;  // such frames received and copied
  uint64_t tensorsReceived = 0;
  uint64_t tensorsPushed = 0;    // sent: copied into a landing offer here
  uint64_t tensorsLanded = 0;    // received: taken from a landing offer
  uint64_t offersMade = 0;       // landing offers sent
  uint64_t offersReturned = 0;   // of those, given back unused
  uint64_t offersGivenBack = 0;  // held here and given back unused
};
Counters counters();

}  // namespace rpcjob::runtime::cuda_lane
