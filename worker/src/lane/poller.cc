#include "poller.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <new>

#include "../spin_wait.h"

namespace rpcjob::runtime::lane {
namespace {
constexpr int kFramesPerTurn = 64;  // then the next lane: one busy peer starves none
constexpr std::chrono::milliseconds kIdleWake{100};
thread_local bool tPollerThread = false;
}  // namespace

bool onAPollerThread() {
  return tPollerThread;
}

std::chrono::microseconds spinFromEnvironment() {
  return microsecondsFromEnvironment("RPCJOB_LANE_SPIN_US", std::chrono::microseconds(100),
                                     10000000);
}

bool spinFixedByEnvironment() {
  return std::getenv("RPCJOB_LANE_SPIN_US") != nullptr;
}

std::chrono::microseconds spinAfterLastFrame(std::chrono::microseconds laneSpin, bool fixed,
                                             std::chrono::microseconds adaptiveBudget) {
  return fixed ? laneSpin : std::max(laneSpin, adaptiveBudget);
}

Poller::Poller(std::chrono::microseconds spin, std::string& error, bool fixed)
    : spin_(spin), fixed_(fixed) {
  bellToken_ = randomToken();
  bellFile_ = SharedFile::create(bellName(bellToken_), 4096, error);
  if (bellFile_) new (bellFile_->base()) Bell();
}

Poller::~Poller() {
  stop();
}

int64_t Poller::bellFd() const {
  return bellFile_ ? bellFile_->fd() : -1;
}

Bell& Poller::bell() const {
  return *reinterpret_cast<Bell*>(bellFile_->base());
}

void Poller::add(std::shared_ptr<Lane> lane) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) {
      lane->close();
      return;
    }
    lanes_.push_back(std::move(lane));
    version_.fetch_add(1);
    if (!thread_.joinable())
      thread_ = std::thread([this] {
        // Threads inherit their creator's name: without this the poller, started
        // from a TensorPipe callback, shows as TP_SHM_reactor in top and perf.
        pthread_setname_np(pthread_self(), "rpcjob_lane");
        tPollerThread = true;
        loop();
      });
  }
  wake();
}

void Poller::wake() {
  if (!bellFile_) return;
  Bell& b = bell();
  b.seq.fetch_add(1, std::memory_order_seq_cst);
  futexWake(&b.seq, FutexScope::kShared);
}

void Poller::keepSpinning(std::chrono::microseconds span) {
  spinUntil_ = std::max(spinUntil_, std::chrono::steady_clock::now() + span);
}

void Poller::stop() {
  std::vector<std::shared_ptr<Lane>> lanes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    lanes.swap(lanes_);
    version_.fetch_add(1);
  }
  for (auto& l : lanes) l->close();
  wake();
  if (thread_.joinable() && !onPollerThread()) thread_.join();
}

void Poller::loop() {
  std::vector<std::shared_ptr<Lane>> lanes;
  uint64_t seen = ~uint64_t{0};
  // The spin runs from the last frame, or from a wake-up since; the adaptive
  // budget learns the gaps between frames (a wake-up does not end one).
  auto lastFrame = std::chrono::steady_clock::now();
  auto spinFrom = lastFrame;
  auto spin = spin_;  // decided when the frames stopped
  bool idle = false;  // a turn found nothing since the last frame
  Bell& b = bell();
  while (!stop_.load(std::memory_order_acquire)) {
    if (version_.load(std::memory_order_acquire) != seen) {
      std::lock_guard<std::mutex> lock(mu_);
      // Closed lanes go here (and their mappings once the runtime lets go).
      lanes_.erase(std::remove_if(lanes_.begin(), lanes_.end(),
                                  [](const std::shared_ptr<Lane>& l) { return l->closed(); }),
                   lanes_.end());
      lanes = lanes_;
      seen = version_.load();
    }
    // Read before the turn: a ring or wake() during it makes the sleep below
    // return at once (a blocked lane's pipe may catch up at any time).
    const uint32_t seq = b.seq.load(std::memory_order_seq_cst);
    int delivered = 0;
    bool closedOne = false;
    for (auto& l : lanes) {
      delivered += l->poll(kFramesPerTurn);
      closedOne |= l->closed();
    }
    if (closedOne) version_.fetch_add(1);
    if (delivered > 0) {
      if (idle && !fixed_) adaptive_.idleEnded(lastFrame);
      idle = false;
      lastFrame = spinFrom = std::chrono::steady_clock::now();
      continue;
    }
    if (!idle) {
      idle = true;
      spin = spinAfterLastFrame(spin_, fixed_, adaptive_.budget());
    }
    const auto now = std::chrono::steady_clock::now();
    if (now - spinFrom < spin || now < spinUntil_) {
      // Yield, not pause: where threads outnumber cores (a 2-core pod: both
      // processes' pollers, the caller's spin, TensorPipe's reactors) a
      // pause-spinning poller held its core until its time slice ended, and
      // the other process's poller saw each frame ~100 us late (small call
      // p50 209 us on the 2-core machine; 6-10 us with the yield).
      std::this_thread::yield();
      continue;
    }
    announceSleep(b);
    bool pending = stop_.load() || version_.load() != seen;
    for (auto& l : lanes) pending = pending || (l->hasData() && !l->blocked());
    if (pending) {
      cancelSleep(b);
      continue;
    }
    sleepOn(b, seq, kIdleWake);
    spinFrom = std::chrono::steady_clock::now();  // spin again after a wake
    // Idle this long already: AdaptiveSpin's rule for the gap so far may say
    // frames are rare now (never lengthening the spin decided at the last frame).
    spin = std::min(spin, spinAfterLastFrame(spin_, fixed_,
                                             AdaptiveSpin::budgetAfterGap(spinFrom - lastFrame)));
  }
}

}  // namespace rpcjob::runtime::lane
