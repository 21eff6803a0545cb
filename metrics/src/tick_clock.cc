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

// A tight reading's counter reads are at most this far apart: a few hundred
// ticks normally, 4 us at 1 GHz. A preemption between them (a loaded machine
// at start-up) would put the pair's moment anywhere in between and skew the
// rate for the process's life.
constexpr std::uint64_t kMaxPairTicks = 4000;

struct Calibration {
  bool tsc = false;
  double secondsPerTick = 1e-9;
  Calibration() {
    if (!invariantTsc()) {
      return;
    }
    const double nsPerTick = calibrate(readAround, 2'000'000);
    if (!(nsPerTick > 0)) {
      return;  // the steady clock, as without an invariant counter
    }
    tsc = true;
    secondsPerTick = nsPerTick * 1e-9;
    gUseTsc.store(true, std::memory_order_relaxed);
  }
};

const Calibration& calibration() {
  static const Calibration instance;  // thread-safe initialisation
  return instance;
}

}  // namespace

TickReading readAround() noexcept {
  TickReading r;
  r.before = nowTsc();
  r.steadyNs = static_cast<std::int64_t>(nowSteady());
  r.after = nowTsc();
  return r;
}

double calibrate(const std::function<TickReading()>& read, std::int64_t spanNs) {
  auto tight = [&](TickReading& r) {
    for (int attempt = 0; attempt < 100; ++attempt) {
      r = read();
      if (r.tight(kMaxPairTicks)) return true;
    }
    return false;
  };
  TickReading start, end;
  if (!tight(start)) return 0;
  do {
    if (!tight(end)) return 0;
  } while (end.steadyNs - start.steadyNs < spanNs);
  const std::uint64_t c0 = start.middle();
  const std::uint64_t c1 = end.middle();
  if (c1 <= c0) return 0;
  return static_cast<double>(end.steadyNs - start.steadyNs) / static_cast<double>(c1 - c0);
}

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
