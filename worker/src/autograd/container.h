#pragma once
// A worker's distributed autograd state (PyTorch's DistAutogradContainer and
// DistEngine): its contexts, the hooks the call path uses to record messages in
// them, the backward pass's propagation, and the built-in functions its peers
// call (gradients, release, live contexts, and the optimizers' owner side).
//
// Backward (PyTorch's FAST mode, with every execution keeping the graph):
// gradients entering a worker -- from roots on the driver, or the gradients of
// one SendRecord coming back -- run the local engine from there, capturing what
// reaches the graph's leaves (accumulated in the context) and its
// RecvFunctions (sent, one call per RecvFunction, to the worker that sent those
// tensors, which continues the same way). Each call answers once everything it
// caused downstream finished, so the driver's backward returns when every
// worker is done, and an error anywhere travels back along the calls.
//
// Thread safety: all methods may be called from any thread.

#include <ATen/core/ivalue.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "autograd/context.h"
#include "autograd/optimizer_host.h"
#include "header_codec.h"
#include "rpcjob/runtime/future.h"
#include "rpcjob/runtime/options.h"
#include "rpcjob/runtime/runtime.h"

namespace rpcjob::runtime {
class RuntimeImpl;

namespace autograd {

// This thread's current context (0: none), set by dist_autograd::Context,
// ContextGuard and, while a function serves a call made in a context,
// CurrentContextScope.
int64_t currentContext();
void setCurrentContext(int64_t id);
class CurrentContextScope {
 public:
  explicit CurrentContextScope(int64_t id);
  ~CurrentContextScope();
  CurrentContextScope(const CurrentContextScope&) = delete;
  CurrentContextScope& operator=(const CurrentContextScope&) = delete;

 private:
  int64_t previous_;
};

// Names of the built-ins peers call (kBuiltinAutogradContexts is public).
inline constexpr const char* kGradients = "rpcjob.autograd.gradients";
inline constexpr const char* kRelease = "rpcjob.autograd.release";
inline constexpr const char* kOptimizerCreate = "rpcjob.autograd.optimizer_create";
inline constexpr const char* kOptimizerStep = "rpcjob.autograd.optimizer_step";
inline constexpr const char* kOptimizerDestroy = "rpcjob.autograd.optimizer_destroy";

struct Builtin {
  std::string name;
  Function fn;          // or
  AsyncFunction async;  // (which runs on the thread that read the call: never blocks)
  bool runInline = false;
};

class Container {
 public:
  explicit Container(RuntimeImpl& runtime);
  ~Container();

  // Contexts
  int64_t create();
  std::shared_ptr<ContextState> find(int64_t id) const;  // null: none
  std::shared_ptr<ContextState> get(int64_t id) const;   // throws RpcError when none
  std::vector<int64_t> live() const;
  // Releases `id` here and on every worker it sent to (they forward it to
  // theirs); completes when all answered (errors ignored: a dead worker holds
  // nothing).
  Future release(int64_t id);

  // Hooks of the call path (runtime_calls.cc).
  // A request about to be sent to `to` from this thread: in its current
  // context, it carries the context's id and records its tensors that require
  // grad. Only calls and RRef fetches take part; autograd's own calls do not.
  void onSendRequest(wire::Header& header, const c10::IValue* value, int to);
  // A response to a call made in context `id` (0: none).
  void onSendResponse(int64_t id, wire::Header& header, const c10::IValue& value);
  // A message received from `from`: a request joins its context (a response
  // to a call whose context is gone here is left as it is); returns the value
  // with the tensors that required grad on the sender requiring grad here, their
  // grad_fn a RecvFunction. Throws RpcError (kBadMessage) for flags that do not
  // match the value.
  // `request`: a call from `from` (else its response to ours).
  c10::IValue onReceive(const wire::Header& header, int from, c10::IValue value, bool request);

  // Backward from `roots` with `grads` (one per root) in context `ctx`.
  Future propagate(const std::shared_ptr<ContextState>& ctx,
                   const torch::autograd::edge_list& roots, torch::autograd::variable_list grads);
  // Where gradient work goes that a thread waiting in a backward pass left
  // (help_queue.h): the pool, or the calling thread when the pool is gone.
  HelpQueue::Leftover toPool();

  std::vector<Builtin> builtins();
  OptimizerHost& optimizers() { return optimizers_; }
  RuntimeImpl& runtime() { return runtime_; }

 private:
  void attach(ContextState& ctx, wire::Header& header, const c10::IValue* value);
  // The gradients built-in: (context, send id, gradients), run by the thread
  // waiting in that context's backward here, else on the pool.
  Future gradientsCall(std::vector<c10::IValue> args);
  Future onGradients(int64_t id, int64_t sendId, const c10::IValue& grads);
  std::vector<Builtin> optimizerBuiltins();  // dist_optimizer.cc

  RuntimeImpl& runtime_;
  mutable std::mutex mu_;
  std::unordered_map<int64_t, std::shared_ptr<ContextState>> contexts_;
  int64_t nextLocal_ = 1;
  OptimizerHost optimizers_;
};

// A future completing when all of `futures` did (with the first error), or
// with `failFast` at the first error.
Future whenAll(const std::vector<Future>& futures, bool failFast);

// What an exception says, without libtorch's C++ backtrace.
std::string describe(const std::exception_ptr& error);

}  // namespace autograd
}  // namespace rpcjob::runtime
