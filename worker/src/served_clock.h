#pragma once
// One clock read per call served on a lane's poller, not two.
//
// A served call is timed from its frame's arrival to its answer's write. On a
// lane's poller, which bounds the async call rate, the frames of a burst follow
// one another: the moment one call's answer is written is, to within the next
// frame's peek and copy, the moment the next frame arrives. So a served call's
// finish, once the observer has read it, is handed to the next frame's arrival
// when both fall in one run of back-to-back frames (lane::framesRun()); every
// other arrival reads the clock for itself. Per thread; no locks.

#include "rpcjob/runtime/observer.h"

namespace rpcjob::runtime::served_clock {

// After a served call's answer went on the lane from the poller's thread:
// `finished`, if it was read, becomes the arrival of this run's next frame.
void handOff(const EventTime& finished) noexcept;

// The arrival of a frame this thread is about to deliver: the reading handed
// off in this run, or one read when the observer asks for it.
EventTime arrival() noexcept;

}  // namespace rpcjob::runtime::served_clock
