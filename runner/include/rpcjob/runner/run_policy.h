#pragma once
// The run policy of `rpcjob run`, as a state machine with no I/O and no clock, so
// that every path is tested directly (tests/runner/run_policy_test.cc). The
// supervisor (supervisor.h) feeds it what happened and does what it decides.
//
// Rules (RpcJob spec.runPolicy, applied to local processes as the operator
// applies them to pods):
//  - The job succeeds when every worker of the current attempt has exited 0.
//  - A worker that exits non-zero or is killed by a signal fails the attempt:
//    while restarts < backoffLimit the whole job is restarted (every worker stopped,
//    then all launched again: RPC workers cannot rejoin a running job one by one);
//    after that the job fails with reason BackoffLimitExceeded.
//  - activeDeadlineSeconds (counted from the first launch, across restarts, like a
//    Kubernetes Job): the job fails with reason DeadlineExceeded.
//  - SIGINT / SIGTERM to rpcjob: the job fails with reason Interrupted.
//  - Once a decision to stop is taken, exits caused by the stopping are not
//    failures of their own.

#include <string>
#include <vector>

namespace rpcjob::runner {

// How a process ended.
struct ExitStatus {
  enum class Kind { NotStarted, Running, Exited, Signaled };
  Kind kind = Kind::NotStarted;
  int code = 0;    // Exited
  int signal = 0;  // Signaled

  static ExitStatus exited(int code) { return {Kind::Exited, code, 0}; }
  static ExitStatus signaled(int signal) { return {Kind::Signaled, 0, signal}; }
  static ExitStatus running() { return {Kind::Running, 0, 0}; }
  // From a waitpid() status.
  static ExitStatus fromWaitStatus(int status);

  bool success() const { return kind == Kind::Exited && code == 0; }
  bool finished() const { return kind == Kind::Exited || kind == Kind::Signaled; }
  // "0", "exit 3", "signal 9 (KILL)", "running", "not started".
  std::string toString() const;
};

enum class JobPhase { Running, Restarting, Succeeded, Failed };
const char* toString(JobPhase phase);

class RunPolicy {
 public:
  enum class Action {
    None,            // keep going
    StopAndRestart,  // stop every worker, then call restarted() and launch all again
    StopAndFail,     // stop every worker; the job has failed (reason(), message())
    Succeed,         // every worker exited 0
  };

  RunPolicy(std::vector<std::string> workers, int backoffLimit);

  // A worker of the current attempt ended.
  Action onExit(int worker, const ExitStatus& status);
  Action onDeadline(long long deadlineSeconds);
  Action onInterrupt(int signal);
  // The stopped workers of a Restarting job were launched again.
  void restarted();

  JobPhase phase() const { return phase_; }
  int restarts() const { return restarts_; }
  int backoffLimit() const { return backoffLimit_; }
  int attempt() const { return restarts_ + 1; }
  const std::string& reason() const { return reason_; }    // Failed: a condition reason
  const std::string& message() const { return message_; }  // for people
  int running() const;
  int succeeded() const;  // in this attempt
  const ExitStatus& status(int worker) const { return status_[worker]; }

 private:
  Action fail(const std::string& reason, const std::string& message);

  std::vector<std::string> workers_;
  int backoffLimit_;
  int restarts_ = 0;
  JobPhase phase_ = JobPhase::Running;
  std::string reason_;
  std::string message_;
  std::vector<ExitStatus> status_;  // of the current attempt
};

}  // namespace rpcjob::runner
