#pragma once
// The runtime's side of the event clock (readEventClock in observer.h).

#include <cstdint>

#include "rpcjob/runtime/observer.h"

namespace rpcjob::runtime {

// The event clock's time at a time-stamp counter value this thread read
// moments ago (the lane poller's, lane::counterBeforeFrame): no read of its
// own while it lies in the thread's current span; past it, counts back from a
// fresh anchor. Reads the clock instead where the counter is not the event
// clock's, or for a value more than a span old.
EventTime::Clock::time_point eventClockAt(std::uint64_t tsc) noexcept;

}  // namespace rpcjob::runtime
