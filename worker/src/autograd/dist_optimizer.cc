// DistributedOptimizer: the caller's side, and the owners' built-ins.
#include "rpcjob/runtime/dist_optimizer.h"

#include <ATen/core/ivalue.h>

#include <map>

#include "autograd/container.h"
#include "runtime_impl.h"

namespace rpcjob::runtime {
namespace {

std::vector<double> sgdOptions(const torch::optim::SGDOptions& o) {
  return {o.lr(), o.momentum(), o.dampening(), o.weight_decay(), o.nesterov() ? 1.0 : 0.0};
}

template <typename Options>
std::vector<double> adamOptions(const Options& o) {
  return {o.lr(),  std::get<0>(o.betas()), std::get<1>(o.betas()),
          o.eps(), o.weight_decay(),       o.amsgrad() ? 1.0 : 0.0};
}

autograd::Container& container(Runtime& runtime) {
  return runtime.impl().autograd();
}

}  // namespace

DistributedOptimizer::DistributedOptimizer(Runtime& runtime, std::vector<RRef> params,
                                           const torch::optim::SGDOptions& options)
    : runtime_(runtime) {
  create(std::move(params), "sgd", sgdOptions(options));
}

DistributedOptimizer::DistributedOptimizer(Runtime& runtime, std::vector<RRef> params,
                                           const torch::optim::AdamOptions& options)
    : runtime_(runtime) {
  create(std::move(params), "adam", adamOptions(options));
}

DistributedOptimizer::DistributedOptimizer(Runtime& runtime, std::vector<RRef> params,
                                           const torch::optim::AdamWOptions& options)
    : runtime_(runtime) {
  create(std::move(params), "adamw", adamOptions(options));
}

void DistributedOptimizer::create(std::vector<RRef> params, const std::string& kind,
                                  std::vector<double> options) {
  std::map<std::string, std::vector<RRef>> byOwner;
  for (auto& p : params) {
    if (!p.valid()) throw RpcError(ErrorCode::kInvalidArgument, "", "an invalid parameter RRef");
    byOwner[p.owner()].push_back(std::move(p));
  }
  c10::List<double> packedOptions(options);
  std::vector<std::pair<std::string, Future>> created;
  std::exception_ptr error;
  for (auto& [owner, rrefs] : byOwner) {
    bool local = true;  // every value is here (not so for a remote() to this worker)
    for (const auto& r : rrefs) local = local && r.isOwner();
    if (local) {
      try {
        std::vector<at::Tensor> values;
        for (const auto& r : rrefs) values.push_back(r.localValue().toTensor());
        owners_.push_back({owner, container(runtime_).optimizers().create(kind, options, values),
                           /*local=*/true});
      } catch (...) {
        if (!error) {
          error = std::make_exception_ptr(
              RpcError(ErrorCode::kInvalidArgument, owner,
                       "worker '" + owner + "': " + autograd::describe(std::current_exception())));
        }
      }
      continue;
    }
    std::vector<c10::IValue> forks;
    for (const auto& r : rrefs) forks.push_back(r.toIValue());
    created.emplace_back(owner, runtime_.rpcAsync(owner, autograd::kOptimizerCreate,
                                                  {kind, packedOptions,
                                                   c10::ivalue::Tuple::create(std::move(forks))}));
  }
  for (auto& [owner, f] : created) {
    if (f.hasError()) {
      if (!error) error = f.error();
    } else {
      owners_.push_back({owner, f.value().toInt(), /*local=*/false});
    }
  }
  if (error) {
    destroyAll();  // the destructor does not run when a constructor throws
    std::rethrow_exception(error);
  }
}

void DistributedOptimizer::destroyAll() {
  std::vector<Future> destroyed;
  for (const auto& o : owners_) {
    if (o.local) {
      container(runtime_).optimizers().destroy(o.optimizer);
    } else {
      destroyed.push_back(runtime_.rpcAsync(o.worker, autograd::kOptimizerDestroy, {o.optimizer}));
    }
  }
  for (auto& f : destroyed) f.wait();  // a dead owner's error is of no use here
  owners_.clear();
}

DistributedOptimizer::~DistributedOptimizer() {
  destroyAll();
}

void DistributedOptimizer::step(dist_autograd::ContextId id) {
  std::vector<std::pair<std::string, Future>> steps;
  const Owner* local = nullptr;
  for (const auto& o : owners_) {
    if (o.local) {
      local = &o;
    } else {
      steps.emplace_back(o.worker,
                         runtime_.rpcAsync(o.worker, autograd::kOptimizerStep, {o.optimizer, id}));
    }
  }
  std::exception_ptr error;
  if (local != nullptr) {
    try {
      auto& c = container(runtime_);
      c.optimizers().step(local->optimizer, *c.get(id));
    } catch (...) {
      error =
          std::make_exception_ptr(RpcError(ErrorCode::kRemoteException, local->worker,
                                           "optimizer step on worker '" + local->worker + "': " +
                                               autograd::describe(std::current_exception())));
    }
  }
  for (auto& [owner, f] : steps) {
    if (f.hasError() && !error) error = f.error();
  }
  if (error) std::rethrow_exception(error);
}

namespace autograd {

std::vector<Builtin> Container::optimizerBuiltins() {
  std::vector<Builtin> out;
  // On the pool: fetching a parameter may wait for the remote() creating it.
  out.push_back({kOptimizerCreate,
                 [this](const CallInfo& call, std::vector<c10::IValue> args) {
                   if (args.size() != 3 || !args[0].isString() || !args[1].isDoubleList() ||
                       !args[2].isTuple()) {
                     throw std::invalid_argument("bad optimizer_create call");
                   }
                   std::vector<at::Tensor> params;
                   for (const auto& fork : args[2].toTupleRef().elements()) {
                     RRef r = call.runtime.rrefFromIValue(fork);
                     r.confirmed().value();
                     const c10::IValue& v = r.localValue();
                     if (!v.isTensor()) throw std::invalid_argument("a parameter is not a tensor");
                     params.push_back(v.toTensor());
                   }
                   auto options = args[1].toDoubleVector();
                   return c10::IValue(
                       optimizers_.create(args[0].toStringRef(), options, std::move(params)));
                 },
                 nullptr, false});
  out.push_back({kOptimizerStep,
                 [this](const CallInfo&, std::vector<c10::IValue> args) {
                   if (args.size() != 2 || !args[0].isInt() || !args[1].isInt()) {
                     throw std::invalid_argument("bad optimizer_step call");
                   }
                   optimizers_.step(args[0].toInt(), *get(args[1].toInt()));
                   return c10::IValue();
                 },
                 nullptr, false});
  out.push_back({kOptimizerDestroy,
                 [this](const CallInfo&, std::vector<c10::IValue> args) {
                   if (args.size() != 1 || !args[0].isInt()) {
                     throw std::invalid_argument("bad optimizer_destroy call");
                   }
                   optimizers_.destroy(args[0].toInt());
                   return c10::IValue();
                 },
                 nullptr, true});
  return out;
}

}  // namespace autograd
}  // namespace rpcjob::runtime
