#pragma once
// One distributed autograd context on one worker: the messages it sent with
// tensors that require grad (their SendRecords, by id), the workers it sent
// anything to (they joined, and are released with it), and the gradients its
// backward passes accumulated here, by leaf tensor.
//
// Thread safety: every method locks; the context's graph parts (the edges in
// its SendRecords) are shared with the engine, which runs outside the lock.

#include <ATen/core/Tensor.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "autograd/functions.h"
#include "autograd/help_queue.h"

namespace rpcjob::runtime::autograd {

class ContextState {
 public:
  explicit ContextState(int64_t id) : id_(id) {}
  int64_t id() const { return id_; }

  int64_t addSend(std::shared_ptr<SendRecord> record);
  std::shared_ptr<SendRecord> send(int64_t sendId) const;  // null: unknown
  void forgetSends();                                      // frees this worker's part of the graph

  void addKnownWorker(int rank);
  std::set<int> knownWorkers() const;

  // Device gradients are ordered by stream, not by the host: accumulate() marks
  // each device's gradients ready on the calling thread's current stream, and
  // the readers make their own current streams wait for that mark (PyTorch's
  // context does the same), so a reader on another stream (a `then` callback
  // on a pool stream, an optimizer step on a side stream) never sees a
  // gradient before the kernels that computed it ran.
  void accumulate(const at::Tensor& leaf, const at::Tensor& grad);
  std::vector<std::pair<at::Tensor, at::Tensor>> gradients() const;
  at::Tensor gradientOf(const at::Tensor& leaf) const;

  // The gradient work of this context that a thread waiting in its backward
  // pass runs (help_queue.h).
  HelpQueue& help() { return help_; }

 private:
  const int64_t id_;
  mutable std::mutex mu_;
  int64_t nextSendId_ = 1;
  std::unordered_map<int64_t, std::shared_ptr<SendRecord>> sends_;
  std::set<int> knownWorkers_;
  // By the leaf's TensorImpl; the pair holds the leaf so the key stays valid.
  std::unordered_map<const c10::TensorImpl*, std::pair<at::Tensor, at::Tensor>> grads_;
  // Per device with streams (CUDA), where its last accumulation was enqueued,
  // and how many times that was.
  struct Ready {
    explicit Ready(c10::DeviceType type) : event(type) {}
    c10::Event event;
    uint64_t version = 0;
  };
  std::unordered_map<c10::Device, Ready> ready_;
  // Per stream, the version of its device's Ready it already waits for: a
  // stream stays ordered after what it waited for, so only a new accumulation
  // needs a new wait. The optimizer reads every parameter's gradient in turn;
  // without this each read made every device's current stream wait again.
  mutable std::unordered_map<c10::Stream, uint64_t> waited_;
  HelpQueue help_;

  void waitForReady() const;  // under mu_: the current streams wait on ready_
};

}  // namespace rpcjob::runtime::autograd
