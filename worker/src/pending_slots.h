#pragma once
// The calls in flight, by id, without a lock on the common path: the front of
// the runtime's pending calls (PendingCalls, under pendingMu_, is the back).
//
// Why: every call is registered by its caller and taken out by the thread that
// reads its answer (a lane's poller), up to a million times a second each.
// Under one lock the two threads handed the lock's cache line, the table's and
// a per-peer count back and forth on every call: on the GPU host 7.3 % of the
// caller's time went to that lock, 4.1 % of it waiting for the poller to let
// go (benchmarks/results/2026-11-29-h200x1-session4.md).
//
// Here a call sits in the slot its id's low bits name. Ids are handed out in
// order, so a slot comes round again only `count` calls later; a call still
// unanswered by then keeps its slot, and the newer one goes to the locked
// table (tryInsert says kTaken). Each slot has cache lines of its own, so the
// caller writing its newest call and the poller taking an older one do not
// share a line.
//
// A slot's tag says who owns it: kEmpty, kBusy (one thread is writing or
// reading it, for a moment), or the id of the call in it. Ownership moves by
// compare-and-swap, so each call is taken exactly once, whoever races for it:
// the answer's reader, the timeout thread, a failed pipe's sweep, shutdown.
//
// The runtime's refusals (a pipe that failed, shutdown) without a lock: an
// inserter checks them while it owns its slot (tryInsert's `admit`), after a
// sequentially consistent compare-and-swap; a sweeper sets them (sequentially
// consistent) before it looks at the slots, and waits out busy ones. Either the
// sweep finds the call or the inserter sees the refusal, never neither.
//
// Deadlines: the timeout thread scans the slots (takeExpired), which it does
// at least every kTimeoutTick anyway. The runtime puts a call here only when
// its deadline is far enough ahead for such a scan to see it in time
// (runtime_calls.cc); earlier deadlines go to the locked table's heap.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

namespace rpcjob::runtime {

template <class Call>
class PendingSlots {
 public:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;
  // 512 KiB with the runtime's calls. A call unanswered while 4096 later ones
  // go out takes the locked path; the timeout thread's scan of them all, every
  // 100 ms at the least, costs tens of microseconds.
  static constexpr size_t kDefaultCount = 4096;

  // `count`: a power of two.
  explicit PendingSlots(size_t count = kDefaultCount) : slots_(new Slot[count]), mask_(count - 1) {}

  enum class Insert { kOk, kTaken, kRefused };

  // Registers call `id` (not 0) due at `deadline` (TimePoint::max(): never).
  // kTaken: an older call holds the slot; kRefused: admit() said no, checked
  // while the slot was ours. `call` is moved from only on kOk.
  template <class Admit>
  Insert tryInsert(uint64_t id, TimePoint deadline, Call& call, const Admit& admit) {
    Slot& s = slotOf(id);
    uint64_t expected = kEmpty;
    if (!s.tag.compare_exchange_strong(expected, kBusy, std::memory_order_seq_cst,
                                       std::memory_order_relaxed)) {
      return Insert::kTaken;
    }
    if (!admit()) {
      s.tag.store(kEmpty, std::memory_order_release);
      return Insert::kRefused;
    }
    s.call = std::move(call);
    s.deadline.store(deadline.time_since_epoch().count(), std::memory_order_relaxed);
    s.tag.store(id, std::memory_order_release);
    return Insert::kOk;
  }

  // Call `id`, taken out; none when it is not in its slot (answered, failed,
  // timed out, in the locked table, or never sent).
  std::optional<Call> take(uint64_t id) {
    Slot& s = slotOf(id);
    uint64_t tag = s.tag.load(std::memory_order_acquire);
    for (unsigned spins = 0;; ++spins) {
      if (tag == id) {
        if (s.tag.compare_exchange_weak(tag, kBusy, std::memory_order_acquire,
                                        std::memory_order_acquire)) {
          return release(s);
        }
        continue;  // `tag` reloaded
      }
      if (tag != kBusy) return std::nullopt;
      // Someone holds it for a moment: a sweep looking at our call, or
      // another call being written there.
      backOff(spins);
      tag = s.tag.load(std::memory_order_acquire);
    }
  }

  // Whether call `id` is still in its slot (for tests).
  bool holds(uint64_t id) const { return slotOf(id).tag.load(std::memory_order_acquire) == id; }

  // Every call for which pred(const Call&) holds, appended to `out`. Waits out
  // slots that are busy, so that a call being registered is either seen here
  // or sees what the caller changed before (the class comment).
  template <class Pred>
  void takeIf(const Pred& pred, std::vector<Call>& out) {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    for (size_t i = 0; i <= mask_; ++i) {
      Slot& s = slots_[i];
      uint64_t tag = s.tag.load(std::memory_order_seq_cst);
      for (unsigned spins = 0;; ++spins) {
        if (tag == kEmpty) break;
        if (tag == kBusy) {
          backOff(spins);
          tag = s.tag.load(std::memory_order_seq_cst);
          continue;
        }
        if (!s.tag.compare_exchange_weak(tag, kBusy, std::memory_order_seq_cst,
                                         std::memory_order_seq_cst)) {
          continue;
        }
        if (pred(static_cast<const Call&>(s.call))) {
          out.push_back(release(s));
        } else {
          s.tag.store(tag, std::memory_order_release);
        }
        break;
      }
    }
  }

  void takeAll(std::vector<Call>& out) {
    takeIf([](const Call&) { return true; }, out);
  }

  // Every call due at or before `now`, appended to `out`; the earliest
  // deadline of the calls left (TimePoint::max(): none). Slots busy at that
  // moment are passed over: the next scan sees them.
  TimePoint takeExpired(TimePoint now, std::vector<Call>& out) {
    const auto nowCount = now.time_since_epoch().count();
    auto earliest = TimePoint::max().time_since_epoch().count();
    for (size_t i = 0; i <= mask_; ++i) {
      Slot& s = slots_[i];
      uint64_t tag = s.tag.load(std::memory_order_acquire);
      if (tag == kEmpty || tag == kBusy) continue;
      const auto due = s.deadline.load(std::memory_order_relaxed);
      if (due > nowCount) {
        // Possibly a newer call's by now: harmless, an early wake-up at worst.
        earliest = std::min(earliest, due);
        continue;
      }
      if (!s.tag.compare_exchange_strong(tag, kBusy, std::memory_order_acquire,
                                         std::memory_order_relaxed)) {
        continue;  // taken meanwhile
      }
      if (s.deadline.load(std::memory_order_relaxed) <= nowCount) {
        out.push_back(release(s));
      } else {  // another call, registered between the two loads
        earliest = std::min(earliest, s.deadline.load(std::memory_order_relaxed));
        s.tag.store(tag, std::memory_order_release);
      }
    }
    return TimePoint(TimePoint::duration(earliest));
  }

  // No call in any slot (a scan: for shutdown, not for every call).
  bool empty() const {
    for (size_t i = 0; i <= mask_; ++i) {
      if (slots_[i].tag.load(std::memory_order_acquire) != kEmpty) return false;
    }
    return true;
  }

  size_t count() const { return mask_ + 1; }

 private:
  static constexpr uint64_t kEmpty = 0;
  static constexpr uint64_t kBusy = UINT64_MAX;  // ids never get there

  struct alignas(64) Slot {
    std::atomic<uint64_t> tag{kEmpty};
    // Read by the timeout scan without owning the slot.
    std::atomic<TimePoint::rep> deadline{0};
    Call call{};
  };

  Slot& slotOf(uint64_t id) const { return slots_[id & mask_]; }

  // The call out of an owned slot, which is then empty.
  static Call release(Slot& s) {
    Call call = std::move(s.call);
    s.tag.store(kEmpty, std::memory_order_release);
    return call;
  }

  static void backOff(unsigned spins) {
    if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    } else {
      std::this_thread::yield();  // its owner was preempted
    }
  }

  std::unique_ptr<Slot[]> slots_;
  size_t mask_;
};

}  // namespace rpcjob::runtime
