#include <chrono>
#include <cstdint>

#include "event_clock.h"

#include "rpcjob/metrics/tick_clock.h"
#include "rpcjob/runtime/observer.h"

namespace rpcjob::runtime {
namespace {

using Clock = std::chrono::steady_clock;
namespace tick_clock = metrics::tick_clock;

// How long a thread extrapolates from one steady-clock reading. The counter's
// rate is calibrated to a few parts in 10^5 (tick_clock.cc), so the error grows
// by about a nanosecond over this span; a real read per 50 us is noise.
constexpr double kSpanNs = 50'000;

// One thread's steady-clock reading and the counter at that moment.
// Trivially constructible: a thread_local without a guard.
struct Anchor {
  std::uint64_t tsc = 0;
  std::int64_t steadyNs = 0;
  std::uint64_t spanTicks = 0;  // 0: not anchored, or no invariant counter
  double nsPerTick = 0;
};
thread_local Anchor tAnchor;

Clock::time_point fromNanos(std::int64_t ns) {
  return Clock::time_point(
      std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(ns)));
}

// A bracket wider than this was interrupted (the thread preempted between its
// reads): its middle may be far from the clock's moment, so it anchors nothing.
constexpr double kMaxBracketNs = 1'000;

Clock::time_point anchor(Anchor& a) noexcept {
  if (!tick_clock::usesTsc()) return Clock::now();
  const double nsPerTick = tick_clock::nanosPerTick();
  const tick_clock::TickReading r = tick_clock::readAround();
  if (!r.tight(static_cast<std::uint64_t>(kMaxBracketNs / nsPerTick))) {
    a.spanTicks = 0;  // the next reading tries again
    return fromNanos(r.steadyNs);
  }
  a.nsPerTick = nsPerTick;
  a.tsc = r.middle();
  a.steadyNs = r.steadyNs;
  a.spanTicks = static_cast<std::uint64_t>(kSpanNs / nsPerTick);
  return fromNanos(r.steadyNs);
}

// The time at counter value `t`, or false when it lies outside the anchor's
// span. Unsigned: a counter behind the anchor (another core's, a few cycles
// off) is a large difference, and re-anchors too.
bool extrapolate(const Anchor& a, std::uint64_t t, Clock::time_point& out) noexcept {
  const std::uint64_t since = t - a.tsc;
  if (since >= a.spanTicks) return false;
  out = fromNanos(a.steadyNs + static_cast<std::int64_t>(static_cast<double>(since) * a.nsPerTick));
  return true;
}

}  // namespace

Clock::time_point readEventClock() noexcept {
  Anchor& a = tAnchor;
  Clock::time_point out;
  if (extrapolate(a, tick_clock::nowTsc(), out)) return out;
  return anchor(a);
}

Clock::time_point eventClockAt(std::uint64_t tsc) noexcept {
  // An anchored span means the counter is the event clock's (spanTicks is 0
  // where it is not).
  Anchor& a = tAnchor;
  Clock::time_point out;
  if (extrapolate(a, tsc, out)) return out;
  // Past the span: anchor anew and count back from there, so that a value
  // converted late (the thread was preempted after reading it) still tells
  // its own time rather than the conversion's.
  const Clock::time_point now = readEventClock();
  if (a.spanTicks == 0 || tsc > a.tsc || a.tsc - tsc >= a.spanTicks) return now;
  return fromNanos(a.steadyNs -
                   static_cast<std::int64_t>(static_cast<double>(a.tsc - tsc) * a.nsPerTick));
}

}  // namespace rpcjob::runtime
