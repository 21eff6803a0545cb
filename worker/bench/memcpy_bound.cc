#include "memcpy_bound.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

namespace rpcjob::bench {
namespace {

double copySeconds(char* to, const char* from, size_t bytes, int threads) {
  const auto start = std::chrono::steady_clock::now();
  if (threads <= 1) {
    std::memcpy(to, from, bytes);
  } else {
    std::vector<std::thread> workers;
    const size_t slice = (bytes + threads - 1) / threads;
    for (int t = 0; t < threads; ++t) {
      const size_t begin = std::min(bytes, slice * t), end = std::min(bytes, begin + slice);
      workers.emplace_back([=] { std::memcpy(to + begin, from + begin, end - begin); });
    }
    for (auto& w : workers) w.join();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

CopyBound measureCopyBound(size_t bytes, int threads, int rounds) {
  std::unique_ptr<char[]> from(new char[bytes]), to(new char[bytes]);
  std::memset(from.get(), 1, bytes);  // touched: no page faults in the timed copies
  std::memset(to.get(), 0, bytes);
  CopyBound best;
  for (int n : {1, threads}) {
    for (int r = 0; r < rounds; ++r) {
      const double gbps =
          static_cast<double>(bytes) / copySeconds(to.get(), from.get(), bytes, n) / 1e9;
      if (gbps > best.gbps) best = {gbps, n};
    }
  }
  return best;
}

int copyChannelThreads() {
  const char* env = std::getenv("RPCJOB_MTCMA_THREADS");
  if (env != nullptr && std::atoi(env) > 0) return std::atoi(env);
  return static_cast<int>(std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
}

}  // namespace rpcjob::bench
