#include "cluster.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>

#include <ATen/core/ivalue.h>

#include "rpcjob/assignment/environment.h"
#include "test_functions.h"

namespace rpcjob::testing {
namespace {

// exit code, or 128 + signal; -1 when still running at the deadline.
int waitFor(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0) return -2;
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// A worker that outlived its deadline: every thread's stack on stderr (gdb, where
// it is installed and may attach), so that a hang seen once says where it was.
void dumpStacks(pid_t pid, const std::string& name) {
  std::cerr << "cluster: " << name << " (pid " << pid << ") is still running; its threads:\n";
  const std::string command = "command -v gdb >/dev/null && timeout 60 gdb -p " +
                              std::to_string(pid) +
                              " -batch -ex 'thread apply all bt' 2>&1 | grep -E '^(Thread|#)' >&2";
  if (std::system(command.c_str()) != 0)
    std::cerr << "cluster: (no stacks: gdb missing or denied)\n";
}

}  // namespace

Cluster::Cluster(int workers, runtime::RuntimeOptions options)
    : reserved_(workers + 1), ports_(reserved_.ports()) {
  const auto startTimeout = options.startTimeout;
  for (int rank = 0; rank <= workers; ++rank) {
    if (rank) peers_ += ",";
    peers_ += name(rank) + "@127.0.0.1:" + std::to_string(ports_[rank]);
  }
  pids_.assign(workers + 1, -1);
  for (int rank = 1; rank <= workers; ++rank) spawn(rank);
  driver_ = std::make_unique<runtime::Runtime>(assignmentFromPeerList(peers_), "driver",
                                               std::move(options));
  registerTestFunctions(*driver_);
  driver_->start();  // returns once every worker answered the driver's handshake
  // ... which does not mean that the workers' own start() is over: a worker may
  // still be connecting to the others. A test that kills a worker right away must
  // not catch another one in its start-up (which then waits for the dead one
  // until its start timeout): wait until every worker has a pipe to every peer.
  const auto until = std::chrono::steady_clock::now() + startTimeout;
  for (int rank = 1; rank <= workers; ++rank) {
    while (!driver_->rpcSync(name(rank), "started", {}).toBool()) {
      if (std::chrono::steady_clock::now() >= until) {
        throw std::runtime_error(name(rank) + " did not finish its start-up");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

Cluster::~Cluster() {
  if (!shutDown_) shutdown();
}

void Cluster::spawn(int rank) {
  // Everything the child needs is built before fork(): only async-signal-safe
  // calls may follow it in a process that has threads.
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string entry = *e;
    for (const char* drop : {kEnvPeers, kEnvWorkerName, kEnvAssignmentPath, kEnvRank}) {
      if (entry.rfind(std::string(drop) + "=", 0) == 0) entry.clear();
    }
    if (!entry.empty()) env.push_back(std::move(entry));
  }
  env.push_back(std::string(kEnvPeers) + "=" + peers_);
  env.push_back(std::string(kEnvWorkerName) + "=" + name(rank));
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  char* argv[] = {const_cast<char*>(RPCJOB_TEST_WORKER), nullptr};
  pid_t pid = fork();
  if (pid == 0) {
    execve(RPCJOB_TEST_WORKER, argv, envp.data());
    _exit(127);
  }
  pids_[rank] = pid;
}

void Cluster::kill(int rank) {
  ::kill(pids_[rank], SIGKILL);
  waitFor(pids_[rank], std::chrono::steady_clock::now() + std::chrono::seconds(10));
  pids_[rank] = -1;
}

void Cluster::restart(int rank) {
  spawn(rank);
}

std::vector<int> Cluster::shutdown(std::chrono::seconds deadline) {
  shutDown_ = true;
  driver_->shutdown(runtime::ShutdownMode::kGraceful, deadline);
  auto until = std::chrono::steady_clock::now() + deadline;
  std::vector<int> codes;
  for (size_t rank = 1; rank < pids_.size(); ++rank) {
    if (pids_[rank] < 0) continue;
    int code = waitFor(pids_[rank], until);
    if (code == -1) {
      dumpStacks(pids_[rank], name(static_cast<int>(rank)));
      ::kill(pids_[rank], SIGKILL);
      waitFor(pids_[rank], std::chrono::steady_clock::now() + std::chrono::seconds(5));
    }
    codes.push_back(code);
  }
  driver_.reset();
  return codes;
}

}  // namespace rpcjob::testing
