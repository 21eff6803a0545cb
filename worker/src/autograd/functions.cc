#include "autograd/functions.h"

#include <stdexcept>
#include <string>

namespace rpcjob::runtime::autograd {

torch::autograd::variable_list RecvFunction::apply(torch::autograd::variable_list&&) {
  throw std::runtime_error(
      "a tensor received by RPC in distributed autograd context " + std::to_string(context_) +
      " was reached by a local backward pass; use rpcjob::runtime::dist_autograd::backward");
}

}  // namespace rpcjob::runtime::autograd
