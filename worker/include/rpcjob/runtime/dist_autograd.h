#pragma once
// Distributed autograd (torch.distributed.autograd in C++): a backward pass that
// follows the RPCs of a forward pass across workers.
//
//   {
//     dist_autograd::Context ctx(rt);  // calls made on this thread join it
//     at::Tensor y = rt.rpcSync("w1", "forward", {lm(x)}).toTensor();
//     dist_autograd::backward(rt, ctx.id(), {y.sum()});
//     auto grads = dist_autograd::getGradients(rt, ctx.id());  // here; on w1, w1's
//     optimizer.step(ctx.id());
//   }  // released on every worker that joined
//
// Every call (rpcSync, rpcAsync, remote, toHere) made on a thread inside a
// context carries its id; tensors that require grad travel with it, and the
// receiver's copies require grad too. Gradients accumulate per context, never
// in a tensor's .grad. The algorithm and its limits: worker/README.md.
//
// Thread safety: every function may be called from any thread; several
// contexts may be active at once (one per thread, or ContextGuard to enter an
// existing one on another thread).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace rpcjob::runtime {
class Runtime;

namespace dist_autograd {

// Unique across the job: the creating worker's rank in the high 16 bits.
using ContextId = int64_t;

// Opens a context on this worker and makes it this thread's current one; the
// destructor restores the previous one and releases the context here and on
// every worker that joined it (waiting for them, bounded by the call timeout;
// workers that died are skipped).
class Context {
 public:
  explicit Context(Runtime& runtime);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ContextId id() const { return id_; }

 private:
  Runtime& runtime_;
  ContextId id_;
  ContextId previous_;
};

// Makes an existing context (opened by a Context on this worker) current on
// this thread, for calls made from threads other than the context's.
class ContextGuard {
 public:
  ContextGuard(Runtime& runtime, ContextId id);
  ~ContextGuard();
  ContextGuard(const ContextGuard&) = delete;
  ContextGuard& operator=(const ContextGuard&) = delete;

 private:
  ContextId previous_;
};

// This thread's current context; 0 when none.
ContextId currentContext();

// Runs the backward pass from `roots` (each seeded with ones) through every
// worker the forward pass reached; returns once all of them finished. Throws
// RpcError naming the worker and the cause when one fails, dies or times out
// (the call timeout, per hop). retainGraph = false frees this worker's graph
// buffers afterwards (a second backward through it fails); the other workers'
// parts live until the context is released.
void backward(Runtime& runtime, ContextId id, const std::vector<at::Tensor>& roots,
              bool retainGraph = false);

// The gradients this worker accumulated in context `id`: (leaf tensor, gradient).
std::vector<std::pair<at::Tensor, at::Tensor>> getGradients(Runtime& runtime, ContextId id);
// The gradient of one leaf tensor in context `id`; undefined when none reached it.
at::Tensor gradientOf(Runtime& runtime, ContextId id, const at::Tensor& leaf);

}  // namespace dist_autograd

// Built-in: () -> List[int], the ids of the contexts alive on a worker.
inline constexpr const char* kBuiltinAutogradContexts = "rpcjob.autograd.contexts";

}  // namespace rpcjob::runtime
