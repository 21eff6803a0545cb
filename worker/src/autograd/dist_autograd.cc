// The public face of distributed autograd (dist_autograd.h) over Container.
#include "rpcjob/runtime/dist_autograd.h"

#include <ATen/ops/ones_like.h>
#include <torch/csrc/autograd/variable.h>

#include <unordered_set>

#include "autograd/container.h"
#include "runtime_impl.h"
#include "trace/trace.h"

namespace rpcjob::runtime::dist_autograd {
namespace {

// retainGraph = false: what PyTorch's engine does after a pass, for the nodes
// this worker's pass went through (the engine here always keeps the graph).
void releaseGraph(const torch::autograd::edge_list& roots) {
  std::unordered_set<torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> stack;
  for (const auto& e : roots) {
    if (e.function && seen.insert(e.function.get()).second) stack.push_back(e.function.get());
  }
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (dynamic_cast<autograd::RecvFunction*>(node) != nullptr) continue;
    node->release_variables();
    for (const auto& e : node->next_edges()) {
      if (e.function && seen.insert(e.function.get()).second) stack.push_back(e.function.get());
    }
  }
}

}  // namespace

Context::Context(Runtime& runtime)
    : runtime_(runtime),
      id_(runtime.impl().autograd().create()),
      previous_(autograd::currentContext()) {
  autograd::setCurrentContext(id_);
}

Context::~Context() {
  autograd::setCurrentContext(previous_);
  trace::point("autograd.release", static_cast<uint64_t>(id_));
  try {
    Future released = runtime_.impl().autograd().release(id_);
    auto timeout = runtime_.impl().options().defaultTimeout;
    if (timeout.count() > 0) {
      released.waitFor(timeout);
    } else {
      released.wait();
    }
    trace::point("autograd.released", static_cast<uint64_t>(id_));
  } catch (...) {
    // Nothing to tell: a worker that cannot be reached holds no context.
  }
}

ContextGuard::ContextGuard(Runtime& runtime, ContextId id) : previous_(autograd::currentContext()) {
  runtime.impl().autograd().get(id);  // throws for a context that is not here
  autograd::setCurrentContext(id);
}

ContextGuard::~ContextGuard() {
  autograd::setCurrentContext(previous_);
}

ContextId currentContext() {
  return autograd::currentContext();
}

void backward(Runtime& runtime, ContextId id, const std::vector<at::Tensor>& roots,
              bool retainGraph) {
  autograd::Container& container = runtime.impl().autograd();
  const std::string& self = runtime.self().name;
  auto ctx = container.get(id);
  trace::point("autograd.backward", static_cast<uint64_t>(id));
  torch::autograd::edge_list edges;
  torch::autograd::variable_list grads;
  for (const auto& root : roots) {
    if (!root.defined() || !root.requires_grad()) {
      throw RpcError(ErrorCode::kInvalidArgument, self,
                     "a root of dist_autograd::backward does not require grad");
    }
    edges.push_back(torch::autograd::impl::gradient_edge(root));
    grads.push_back(at::ones_like(root));
  }
  std::exception_ptr error;
  try {
    // This thread runs the gradients that come back to this worker's part of
    // the graph while it waits (help_queue.h): a helper before anything is sent,
    // so that none comes back before it.
    autograd::HelpQueue::Helper helper(ctx->help(), container.toPool());
    Future done = container.propagate(ctx, edges, std::move(grads));
    // The calls carry the timeout, per hop, and name the worker that did not
    // answer; this wait is only a backstop behind them.
    auto timeout = runtime.impl().options().defaultTimeout;
    const auto limit = timeout.count() > 0
                           ? std::chrono::nanoseconds(timeout + std::chrono::seconds(1))
                           : std::chrono::nanoseconds::max();
    if (!helper.helpUntil(done, limit)) {
      throw RpcError(ErrorCode::kTimeout, self, "distributed backward timed out");
    }
    error = done.error();
  } catch (const RpcError&) {
    throw;
  } catch (...) {
    throw RpcError(
        ErrorCode::kRemoteException, self,
        "worker '" + self + "': backward failed: " + autograd::describe(std::current_exception()));
  }
  // After a failure other workers' calls may still be running parts of this
  // graph here: it is left to the context's release.
  trace::point("autograd.backward.done", static_cast<uint64_t>(id));
  if (error) std::rethrow_exception(error);
  if (!retainGraph) releaseGraph(edges);
}

std::vector<std::pair<at::Tensor, at::Tensor>> getGradients(Runtime& runtime, ContextId id) {
  return runtime.impl().autograd().get(id)->gradients();
}

at::Tensor gradientOf(Runtime& runtime, ContextId id, const at::Tensor& leaf) {
  return runtime.impl().autograd().get(id)->gradientOf(leaf);
}

}  // namespace rpcjob::runtime::dist_autograd
