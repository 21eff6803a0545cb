#include "autograd/optimizer_host.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <stdexcept>

#include "autograd/context.h"

namespace rpcjob::runtime::autograd {

struct OptimizerHost::Entry {
  std::mutex mu;
  std::vector<at::Tensor> params;
  std::unique_ptr<torch::optim::Optimizer> optimizer;
};

namespace {

double option(const std::vector<double>& options, size_t i, const std::string& kind) {
  if (i >= options.size()) {
    throw std::invalid_argument(kind + " optimizer: " + std::to_string(options.size()) +
                                " options, expected more");
  }
  return options[i];
}

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const std::string& kind,
                                                       const std::vector<double>& o,
                                                       const std::vector<at::Tensor>& params) {
  if (kind == "sgd") {
    torch::optim::SGDOptions s(option(o, 0, kind));
    s.momentum(option(o, 1, kind)).dampening(option(o, 2, kind));
    s.weight_decay(option(o, 3, kind)).nesterov(option(o, 4, kind) != 0);
    return std::make_unique<torch::optim::SGD>(params, s);
  }
  if (kind == "adam" || kind == "adamw") {
    auto betas = std::make_tuple(option(o, 1, kind), option(o, 2, kind));
    if (kind == "adam") {
      torch::optim::AdamOptions a(option(o, 0, kind));
      a.betas(betas).eps(option(o, 3, kind)).weight_decay(option(o, 4, kind));
      a.amsgrad(option(o, 5, kind) != 0);
      return std::make_unique<torch::optim::Adam>(params, a);
    }
    torch::optim::AdamWOptions a(option(o, 0, kind));
    a.betas(betas).eps(option(o, 3, kind)).weight_decay(option(o, 4, kind));
    a.amsgrad(option(o, 5, kind) != 0);
    return std::make_unique<torch::optim::AdamW>(params, a);
  }
  throw std::invalid_argument("unknown optimizer '" + kind + "'");
}

}  // namespace

int64_t OptimizerHost::create(const std::string& kind, const std::vector<double>& options,
                              std::vector<at::Tensor> params) {
  for (const auto& p : params) {
    if (!p.defined() || !p.is_leaf() || !p.requires_grad()) {
      throw std::invalid_argument("optimizer parameters must be leaf tensors that require grad");
    }
  }
  auto entry = std::make_shared<Entry>();
  entry->optimizer = makeOptimizer(kind, options, params);
  entry->params = std::move(params);
  std::lock_guard<std::mutex> lock(mu_);
  int64_t id = next_++;
  entries_.emplace(id, std::move(entry));
  return id;
}

void OptimizerHost::step(int64_t id, const ContextState& ctx) {
  std::shared_ptr<Entry> entry;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) throw std::invalid_argument("no optimizer " + std::to_string(id));
    entry = it->second;
  }
  std::lock_guard<std::mutex> lock(entry->mu);
  // The context's gradients stand in for .grad during the step; whatever the
  // parameters held there before is put back after.
  std::vector<at::Tensor> saved;
  saved.reserve(entry->params.size());
  for (auto& p : entry->params) {
    saved.push_back(p.grad());
    p.mutable_grad() = ctx.gradientOf(p);
  }
  try {
    entry->optimizer->step();
  } catch (...) {
    for (size_t i = 0; i < saved.size(); ++i) entry->params[i].mutable_grad() = saved[i];
    throw;
  }
  for (size_t i = 0; i < saved.size(); ++i) entry->params[i].mutable_grad() = saved[i];
}

void OptimizerHost::destroy(int64_t id) {
  std::shared_ptr<Entry> drop;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  drop = std::move(it->second);
  entries_.erase(it);
}

size_t OptimizerHost::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace rpcjob::runtime::autograd
