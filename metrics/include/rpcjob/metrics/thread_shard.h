#pragma once

// Which shard of a per-thread metric the calling thread writes.
//
// Why: a relaxed fetch_add is a locked instruction (~6 ns, more when another
// core holds the line), and a served call recorded three of them on the lane
// poller that bounds the async call rate. A thread that owns its shard adds
// with a plain load and store instead; a scrape sums the shards.
//
// The first kOwnedShards threads that ask own one index each until they exit;
// their index then goes to the next thread that asks (the sums carry on: a
// shard is never cleared). Any thread beyond those shares index kOwnedShards,
// whose adds stay atomic.

#include <atomic>
#include <cstdint>

namespace rpcjob {
namespace metrics {
namespace thread_shard {

inline constexpr unsigned kOwnedShards = 31;
// Shards of a metric kept per thread: the owned ones and the shared one.
inline constexpr unsigned kShards = kOwnedShards + 1;

// This thread's index: below kOwnedShards when it owns that shard, else
// kOwnedShards. Lock-free after a thread's first call (which takes a mutex).
unsigned index() noexcept;

// This thread's shard and whether it owns it (add()'s `owned`).
struct Mine {
  unsigned index = kOwnedShards;
  bool owned = false;
};
inline Mine mine() noexcept {
  const unsigned i = index();
  return {i, i < kOwnedShards};
}

// Adds `n` to a shard's value: a plain read and write where this thread owns
// the shard (no other thread writes it), a fetch_add on the shared one.
inline void add(std::atomic<std::uint64_t>& value, std::uint64_t n, bool owned) noexcept {
  if (owned) {
    value.store(value.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  } else {
    value.fetch_add(n, std::memory_order_relaxed);
  }
}

}  // namespace thread_shard
}  // namespace metrics
}  // namespace rpcjob
