#include "autograd/context.h"

#include <c10/core/impl/VirtualGuardImpl.h>

namespace rpcjob::runtime::autograd {

int64_t ContextState::addSend(std::shared_ptr<SendRecord> record) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t id = nextSendId_++;
  sends_.emplace(id, std::move(record));
  return id;
}

std::shared_ptr<SendRecord> ContextState::send(int64_t sendId) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sends_.find(sendId);
  return it == sends_.end() ? nullptr : it->second;
}

void ContextState::forgetSends() {
  std::unordered_map<int64_t, std::shared_ptr<SendRecord>> drop;
  std::lock_guard<std::mutex> lock(mu_);
  drop.swap(sends_);
}

void ContextState::addKnownWorker(int rank) {
  std::lock_guard<std::mutex> lock(mu_);
  knownWorkers_.insert(rank);
}

std::set<int> ContextState::knownWorkers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return knownWorkers_;
}

void ContextState::accumulate(const at::Tensor& leaf, const at::Tensor& grad) {
  std::lock_guard<std::mutex> lock(mu_);
  const c10::Device device = grad.device();
  const bool streamed = device.type() != c10::DeviceType::CPU;
  // A sum with an earlier gradient reads it: after that one's stream is done.
  if (streamed) waitForReady();
  auto [it, added] = grads_.try_emplace(leaf.unsafeGetTensorImpl(), leaf, grad);
  // Out of place: the stored gradient may be one the engine handed to others.
  if (!added) it->second.second = it->second.second.add(grad);
  if (streamed) {
    const c10::impl::VirtualGuardImpl impl(device.type());
    const c10::Stream stream = impl.getStream(device);
    Ready& ready = ready_.try_emplace(device, device.type()).first->second;
    ready.event.record(stream);
    waited_[stream] = ++ready.version;  // its own mark: ordered already
  }
}

void ContextState::waitForReady() const {
  for (const auto& [device, ready] : ready_) {
    const c10::Stream stream = c10::impl::VirtualGuardImpl(device.type()).getStream(device);
    uint64_t& waited = waited_[stream];
    if (waited == ready.version) continue;
    ready.event.block(stream);
    waited = ready.version;
  }
}

std::vector<std::pair<at::Tensor, at::Tensor>> ContextState::gradients() const {
  std::lock_guard<std::mutex> lock(mu_);
  waitForReady();
  std::vector<std::pair<at::Tensor, at::Tensor>> out;
  out.reserve(grads_.size());
  for (const auto& entry : grads_) out.push_back(entry.second);
  return out;
}

at::Tensor ContextState::gradientOf(const at::Tensor& leaf) const {
  std::lock_guard<std::mutex> lock(mu_);
  waitForReady();
  auto it = grads_.find(leaf.unsafeGetTensorImpl());
  return it == grads_.end() ? at::Tensor() : it->second.second;
}

}  // namespace rpcjob::runtime::autograd
