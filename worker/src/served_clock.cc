#include "served_clock.h"

#include <cstdint>

#include "lane/lane.h"

namespace rpcjob::runtime::served_clock {
namespace {

struct HandOff {
  std::uint64_t run = 0;
  EventTime::Clock::time_point time{};
  bool valid = false;
};
thread_local HandOff tHandOff;

}  // namespace

void handOff(const EventTime& finished) noexcept {
  if (!finished.known()) return;  // nobody read it: nothing saved by passing it on
  tHandOff = {lane::framesRun(), finished.get(), true};
}

EventTime arrival() noexcept {
  HandOff& h = tHandOff;
  const bool fromThisRun = h.valid && h.run == lane::framesRun();
  h.valid = false;  // one frame's finish is one next frame's arrival
  return fromThisRun ? EventTime(h.time) : EventTime();
}

}  // namespace rpcjob::runtime::served_clock
