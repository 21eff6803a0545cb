#pragma once
// What a lane's sender has lent its peer: per request frame that carried CUDA
// tensors as handles (handles_wire.h), whatever must stay alive until the
// peer's kLaneCopied names it (the message, its events), or until the lane
// ends. Pure and header-only; T is the caller's (cuda_lane.cc).
//
// Thread-safe: the sender adds under its write lock, the poller's thread takes
// on kLaneCopied, and whoever ends the lane takes everything.

#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace rpcjob::runtime::cuda_lane {

template <typename T>
class Handoffs {
 public:
  // Keeps `value` under a new id (from 1, never reused); 0, and `value` is
  // left alone, once close() was called (the lane ended: nothing more is lent).
  uint64_t add(T& value) {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return 0;
    const uint64_t id = next_++;
    lent_.emplace(id, std::move(value));
    return id;
  }
  // The value kept under `id`, taken out; none for an id never given or taken
  // already (a peer's confusion: the caller says so).
  std::optional<T> take(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = lent_.find(id);
    if (it == lent_.end()) return std::nullopt;
    std::optional<T> out(std::move(it->second));
    lent_.erase(it);
    return out;
  }
  // Ends lending: later add()s return 0; what is still kept is the caller's.
  std::vector<T> close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    std::vector<T> out;
    out.reserve(lent_.size());
    for (auto& [id, value] : lent_) out.push_back(std::move(value));
    lent_.clear();
    return out;
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return lent_.size();
  }

 private:
  mutable std::mutex mu_;
  bool closed_ = false;
  uint64_t next_ = 1;
  std::unordered_map<uint64_t, T> lent_;
};

}  // namespace rpcjob::runtime::cuda_lane
