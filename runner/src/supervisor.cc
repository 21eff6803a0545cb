#include "rpcjob/runner/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>

#include "rpcjob/runner/line_prefixer.h"

extern char** environ;

namespace rpcjob::runner {
namespace {

using Clock = std::chrono::steady_clock;

int g_signalPipe[2] = {-1, -1};

void onSignal(int signal) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(signal);
  [[maybe_unused]] const ssize_t n = write(g_signalPipe[1], &byte, 1);
  errno = saved;
}

// Installs the handlers for the lifetime of one supervise() call.
class SignalScope {
 public:
  SignalScope() {
    if (pipe2(g_signalPipe, O_CLOEXEC | O_NONBLOCK) != 0) {
      throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
    }
    struct sigaction action {};
    action.sa_handler = onSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    for (int s : kSignals) sigaction(s, &action, &old_[s]);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ignore, &old_[SIGPIPE]);
  }
  ~SignalScope() {
    for (int s : kSignals) sigaction(s, &old_[s], nullptr);
    sigaction(SIGPIPE, &old_[SIGPIPE], nullptr);
    close(g_signalPipe[0]);
    close(g_signalPipe[1]);
    g_signalPipe[0] = g_signalPipe[1] = -1;
  }
  static constexpr int kSignals[] = {SIGCHLD, SIGINT, SIGTERM};

 private:
  std::map<int, struct sigaction> old_;
};

// For the lifetime of one supervise() call, orphans in the workers' process
// groups (a shell's background children once the shell exits) are reparented to
// us rather than to init, so we can reap them and know when a group is empty.
class SubreaperScope {
 public:
  SubreaperScope() {
    int was = 0;
    if (prctl(PR_GET_CHILD_SUBREAPER, &was) == 0) was_ = was;
    prctl(PR_SET_CHILD_SUBREAPER, 1);
  }
  ~SubreaperScope() { prctl(PR_SET_CHILD_SUBREAPER, was_); }

 private:
  int was_ = 0;
};

// How long the groups may take to vanish after SIGKILL.
constexpr std::chrono::milliseconds kGroupExitTimeout{5000};

void writeAll(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

struct Stream {
  int fd = -1;
  int target = STDOUT_FILENO;
  std::unique_ptr<LinePrefixer> prefixer;
};

struct Child {
  const WorkerLaunch* launch = nullptr;
  pid_t pid = -1;   // -1: not running
  pid_t pgid = -1;  // of the last launch (kept after exit: its group may live on)
  int launches = 0;
  ExitStatus status;
  Stream out;
  Stream err;
  int logFd = -1;
};

class Supervisor {
 public:
  Supervisor(const std::vector<WorkerLaunch>& workers, const SupervisorOptions& options)
      : options_(options), policy_(names(workers), options.backoffLimit) {
    children_.resize(workers.size());
    for (std::size_t i = 0; i < workers.size(); ++i) children_[i].launch = &workers[i];
  }

  SupervisorResult run();

 private:
  static std::vector<std::string> names(const std::vector<WorkerLaunch>& workers) {
    std::vector<std::string> out;
    for (const auto& w : workers) out.push_back(w.name);
    return out;
  }

  void launchAll();
  void launch(Child& child);
  void reap();
  void act(RunPolicy::Action action);
  void signalGroups(int signal);
  // SIGKILL to every group, then reaps (we are the subreaper: orphans are ours)
  // until every group is empty; bounded, so a process stuck in the kernel cannot
  // hang the runner (it is reported instead).
  void killGroupsAndWait();
  bool allExited() const;
  void readStream(Child& child, Stream& stream, bool toEnd);
  void closeStreams(Child& child);
  void say(const std::string& line);  // rpcjob's own messages, on stdout
  void emit(int fd, const std::string& text);
  void status(bool force);
  std::string statusText() const;

  SupervisorOptions options_;
  RunPolicy policy_;
  std::vector<Child> children_;
  Clock::time_point start_;
  bool stopping_ = false;
  bool killed_ = false;
  Clock::time_point killAt_;
  int interruptSignal_ = 0;
  int failedWorker_ = -1;  // of this attempt
  bool statusShown_ = false;
  std::string lastStatusKey_;
  Clock::time_point lastStatus_;
};

void Supervisor::emit(int fd, const std::string& text) {
  if (text.empty()) return;
  if (statusShown_) {
    writeAll(STDOUT_FILENO, "\r\033[K");
    statusShown_ = false;
  }
  writeAll(fd, text);
}

void Supervisor::say(const std::string& line) {
  emit(STDOUT_FILENO, "rpcjob: " + line + "\n");
}

std::string Supervisor::statusText() const {
  const long long elapsed =
      std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - start_).count();
  int failed = 0;
  for (int i = 0; i < static_cast<int>(children_.size()); ++i) {
    const ExitStatus& s = policy_.status(i);
    if (s.finished() && !s.success()) ++failed;
  }
  std::string text =
      options_.jobName + " " + toString(policy_.phase()) + ": attempt " +
      std::to_string(policy_.attempt()) + "/" + std::to_string(policy_.backoffLimit() + 1) + ", " +
      std::to_string(policy_.running()) + " running, " + std::to_string(policy_.succeeded()) +
      " succeeded, " + std::to_string(failed) + " failed";
  text += ", " + std::to_string(elapsed) + "s";
  if (options_.activeDeadlineSeconds) {
    text += " of " + std::to_string(*options_.activeDeadlineSeconds) + "s";
  }
  return text;
}

void Supervisor::status(bool force) {
  const auto now = Clock::now();
  if (options_.liveStatus) {
    if (!force && now - lastStatus_ < std::chrono::milliseconds(200)) return;
    lastStatus_ = now;
    emit(STDOUT_FILENO, "");
    writeAll(STDOUT_FILENO, "\r\033[K" + statusText());
    statusShown_ = true;
    return;
  }
  std::string key = std::string(toString(policy_.phase())) + std::to_string(policy_.attempt()) +
                    "/" + std::to_string(policy_.running()) + "/" +
                    std::to_string(policy_.succeeded());
  if (force || key != lastStatusKey_ || now - lastStatus_ >= options_.statusInterval) {
    lastStatusKey_ = key;
    lastStatus_ = now;
    say(statusText());
  }
}

void Supervisor::launch(Child& child) {
  const WorkerLaunch& w = *child.launch;
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
  }
  // Everything the child needs is built before fork: after it, only
  // async-signal-safe calls.
  std::map<std::string, std::string> overrides(w.env.begin(), w.env.end());
  for (const auto& [k, v] : w.env) overrides[k] = v;  // later entries win
  std::vector<std::string> envStrings;
  for (char** e = environ; *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq && overrides.count(std::string(*e, eq - *e))) continue;
    envStrings.emplace_back(*e);
  }
  for (const auto& [k, v] : overrides) envStrings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : envStrings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argvStrings = w.argv;
  std::vector<char*> argv;
  for (auto& s : argvStrings) argv.push_back(s.data());
  argv.push_back(nullptr);
  const std::string execError = "rpcjob: cannot run " + w.argv[0] + ": ";
  const int devNull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = getpid();

  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &old);
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGPIPE}) sigaction(s, &dfl, nullptr);
    sigprocmask(SIG_SETMASK, &old, nullptr);
    if (devNull >= 0) dup2(devNull, STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    execvpe(argv[0], argv.data(), envp.data());
    const char* reason = std::strerror(errno);
    [[maybe_unused]] ssize_t n = write(STDERR_FILENO, execError.data(), execError.size());
    n = write(STDERR_FILENO, reason, std::strlen(reason));
    n = write(STDERR_FILENO, "\n", 1);
    _exit(127);
  }
  const int forkErrno = errno;
  sigprocmask(SIG_SETMASK, &old, nullptr);
  if (devNull >= 0) close(devNull);
  close(out[1]);
  close(err[1]);
  if (pid < 0) {
    close(out[0]);
    close(err[0]);
    throw std::runtime_error(std::string("fork: ") + std::strerror(forkErrno));
  }
  setpgid(pid, pid);  // also in the child: whichever runs first
  child.pid = pid;
  child.pgid = pid;
  ++child.launches;
  child.status = ExitStatus::running();
  for (int fd : {out[0], err[0]}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  child.out = {out[0], STDOUT_FILENO, std::make_unique<LinePrefixer>("[" + w.name + "] ")};
  child.err = {err[0], STDERR_FILENO, std::make_unique<LinePrefixer>("[" + w.name + "] ")};
  if (child.logFd < 0) {
    child.logFd = open(w.logFile.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  }
}

void Supervisor::launchAll() {
  for (auto& child : children_) launch(child);
}

void Supervisor::readStream(Child& child, Stream& stream, bool toEnd) {
  if (stream.fd < 0) return;
  char buffer[16384];
  while (true) {
    const ssize_t n = read(stream.fd, buffer, sizeof buffer);
    if (n > 0) {
      if (child.logFd >= 0) writeAll(child.logFd, std::string(buffer, n));
      emit(stream.target, stream.prefixer->feed(std::string_view(buffer, n)));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN && !toEnd) return;
    // EOF, an error, or draining at the end: this stream is done.
    emit(stream.target, stream.prefixer->flush());
    close(stream.fd);
    stream.fd = -1;
    return;
  }
}

void Supervisor::closeStreams(Child& child) {
  // The process is gone: what it wrote is in the pipe. Read what is there now
  // (a descendant holding the pipe must not keep us waiting), then close.
  for (Stream* s : {&child.out, &child.err}) {
    if (s->fd < 0) continue;
    char buffer[16384];
    ssize_t n;
    while ((n = read(s->fd, buffer, sizeof buffer)) > 0) {
      if (child.logFd >= 0) writeAll(child.logFd, std::string(buffer, n));
      emit(s->target, s->prefixer->feed(std::string_view(buffer, n)));
    }
    emit(s->target, s->prefixer->flush());
    close(s->fd);
    s->fd = -1;
  }
}

// Reaps the workers and, as the subreaper, the orphans of their groups (a
// shell's background children whose shell has exited): an unreaped zombie still
// counts as a member of its process group.
void Supervisor::reap() {
  int raw = 0;
  pid_t pid;
  while ((pid = waitpid(-1, &raw, WNOHANG)) > 0) {
    for (std::size_t i = 0; i < children_.size(); ++i) {
      Child& child = children_[i];
      if (child.pid != pid) continue;
      child.pid = -1;
      child.status = ExitStatus::fromWaitStatus(raw);
      readStream(child, child.out, false);
      readStream(child, child.err, false);
      if (!stopping_ && !child.status.success()) failedWorker_ = static_cast<int>(i);
      act(policy_.onExit(static_cast<int>(i), child.status));
    }
  }
}

void Supervisor::signalGroups(int signal) {
  for (const auto& child : children_) {
    if (child.pgid > 0) kill(-child.pgid, signal);
  }
}

void Supervisor::killGroupsAndWait() {
  signalGroups(SIGKILL);
  const auto giveUp = Clock::now() + kGroupExitTimeout;
  while (true) {
    reap();
    std::vector<pid_t> alive;
    for (const auto& child : children_) {
      if (child.pgid > 0 && (kill(-child.pgid, 0) == 0 || errno != ESRCH)) {
        alive.push_back(child.pgid);
      }
    }
    if (alive.empty()) break;
    if (Clock::now() >= giveUp) {
      for (pid_t pgid : alive) {
        say("process group " + std::to_string(pgid) + " still has processes " +
            std::to_string(kGroupExitTimeout.count()) + " ms after SIGKILL");
      }
      break;
    }
    signalGroups(SIGKILL);  // a member forked since the last one
    usleep(5000);
  }
  for (auto& child : children_) {
    // Gone (or reported): a later kill(-pgid) must not hit a reused group id.
    if (child.pid < 0) child.pgid = -1;
  }
}

bool Supervisor::allExited() const {
  for (const auto& child : children_) {
    if (child.pid > 0) return false;
  }
  return true;
}

void Supervisor::act(RunPolicy::Action action) {
  if (action == RunPolicy::Action::StopAndRestart || action == RunPolicy::Action::StopAndFail) {
    say(policy_.message());
    if (!stopping_) {
      stopping_ = true;
      killAt_ = Clock::now() + options_.gracePeriod;
      signalGroups(SIGTERM);
    }
  }
}

SupervisorResult Supervisor::run() {
  SignalScope signals;
  SubreaperScope subreaper;
  start_ = Clock::now();
  lastStatus_ = start_;
  // Not an optional<time_point>: GCC 12 warns it may be used uninitialized.
  const bool hasDeadline = options_.activeDeadlineSeconds.has_value();
  const Clock::time_point deadline =
      start_ + std::chrono::seconds(options_.activeDeadlineSeconds.value_or(0));
  launchAll();
  status(true);

  while (true) {
    const auto now = Clock::now();
    if (hasDeadline && now >= deadline && !stopping_)
      act(policy_.onDeadline(*options_.activeDeadlineSeconds));
    if (stopping_ && !killed_ && now >= killAt_) {
      say("grace period over: SIGKILL to the workers still running");
      signalGroups(SIGKILL);
      killed_ = true;
    }
    if (allExited()) {
      if (policy_.phase() == JobPhase::Restarting) {
        for (auto& child : children_) closeStreams(child);
        killGroupsAndWait();  // leftovers of the attempt (holding its ports, say)
        policy_.restarted();
        stopping_ = killed_ = false;
        failedWorker_ = -1;
        say("restart " + std::to_string(policy_.restarts()) + " of " +
            std::to_string(policy_.backoffLimit()) + ": launching every worker again");
        launchAll();
        status(true);
        continue;
      }
      if (policy_.phase() == JobPhase::Succeeded || policy_.phase() == JobPhase::Failed) break;
    }
    status(false);

    std::vector<pollfd> fds = {{g_signalPipe[0], POLLIN, 0}};
    std::vector<std::pair<Child*, Stream*>> owners = {{nullptr, nullptr}};
    for (auto& child : children_) {
      for (Stream* s : {&child.out, &child.err}) {
        if (s->fd < 0) continue;
        fds.push_back({s->fd, POLLIN, 0});
        owners.emplace_back(&child, s);
      }
    }
    auto wake = Clock::now() +
                (options_.liveStatus ? std::chrono::milliseconds(1000) : options_.statusInterval);
    if (hasDeadline && !stopping_) wake = std::min(wake, deadline);
    if (stopping_ && !killed_) wake = std::min(wake, killAt_);
    const auto timeout =
        std::chrono::duration_cast<std::chrono::milliseconds>(wake - Clock::now()).count();
    const int ready =
        poll(fds.data(), fds.size(), static_cast<int>(std::max<long long>(timeout, 0) + 1));
    if (ready < 0 && errno != EINTR)
      throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
    if (ready <= 0) continue;
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents) readStream(*owners[i].first, *owners[i].second, false);
    }
    if (fds[0].revents) {
      unsigned char signal;
      while (read(g_signalPipe[0], &signal, 1) == 1) {
        if (signal == SIGCHLD) {
          reap();
        } else if (interruptSignal_ == 0) {
          interruptSignal_ = signal;
          act(policy_.onInterrupt(signal));
        } else {
          say("second interrupt: SIGKILL to every worker");
          signalGroups(SIGKILL);
          killed_ = true;
        }
      }
    }
  }

  for (auto& child : children_) {
    closeStreams(child);
    if (child.logFd >= 0) close(child.logFd);
  }
  killGroupsAndWait();  // anything a worker left behind in its group
  if (options_.liveStatus && statusShown_) writeAll(STDOUT_FILENO, "\r\033[K");
  say(statusText());

  SupervisorResult result;
  result.phase = policy_.phase();
  result.reason = policy_.reason();
  result.message = policy_.message();
  result.interruptSignal = interruptSignal_;
  result.failedWorker = policy_.phase() == JobPhase::Succeeded ? -1 : failedWorker_;
  result.seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  for (const auto& child : children_) {
    result.workers.push_back(
        {child.launch->name, child.launch->rank, child.status, std::max(child.launches - 1, 0)});
  }
  return result;
}

}  // namespace

SupervisorResult supervise(const std::vector<WorkerLaunch>& workers,
                           const SupervisorOptions& options) {
  Supervisor supervisor(workers, options);
  return supervisor.run();
}

}  // namespace rpcjob::runner
