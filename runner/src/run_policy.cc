#include "rpcjob/runner/run_policy.h"

#include <string.h>
#include <sys/wait.h>

#include <algorithm>

namespace rpcjob::runner {

ExitStatus ExitStatus::fromWaitStatus(int status) {
  if (WIFEXITED(status)) return exited(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return signaled(WTERMSIG(status));
  return running();
}

std::string ExitStatus::toString() const {
  switch (kind) {
    case Kind::NotStarted:
      return "not started";
    case Kind::Running:
      return "running";
    case Kind::Exited:
      return code == 0 ? "0" : "exit " + std::to_string(code);
    case Kind::Signaled: {
      const char* name = sigabbrev_np(signal);
      return "signal " + std::to_string(signal) + (name ? std::string(" (") + name + ")" : "");
    }
  }
  return "?";
}

const char* toString(JobPhase phase) {
  switch (phase) {
    case JobPhase::Running:
      return "Running";
    case JobPhase::Restarting:
      return "Restarting";
    case JobPhase::Succeeded:
      return "Succeeded";
    case JobPhase::Failed:
      return "Failed";
  }
  return "?";
}

RunPolicy::RunPolicy(std::vector<std::string> workers, int backoffLimit)
    : workers_(std::move(workers)),
      backoffLimit_(std::max(backoffLimit, 0)),
      status_(workers_.size(), ExitStatus::running()) {}

int RunPolicy::running() const {
  return static_cast<int>(std::count_if(status_.begin(), status_.end(),
                                        [](const ExitStatus& s) { return !s.finished(); }));
}

int RunPolicy::succeeded() const {
  return static_cast<int>(std::count_if(status_.begin(), status_.end(),
                                        [](const ExitStatus& s) { return s.success(); }));
}

RunPolicy::Action RunPolicy::fail(const std::string& reason, const std::string& message) {
  phase_ = JobPhase::Failed;
  reason_ = reason;
  message_ = message;
  return Action::StopAndFail;
}

RunPolicy::Action RunPolicy::onExit(int worker, const ExitStatus& status) {
  if (worker < 0 || worker >= static_cast<int>(status_.size())) return Action::None;
  status_[worker] = status;
  if (phase_ != JobPhase::Running) return Action::None;  // exits caused by stopping
  if (!status.success()) {
    const std::string what = "worker " + workers_[worker] + " ended with " + status.toString();
    if (restarts_ < backoffLimit_) {
      phase_ = JobPhase::Restarting;
      message_ = what + "; restarting the job (restart " + std::to_string(restarts_ + 1) + " of " +
                 std::to_string(backoffLimit_) + ")";
      return Action::StopAndRestart;
    }
    return fail("BackoffLimitExceeded", what + "; backoffLimit " + std::to_string(backoffLimit_) +
                                            " reached after " + std::to_string(restarts_) +
                                            " restart(s)");
  }
  if (succeeded() == static_cast<int>(status_.size())) {
    phase_ = JobPhase::Succeeded;
    reason_ = "Succeeded";
    message_ = "every worker exited 0";
    return Action::Succeed;
  }
  return Action::None;
}

RunPolicy::Action RunPolicy::onDeadline(long long deadlineSeconds) {
  if (phase_ == JobPhase::Succeeded || phase_ == JobPhase::Failed) return Action::None;
  return fail("DeadlineExceeded", "activeDeadlineSeconds (" + std::to_string(deadlineSeconds) +
                                      " s) passed; every worker was stopped");
}

RunPolicy::Action RunPolicy::onInterrupt(int signal) {
  if (phase_ == JobPhase::Succeeded || phase_ == JobPhase::Failed) return Action::None;
  const char* name = sigabbrev_np(signal);
  return fail("Interrupted", std::string("rpcjob received SIG") + (name ? name : "?") +
                                 "; every worker was stopped");
}

void RunPolicy::restarted() {
  if (phase_ != JobPhase::Restarting) return;
  ++restarts_;
  phase_ = JobPhase::Running;
  message_.clear();
  std::fill(status_.begin(), status_.end(), ExitStatus::running());
}

}  // namespace rpcjob::runner
