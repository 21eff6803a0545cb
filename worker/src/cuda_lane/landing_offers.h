#pragma once
// Landing offers (README.md: "Pushed into landing offers"): buffers a lane's
// receiver holds for its sender's next CUDA tensors of a size, which the
// sender copies into itself. The bookkeeping of both ends, pure and
// header-only; the buffers and offers are the caller's types (cuda_lane.cc).
//
// Why both ends count: an offer is the receiver's memory until the sender
// pushes into it or gives it back, and only the sender knows which it will
// use; so the receiver caps what it offers (a budget of bytes) and the
// sender gives back what it has not used for a while.

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace rpcjob::runtime::cuda_lane {

// (device, bytes): the size of tensor an offer is for.
using LandingSize = std::pair<int, uint64_t>;

// The receiver's side. One lane's; not thread-safe (its poller's thread).
template <typename Buffer>
class OfferedBuffers {
 public:
  explicit OfferedBuffers(uint64_t budget) : budget_(budget) {}

  // After a frame whose large tensors were `frame` (a size listed twice:
  // two): the offers to make so that as many of each size are out as the
  // frame had, while the budget allows, in the frame's order.
  std::vector<LandingSize> wanted(const std::vector<LandingSize>& frame) const {
    std::map<LandingSize, size_t> out;
    for (const auto& [id, o] : out_) out[{o.device, o.bytes}]++;
    std::vector<LandingSize> make;
    uint64_t bytes = bytes_;
    for (const LandingSize& s : frame) {
      size_t& have = out[s];
      if (have > 0) {
        --have;  // this tensor's share of what is out
        continue;
      }
      if (s.second == 0 || bytes > budget_ || s.second > budget_ - bytes) continue;
      bytes += s.second;
      make.push_back(s);
    }
    return make;
  }
  // Holds `buffer` as a new offer of `size`; its id (from 1, never reused).
  uint64_t add(const LandingSize& size, Buffer buffer) {
    const uint64_t id = next_++;
    out_.emplace(id, Out{size.first, size.second, std::move(buffer)});
    bytes_ += size.second;
    return id;
  }
  // The buffer of offer `id`, for a tensor of `size` pushed into it: taken
  // out. None, with why: an id never offered or used already, or a size
  // other than the offer's (the sender's confusion, or a hostile one).
  std::optional<Buffer> take(uint64_t id, const LandingSize& size, std::string& why) {
    auto it = out_.find(id);
    if (it == out_.end()) {
      why = "a tensor pushed into landing offer " + std::to_string(id) + ", not one held";
      return std::nullopt;
    }
    if (it->second.device != size.first || it->second.bytes != size.second) {
      why = "a tensor of " + std::to_string(size.second) +
            " bytes for cuda:" + std::to_string(size.first) + " pushed into landing offer " +
            std::to_string(id) + " of " + std::to_string(it->second.bytes) +
            " bytes on cuda:" + std::to_string(it->second.device);
      return std::nullopt;
    }
    return remove(it);
  }
  // An offer given back unused (or withdrawn before it was sent): its buffer,
  // or none for an id not held.
  std::optional<Buffer> giveBack(uint64_t id) {
    auto it = out_.find(id);
    if (it == out_.end()) return std::nullopt;
    return remove(it);
  }
  // Everything held, taken out (the lane ended).
  std::vector<Buffer> close() {
    std::vector<Buffer> all;
    for (auto& [id, o] : out_) all.push_back(std::move(o.buffer));
    out_.clear();
    bytes_ = 0;
    return all;
  }
  size_t size() const { return out_.size(); }
  uint64_t bytes() const { return bytes_; }

 private:
  struct Out {
    int device;
    uint64_t bytes;
    Buffer buffer;
  };
  Buffer remove(typename std::map<uint64_t, Out>::iterator it) {
    Buffer b = std::move(it->second.buffer);
    bytes_ -= it->second.bytes;
    out_.erase(it);
    return b;
  }

  uint64_t budget_;
  uint64_t bytes_ = 0;
  uint64_t next_ = 1;
  std::map<uint64_t, Out> out_;
};

// The sender's side: the offers it holds. Thread-safe: lend() takes and ages
// them under the lane's write lock, the poller's thread adds, the lane's end
// takes all.
template <typename Offer>
class HeldOffers {
 public:
  // An offer not used in this many frames that carried CUDA tensors goes back.
  static constexpr uint64_t kUnusedFrames = 8;

  void add(Offer offer, const LandingSize& size) {
    std::lock_guard<std::mutex> lock(mu_);
    held_.push_back(Held{size, frames_, true, std::move(offer)});
  }
  // An offer never to be used (it could not be opened): given back by the
  // next age(), so that the receiver does not hold its buffer, and count it
  // as out, for the rest of the lane.
  void giveBackUnused(Offer offer, const LandingSize& size) {
    std::lock_guard<std::mutex> lock(mu_);
    held_.push_back(Held{size, frames_, false, std::move(offer)});
  }
  // The oldest held offer of exactly `size`, taken out; none when there is none.
  std::optional<Offer> take(const LandingSize& size) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = held_.begin(); it != held_.end(); ++it) {
      if (it->usable && it->size == size) {
        std::optional<Offer> out(std::move(it->offer));
        held_.erase(it);
        return out;
      }
    }
    return std::nullopt;
  }
  // Once per frame that carries CUDA tensors, before it takes any: the offers
  // held unused for kUnusedFrames such frames (and those giveBackUnused()
  // named), at most `most` (what one frame may give back), taken out to be
  // given back; the rest wait for the next frame.
  std::vector<Offer> age(size_t most) {
    std::lock_guard<std::mutex> lock(mu_);
    ++frames_;
    std::vector<Offer> old;
    for (auto it = held_.begin(); it != held_.end() && old.size() < most;) {
      if (!it->usable || frames_ - it->since > kUnusedFrames) {
        old.push_back(std::move(it->offer));
        it = held_.erase(it);
      } else {
        ++it;
      }
    }
    return old;
  }
  std::vector<Offer> close() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Offer> all;
    for (Held& h : held_) all.push_back(std::move(h.offer));
    held_.clear();
    return all;
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return held_.size();
  }

 private:
  struct Held {
    LandingSize size;
    uint64_t since;  // frames_ when it came
    bool usable;
    Offer offer;
  };
  mutable std::mutex mu_;
  uint64_t frames_ = 0;
  std::vector<Held> held_;
};

// Offers a lane's end left out, by the client process that may still write
// into them (pushes queued in frames the receiver never took, which that
// process's GPU may not have run yet): held until that process is gone.
// Thread-safe.
template <typename Buffer>
class Quarantine {
 public:
  // Holds `buffers` for `pid`, then looks at every pid held: the buffers of
  // those `alive` says are gone come back, for the caller to let go (outside
  // this lock: their release may take the allocator's).
  template <typename Alive>
  std::vector<Buffer> keep(int64_t pid, std::vector<Buffer> buffers, Alive alive) {
    std::lock_guard<std::mutex> lock(mu_);
    for (Buffer& b : buffers) held_.emplace_back(pid, std::move(b));
    std::vector<Buffer> gone;
    for (auto it = held_.begin(); it != held_.end();) {
      if (!alive(it->first)) {
        gone.push_back(std::move(it->second));
        it = held_.erase(it);
      } else {
        ++it;
      }
    }
    return gone;
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return held_.size();
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<int64_t, Buffer>> held_;
};

}  // namespace rpcjob::runtime::cuda_lane
