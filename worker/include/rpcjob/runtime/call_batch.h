#pragma once
// CallBatch: opt-in caller-side batching of requests, independent of timing.
//
// Without it, a burst of rpcAsync calls to one peer is batched only while a
// write to that peer is in flight: how many requests share one transport message
// depends on how fast TensorPipe's loop completes writes (on a host where the
// loop has a core of its own, about one per message). While a CallBatch lives
// on a thread, the requests that thread makes through its runtime (rpcAsync,
// rpcSync, remote, RRef calls) are held and written together, as one kBatch
// message per peer for each run of tensorless requests, when
//   - flush() is called or the CallBatch ends;
//   - the thread waits on any Future (wait, waitFor, value, ...), so a call made
//     in the batch never waits on its own held request; rpcSync therefore
//     writes at once;
//   - 256 requests to one peer are held (they go, later ones are held anew);
//   - the thread calls Runtime::shutdown.
// Polling Future::isDone() is not a wait: it writes nothing.
// A request held is sent later, not differently: its future, timeout and
// errors are as without the batch (its timeout runs from the call). Use it
// around a loop that issues many calls and then waits for them; do not keep one
// open while the thread does other long work, which would hold the calls.
//
// One per thread: a CallBatch made while the thread has one (of any runtime)
// adds nothing; calls go to the outer one's runtime batch, or, for another
// runtime, out at once. Must end on the thread that made it, before its
// runtime is destroyed.
//
//   {
//     CallBatch batch(rt);
//     for (int i = 0; i < n; ++i) futures.push_back(rt.rpcAsync("w1", "f", {i}));
//   }  // written here, if not earlier
//   waitAll(futures);

#include <memory>

namespace rpcjob::runtime {

class Runtime;
class RuntimeImpl;

class CallBatch {
 public:
  explicit CallBatch(Runtime& runtime);
  ~CallBatch();
  CallBatch(const CallBatch&) = delete;
  CallBatch& operator=(const CallBatch&) = delete;

  // Writes the requests held so far; the batch stays open.
  void flush();

 private:
  bool owner_ = false;  // false: the thread had a batch already
};

}  // namespace rpcjob::runtime
