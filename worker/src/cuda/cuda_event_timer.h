#pragma once
// The CUDA-event TransferTimer (CUDA build only) for the channel decorators of
// rpcjob_instrument (worker/instrument/include/rpcjob/instrument/instrument.h).
//
// A CUDA channel's completion callback fires when its copies are enqueued, not
// when they are done, so a steady-clock duration would measure the enqueueing.
// This timer records a CUDA event on the buffer's stream in begin() and another
// on the same stream in end() (the callback: everything the channel enqueued on
// that stream precedes it), and reports the time between the two once the
// second one has completed. Completion is polled by one background thread of
// the timer (cudaEventQuery, no synchronization of any stream or device), so
// TensorPipe's loop is never blocked or delayed: begin() and end() cost one
// cudaEventRecord each plus a short critical section.
//
// Events come from a pool per device (created with timing enabled, reused).
// A CPU buffer (a CUDA channel never gets one, but the decorator may) is timed
// with the steady clock. A transfer that begins but never ends (the decorator
// calls end() only on success) is reclaimed after a minute without a report.

#include <cstdint>
#include <memory>

#include <rpcjob/instrument/instrument.h>

namespace rpcjob::runtime::cuda {

// One timer serves every CUDA channel of the process; it must outlive the
// decorators that hold it (they hold a shared_ptr) and stops its thread when
// the last reference goes.
std::shared_ptr<instrument::TransferTimer> makeCudaEventTimer();

}  // namespace rpcjob::runtime::cuda
