#pragma once
// DistributedOptimizer (torch.distributed.optim in C++): one libtorch optimizer
// per worker that owns some of the parameters, each stepped with a distributed
// autograd context's gradients on that worker.
//
//   DistributedOptimizer opt(rt, paramRRefs, torch::optim::SGDOptions(0.05));
//   { dist_autograd::Context ctx(rt); ...; dist_autograd::backward(rt, ctx.id(), {loss});
//     opt.step(ctx.id()); }
//
// A parameter RRef's value must be the leaf tensor the forward pass used on its
// owner (a parameter RRef of a remote object, or remote() of a function that
// returns the parameter). The owners' optimizers keep their state (momentum,
// Adam's moments) between steps and are destroyed with this object.
//
// Thread safety: step() may be called from several threads; the steps of one
// owner's optimizer run one at a time.

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <string>
#include <vector>

#include "rpcjob/runtime/dist_autograd.h"
#include "rpcjob/runtime/rref.h"

namespace rpcjob::runtime {

class DistributedOptimizer {
 public:
  // Creates the optimizer on every owner (throws RpcError naming the worker
  // when one cannot: a value that is not a leaf tensor requiring grad, ...).
  DistributedOptimizer(Runtime& runtime, std::vector<RRef> params,
                       const torch::optim::SGDOptions& options);
  DistributedOptimizer(Runtime& runtime, std::vector<RRef> params,
                       const torch::optim::AdamOptions& options);
  DistributedOptimizer(Runtime& runtime, std::vector<RRef> params,
                       const torch::optim::AdamWOptions& options);
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Steps every owner's optimizer at once with context `id`'s gradients there;
  // throws RpcError naming a worker whose step failed (after all finished).
  void step(dist_autograd::ContextId id);

 private:
  void create(std::vector<RRef> params, const std::string& kind, std::vector<double> options);
  void destroyAll();

  struct Owner {
    std::string worker;
    int64_t optimizer;
    bool local;  // this worker owns the values: no RPC
  };
  Runtime& runtime_;
  std::vector<Owner> owners_;
};

}  // namespace rpcjob::runtime
