#include "rpcjob/metrics/tick_clock.h"

#include <chrono>
#include <fstream>
#include <string>

namespace rpcjob {
namespace metrics {
namespace tick_clock {

std::atomic<bool> gUseTsc{false};

namespace {

bool invariantTsc() {
#if defined(__x86_64__)
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) == 0) {
      return line.find(" constant_tsc") != std::string::npos &&
             line.find(" nonstop_tsc") != std::string::npos;
    }
  }
#endif
  return false;
}

struct Calibration {
  bool tsc = false;
  double secondsPerTick = 1e-9;
  Calibration() {
    tsc = invariantTsc();
    if (!tsc) {
      return;
    }
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    const std::uint64_t c0 = nowTsc();
    while (Clock::now() - t0 < std::chrono::milliseconds(2)) {
    }
    const auto t1 = Clock::now();
    const std::uint64_t c1 = nowTsc();
    const double elapsed = std::chrono::duration<double>(t1 - t0).count();
    if (c1 <= c0) {
      tsc = false;
      return;
    }
    secondsPerTick = elapsed / static_cast<double>(c1 - c0);
    gUseTsc.store(true, std::memory_order_relaxed);
  }
};

const Calibration& calibration() {
  static const Calibration instance;  // thread-safe initialisation
  return instance;
}

}  // namespace

bool usesTsc() {
  return calibration().tsc;
}
double nanosPerTick() {
  return calibration().secondsPerTick * 1e9;
}

std::uint64_t nowSteady() noexcept {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

}  // namespace tick_clock
}  // namespace metrics
}  // namespace rpcjob
