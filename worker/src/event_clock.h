#pragma once
// The runtime's side of the event clock (readEventClock in observer.h).

#include <cstdint>

#include "rpcjob/runtime/observer.h"

namespace rpcjob::runtime {

// The event clock's time at a time-stamp counter value this thread read
// moments ago (the lane poller's, lane::counterBeforeFrame): no read of its
// own. Reads the clock instead where the counter is not the event clock's or
// lies outside the thread's current span.
EventTime::Clock::time_point eventClockAt(std::uint64_t tsc) noexcept;

}  // namespace rpcjob::runtime
