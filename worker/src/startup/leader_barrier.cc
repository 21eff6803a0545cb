#include "startup/leader_barrier.h"

#include <ATen/core/ivalue.h>

#include <algorithm>
#include <thread>

#include "runtime_impl.h"

namespace rpcjob::runtime::startup {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long the leader holds a join before answering with who is missing: the
// missing list a worker fails with is at most this old.
constexpr milliseconds kLongPoll{1000};
// Redials of a leader that is not listening yet (it may still be loading).
constexpr milliseconds kFirstRedial{20};
constexpr milliseconds kMaxRedial{250};

std::string seconds(milliseconds ms) {
  return std::to_string(ms.count() / 1000) + "." + std::to_string(ms.count() % 1000 / 100) + " s";
}

}  // namespace

LeaderBarrier::LeaderBarrier(RuntimeImpl& runtime)
    : rt_(runtime),
      joined_(runtime.workers().size(), false),
      devices_(runtime.workers().size(), 0) {}

void LeaderBarrier::markJoinedLocked(int rank, std::int64_t devices) {
  joined_[rank] = true;
  devices_[rank] = devices;
  if (state_ == State::kWaiting && missingLocked().empty()) state_ = State::kComplete;
}

std::vector<int> LeaderBarrier::missingLocked() const {
  std::vector<int> missing;
  for (size_t r = 0; r < joined_.size(); ++r) {
    if (!joined_[r]) missing.push_back(static_cast<int>(r));
  }
  return missing;
}

void LeaderBarrier::answerDue(Clock::time_point now) {
  std::vector<Promise> due;
  c10::IValue answer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (state_ != State::kWaiting || it->until <= now) {
        due.push_back(it->answer);
        it = waiters_.erase(it);
      } else {
        ++it;
      }
    }
    if (due.empty()) return;
    std::vector<std::int64_t> missing;
    for (int r : missingLocked()) missing.push_back(r);
    answer = c10::ivalue::Tuple::create({c10::IValue(static_cast<std::int64_t>(state_)),
                                         c10::IValue(c10::List<std::int64_t>(missing)),
                                         c10::IValue(c10::List<std::int64_t>(devices_))});
  }
  for (auto& p : due) p.setValue(answer);
}

Future LeaderBarrier::join(int rank, std::vector<c10::IValue> args) {
  if (rt_.self().rank != 0) {
    throw std::invalid_argument(std::string(kBuiltinStartJoin) + " goes to the leader (rank 0)");
  }
  if (rank < 0 || rank >= static_cast<int>(joined_.size()) || args.size() != 2 ||
      !args[0].isInt() || !args[1].isInt()) {
    throw std::invalid_argument(std::string(kBuiltinStartJoin) +
                                " takes (devices, waitMs) from a worker of the job");
  }
  const milliseconds wait = std::clamp(milliseconds(args[1].toInt()), milliseconds(0), kLongPoll);
  Promise answer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    markJoinedLocked(rank, args[0].toInt());
    waiters_.push_back({answer, Clock::now() + wait});
  }
  changed_.notify_all();
  answerDue(Clock::now());  // at once if this join completed the barrier
  return answer.future();
}

std::vector<std::int64_t> LeaderBarrier::run(Clock::time_point deadline, std::int64_t ownDevices) {
  return rt_.self().rank == 0 ? lead(deadline, ownDevices) : follow(deadline, ownDevices);
}

std::vector<std::int64_t> LeaderBarrier::lead(Clock::time_point deadline, std::int64_t ownDevices) {
  const auto started = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    markJoinedLocked(0, ownDevices);
  }
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Wakes for each join, and every 100 ms to answer the long polls due.
      changed_.wait_until(lock, std::min(deadline, Clock::now() + milliseconds(100)),
                          [&] { return state_ != State::kWaiting; });
      if (state_ == State::kWaiting && Clock::now() >= deadline) state_ = State::kFailed;
    }
    answerDue(Clock::now());
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kComplete) return devices_;
    if (state_ == State::kFailed) {
      const auto missing = missingLocked();
      throw RpcError(ErrorCode::kConnection, rt_.workers()[missing.front()].name,
                     "start-up failed: " + names(missing) + " did not start within " +
                         seconds(std::chrono::duration_cast<milliseconds>(Clock::now() - started)) +
                         " (the leader '" + rt_.self().name +
                         "' waits for every worker to join; RuntimeOptions::startTimeout)");
    }
  }
}

std::vector<std::int64_t> LeaderBarrier::follow(Clock::time_point deadline,
                                                std::int64_t ownDevices) {
  const auto started = Clock::now();
  const WorkerInfo& leader = rt_.workers()[0];
  std::vector<int> missing;  // as the leader last said
  std::string lastError;
  milliseconds redial = kFirstRedial;
  auto failure = [&](const std::string& why) {
    const std::string waited =
        seconds(std::chrono::duration_cast<milliseconds>(Clock::now() - started));
    if (!missing.empty()) {
      return RpcError(ErrorCode::kConnection, rt_.workers()[missing.front()].name,
                      "start-up failed: " + names(missing) + " did not start within " + waited +
                          " (" + why + ")");
    }
    return RpcError(ErrorCode::kConnection, leader.name,
                    "start-up failed: the leader '" + leader.name + "' (rank 0) did not answer " +
                        "within " + waited + ": " + why);
  };
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      throw failure(lastError.empty() ? "RuntimeOptions::startTimeout" : lastError);
    }
    CallOptions call;
    call.timeout = left;
    Future joined =
        rt_.rpcAsync(leader.name, kBuiltinStartJoin,
                     {c10::IValue(ownDevices),
                      c10::IValue(static_cast<std::int64_t>(std::min(left, kLongPoll).count()))},
                     call);
    if (joined.hasError()) {
      try {
        std::rethrow_exception(joined.error());
      } catch (const RpcError& e) {
        lastError = e.what();
        // The leader not listening yet (or gone): redial, backing off.
        if (e.code() != ErrorCode::kConnection && e.code() != ErrorCode::kTimeout) {
          throw failure(lastError);
        }
      }
      std::this_thread::sleep_until(std::min(deadline, Clock::now() + redial));
      redial = std::min(redial * 2, kMaxRedial);
      continue;
    }
    redial = kFirstRedial;
    const c10::IValue& answer = joined.value();
    const auto* tuple = answer.isTuple() ? answer.toTuple().get() : nullptr;
    if (tuple == nullptr || tuple->elements().size() != 3 || !tuple->elements()[0].isInt() ||
        !tuple->elements()[1].isIntList() || !tuple->elements()[2].isIntList() ||
        tuple->elements()[2].toIntList().size() != rt_.workers().size()) {
      throw failure("the leader's answer to " + std::string(kBuiltinStartJoin) + " is malformed");
    }
    missing.clear();
    for (std::int64_t r : tuple->elements()[1].toIntList()) {
      if (r >= 0 && r < static_cast<std::int64_t>(rt_.workers().size())) {
        missing.push_back(static_cast<int>(r));
      }
    }
    const auto state = static_cast<State>(tuple->elements()[0].toInt());
    if (state == State::kComplete) return tuple->elements()[2].toIntList().vec();
    if (state == State::kFailed) throw failure("the leader '" + leader.name + "' gave up");
  }
}

std::string LeaderBarrier::names(const std::vector<int>& ranks) const {
  std::string out = ranks.size() == 1 ? "worker " : "workers ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i == 8) {
      out += " and " + std::to_string(ranks.size() - i) + " more";
      break;
    }
    out += (i ? ", '" : "'") + rt_.workers()[ranks[i]].name + "'";
  }
  return out;
}

}  // namespace rpcjob::runtime::startup
