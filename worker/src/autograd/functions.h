#pragma once
// The two ends of a message in the local autograd graphs (PyTorch's
// SendRpcBackward / RecvRpcBackward).
//
// A sender that sends tensors requiring grad keeps a SendRecord in the context:
// the gradient edges of those tensors, where the backward pass continues once
// their gradients come back. The receiver's copies of the tensors get a
// RecvFunction as their grad_fn; the backward pass captures the gradients that
// reach it and sends them to the sender (autograd/propagation.h), so the local
// engine never runs it.
//
// Only stable autograd API here (Node, Edge, collect_next_edges,
// add_input_metadata, set_gradient_edge): the same in libtorch 1.13 and 2.x.

#include <torch/csrc/autograd/function.h>

#include <cstdint>
#include <vector>

namespace rpcjob::runtime::autograd {

struct SendRecord {
  torch::autograd::edge_list edges;  // one per tensor sent that requires grad
  std::vector<c10::Device> devices;  // where each of those tensors lived
};

class RecvFunction : public torch::autograd::Node {
 public:
  // `fromRequest`: the tensors were a call's arguments (else its response).
  RecvFunction(int64_t context, int peerRank, int64_t sendId, bool fromRequest)
      : context_(context), peerRank_(peerRank), sendId_(sendId), fromRequest_(fromRequest) {}
  // Reached only by a local backward() (not dist_autograd::backward): an error.
  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override;
  std::string name() const override { return "rpcjob::autograd::RecvFunction"; }

  int64_t context() const { return context_; }
  int peerRank() const { return peerRank_; }
  int64_t sendId() const { return sendId_; }
  bool fromRequest() const { return fromRequest_; }

 private:
  int64_t context_;
  int peerRank_;
  int64_t sendId_;
  bool fromRequest_;
};

}  // namespace rpcjob::runtime::autograd
