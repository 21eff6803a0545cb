#include "rpcjob/metrics/thread_shard.h"

#include <mutex>
#include <vector>

namespace rpcjob {
namespace metrics {
namespace thread_shard {
namespace {

// The indices not owned by a living thread. Never destroyed: threads may exit
// (and give theirs back) during static destruction.
struct Pool {
  std::mutex mu;
  unsigned next = 0;           // indices never handed out start here
  std::vector<unsigned> free;  // given back by threads that exited
};
Pool& pool() {
  static Pool* instance = [] {
    auto* p = new Pool;
    p->free.reserve(kOwnedShards);  // giving an index back never allocates
    return p;
  }();
  return *instance;
}

// Trivially constructible, so reading it costs no guard; -1 until assigned.
thread_local int tIndex = -1;

// Gives this thread's index back when it exits. The pool's mutex orders the
// exiting owner's last adds before the next owner's first.
struct Owner {
  ~Owner() {
    if (tIndex < 0 || static_cast<unsigned>(tIndex) >= kOwnedShards) return;
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mu);
    p.free.push_back(static_cast<unsigned>(tIndex));
  }
};

unsigned assign() noexcept {
  Pool& p = pool();
  unsigned index = kOwnedShards;
  {
    std::lock_guard<std::mutex> lock(p.mu);
    if (!p.free.empty()) {
      index = p.free.back();
      p.free.pop_back();
    } else if (p.next < kOwnedShards) {
      index = p.next++;
    }
  }
  if (index < kOwnedShards) {
    thread_local Owner owner;  // constructed here: its destructor runs at this thread's exit
    (void)owner;
  }
  tIndex = static_cast<int>(index);
  return index;
}

}  // namespace

unsigned index() noexcept {
  const int index = tIndex;
  return index >= 0 ? static_cast<unsigned>(index) : assign();
}

}  // namespace thread_shard
}  // namespace metrics
}  // namespace rpcjob
