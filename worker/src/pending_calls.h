#pragma once
// The calls a runtime waits on, by call id, with their deadlines: what a small
// call inserts before its request is written and takes out when the answer
// comes, so every call pays for it twice, under the runtime's pendingMu_.
//
// A node-based map (std::unordered_map) plus a std::set of deadlines cost two
// allocations and two frees per call, and a measurable part of the
// async path (a million calls a second is a microsecond per call). Here:
// - the calls live in one open-addressed table (Robin Hood linear probing,
//   backward-shift deletion, at most half full, indexed by the id's low bits:
//   ids are sequential, so calls sit at home side by side), so inserting and
//   taking a call allocate nothing once the table has grown to the calls in
//   flight;
// - deadlines sit in a binary min-heap that is cleaned lazily: taking a call
//   leaves its entry behind, and an entry whose call is gone is dropped when it
//   reaches the top, or when such entries outnumber the live ones (the heap is
//   then rebuilt from the live calls: amortized constant time per call, and the
//   heap holds at most 2 x (calls in flight + 1) + 64 entries);
// - both shrink again once they are large and mostly empty (kLargeSlots).
//
// Not thread-safe: the runtime holds pendingMu_ around every use.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace rpcjob::runtime {

template <class Call>
class PendingCalls {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  static constexpr TimePoint kNoDeadline = TimePoint::max();

  // Adds call `id` (not 0, not already here), due at `deadline` (kNoDeadline: never).
  void insert(uint64_t id, TimePoint deadline, Call call) {
    if (2 * (size_ + 1) > slots_.size()) {
      rehash(slots_.empty() ? kInitialSlots : 2 * slots_.size());
    }
    place(Slot{id, std::move(call)});
    ++size_;
    if (deadline != kNoDeadline) {
      deadlines_.emplace_back(deadline, id);
      std::push_heap(deadlines_.begin(), deadlines_.end(), Later());
      if (deadlines_.size() > 2 * size_ + kHeapSlack) rebuildDeadlines();
    }
  }

  // Call `id`, taken out; none when it is not here (answered, failed or timed out).
  std::optional<Call> take(uint64_t id) {
    const size_t at = find(id);
    if (at == kNotFound) return std::nullopt;
    return removeAt(at);
  }

  // The earliest deadline of a call still here (kNoDeadline: none).
  TimePoint nextDeadline() {
    dropStaleTop();
    return deadlines_.empty() ? kNoDeadline : deadlines_.front().first;
  }

  // The call with the earliest deadline, taken out, if that deadline is at or
  // before `now`.
  std::optional<Call> takeExpired(TimePoint now) {
    dropStaleTop();
    if (deadlines_.empty() || deadlines_.front().first > now) return std::nullopt;
    const uint64_t id = deadlines_.front().second;
    std::pop_heap(deadlines_.begin(), deadlines_.end(), Later());
    deadlines_.pop_back();
    return removeAt(find(id));  // live: dropStaleTop() checked
  }

  // Every call for which `pred(const Call&)` holds, taken out (a failed pipe's).
  template <class Pred>
  std::vector<Call> takeIf(const Pred& pred) {
    std::vector<uint64_t> ids;  // removing shifts slots: collect first
    for (const Slot& s : slots_) {
      if (s.id != 0 && pred(s.call)) ids.push_back(s.id);
    }
    std::vector<Call> taken;
    taken.reserve(ids.size());
    for (uint64_t id : ids) taken.push_back(removeAt(find(id)));
    return taken;
  }

  std::vector<Call> takeAll() {
    return takeIf([](const Call&) { return true; });
  }

  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  // Deadline entries held, stale ones included (for tests of the bound above).
  size_t deadlineEntries() const { return deadlines_.size(); }
  size_t slotCount() const { return slots_.size(); }

 private:
  struct Slot {
    uint64_t id = 0;  // 0: empty
    Call call{};
  };
  using Deadline = std::pair<TimePoint, uint64_t>;
  struct Later {  // std::*_heap keep the greatest first: this puts the earliest there
    bool operator()(const Deadline& a, const Deadline& b) const { return a.first > b.first; }
  };
  static constexpr size_t kNotFound = SIZE_MAX;
  static constexpr size_t kInitialSlots = 64;
  static constexpr size_t kHeapSlack = 64;
  // Past this many slots (deadline entries), a table (heap) that has become
  // sparse is made smaller again: a burst of a million calls in flight must
  // not keep its hundreds of megabytes for the runtime's lifetime. Below it,
  // the memory stays, so that bursts of the usual size do not rehash each time.
  static constexpr size_t kLargeSlots = size_t{1} << 16;
  static constexpr size_t kLargeHeap = size_t{1} << 16;

  size_t home(uint64_t id) const {
    // The id itself: ids are sequential, so the calls in flight sit side by
    // side as the memory they were allocated from did in a node-based map (a
    // burst of async calls inserts and takes them in order, cache line by
    // cache line). A mixing hash measured slower: every call a cache miss.
    return static_cast<size_t>(id) & mask();
  }
  size_t mask() const { return slots_.size() - 1; }

  // How far slot `at`'s call sits from its home.
  size_t distance(size_t at) const { return (at - home(slots_[at].id)) & mask(); }

  size_t find(uint64_t id) const {
    if (slots_.empty()) return kNotFound;
    for (size_t at = home(id), d = 0;; at = (at + 1) & mask(), ++d) {
      if (slots_[at].id == id) return at;
      // Robin Hood order: a call farther from home than this slot's would sit here.
      if (slots_[at].id == 0 || distance(at) < d) return kNotFound;
    }
  }

  void place(Slot slot) {
    // Robin Hood: a call displaced farther than the slot's resident takes its
    // place, and the resident moves on. Probe runs stay short and ordered, so
    // lookups of absent ids and deletions stop early (a run of calls at home,
    // the common case here, costs nothing to walk past).
    size_t at = home(slot.id);
    for (size_t d = 0; slots_[at].id != 0; at = (at + 1) & mask(), ++d) {
      const size_t resident = distance(at);
      if (resident < d) {
        std::swap(slot, slots_[at]);
        d = resident;
      }
    }
    slots_[at] = std::move(slot);
  }

  Call removeAt(size_t at) {
    Call call = std::move(slots_[at].call);
    --size_;
    // Backward-shift deletion: the calls after it in its run move back one
    // slot, until an empty slot or a call at home; no tombstones.
    size_t hole = at;
    for (size_t next = (hole + 1) & mask(); slots_[next].id != 0 && distance(next) > 0;
         next = (next + 1) & mask()) {
      slots_[hole] = std::move(slots_[next]);
      hole = next;
    }
    slots_[hole] = Slot{};
    if (slots_.size() > kLargeSlots && 16 * size_ < slots_.size()) {
      size_t count = kLargeSlots;
      while (count < 4 * size_) count *= 2;
      rehash(count);
    }
    return call;
  }

  void rehash(size_t count) {
    std::vector<Slot> old = std::move(slots_);
    slots_ = std::vector<Slot>(count);
    for (Slot& s : old) {
      if (s.id != 0) place(std::move(s));
    }
  }

  void trimDeadlines() {
    if (deadlines_.capacity() > kLargeHeap && deadlines_.capacity() > 4 * deadlines_.size()) {
      deadlines_.shrink_to_fit();
    }
  }

  void dropStaleTop() {
    while (!deadlines_.empty() && find(deadlines_.front().second) == kNotFound) {
      std::pop_heap(deadlines_.begin(), deadlines_.end(), Later());
      deadlines_.pop_back();
    }
    if (deadlines_.empty()) trimDeadlines();
  }

  void rebuildDeadlines() {
    deadlines_.erase(std::remove_if(deadlines_.begin(), deadlines_.end(),
                                    [&](const Deadline& d) { return find(d.second) == kNotFound; }),
                     deadlines_.end());
    trimDeadlines();
    std::make_heap(deadlines_.begin(), deadlines_.end(), Later());
  }

  std::vector<Slot> slots_;  // a power of two in size, or empty
  size_t size_ = 0;
  std::vector<Deadline> deadlines_;  // a heap (Later), stale entries included
};

}  // namespace rpcjob::runtime
