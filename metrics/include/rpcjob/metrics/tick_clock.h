#pragma once

// A cheap monotonic clock for transfer and call durations.
//
// std::chrono::steady_clock::now() costs 20-80 ns (clock_gettime through the
// vDSO; more in some VMs), and a transfer reads the clock twice. On x86-64 with
// an invariant TSC (constant_tsc and nonstop_tsc: synchronised across cores,
// constant rate) rdtsc is a few ns; ticks are converted to seconds with a factor
// calibrated once against steady_clock. Elsewhere it falls back to steady_clock.

#include <atomic>
#include <cstdint>
#include <functional>

namespace rpcjob {
namespace metrics {
namespace tick_clock {

// Whether ticks are TSC cycles (true) or steady_clock nanoseconds (false).
// Decided, and the TSC calibrated (~2 ms), on the first call.
bool usesTsc();

std::uint64_t nowSteady() noexcept;
inline std::uint64_t nowTsc() noexcept {
#if defined(__x86_64__)
  return __builtin_ia32_rdtsc();
#else
  return nowSteady();
#endif
}

// Call nanosPerTick() (or usesTsc()) once before the hot path: this reads a
// flag that is set then.
extern std::atomic<bool> gUseTsc;

inline std::uint64_t now() noexcept {
  return gUseTsc.load(std::memory_order_relaxed) ? nowTsc() : nowSteady();
}

// Nanoseconds per tick. Calls usesTsc() first.
double nanosPerTick();

// The counter just before and just after one steady-clock reading. Tight when
// the two counter reads are close together (the thread was not preempted
// between them): their middle is then the clock's moment.
struct TickReading {
  std::uint64_t before = 0;
  std::int64_t steadyNs = 0;
  std::uint64_t after = 0;
  bool tight(std::uint64_t maxTicks) const noexcept {
    return after >= before && after - before <= maxTicks;
  }
  std::uint64_t middle() const noexcept { return before + (after - before) / 2; }
};
// A reading now (the calibration's, and the runtime's event-clock anchors).
TickReading readAround() noexcept;

// The calibration's arithmetic, apart for its test: nanoseconds per tick from
// two tight readings at least `spanNs` apart; 0 when `read` gave no tight
// reading in 100 tries.
double calibrate(const std::function<TickReading()>& read, std::int64_t spanNs);

// Nanoseconds between two now() readings (0 if the clock went backwards: TSC
// reads on two cores may differ by a few cycles), with `nsPerTick` from
// nanosPerTick(): one multiplication, no division.
inline std::uint64_t nanos(std::uint64_t start, std::uint64_t end, double nsPerTick) noexcept {
  return end > start ? static_cast<std::uint64_t>(static_cast<double>(end - start) * nsPerTick) : 0;
}

}  // namespace tick_clock
}  // namespace metrics
}  // namespace rpcjob
