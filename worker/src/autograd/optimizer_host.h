#pragma once
// The owner's side of DistributedOptimizer: per optimizer id, a libtorch
// optimizer over the parameters this worker owns, stepped with a distributed
// autograd context's gradients (put in .grad for the step only, so contexts
// never mix; steps of one optimizer run one at a time).
//
// Thread safety: all methods may be called from any thread.

#include <ATen/core/Tensor.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace rpcjob::runtime::autograd {

class ContextState;

class OptimizerHost {
 public:
  // `kind` "sgd", "adam" or "adamw" with its options in the order
  // dist_optimizer.cc encodes them. Throws std::invalid_argument for others.
  int64_t create(const std::string& kind, const std::vector<double>& options,
                 std::vector<at::Tensor> params);
  void step(int64_t id, const ContextState& ctx);  // throws for an unknown id
  void destroy(int64_t id);
  size_t size() const;

 private:
  struct Entry;
  mutable std::mutex mu_;
  int64_t next_ = 1;
  std::map<int64_t, std::shared_ptr<Entry>> entries_;
};

}  // namespace rpcjob::runtime::autograd
