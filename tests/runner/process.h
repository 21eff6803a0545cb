#pragma once
// Test helpers: run the rpcjob binary with a captured, merged stdout+stderr, in a
// temp directory of its own; optionally interrupt it once its output shows a text.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace rpcjob::runner::testing {

struct Ran {
  int exitCode = -1;  // 128 + signal when killed
  std::string output;
  double seconds = 0;
};

struct RunOptions {
  std::string interruptWhen;  // send `signal` once the output contains this
  int signal = SIGINT;
  int timeoutSeconds = 120;  // then SIGKILL and exitCode -1
};

inline Ran runProgram(const std::vector<std::string>& argv, const RunOptions& options = {}) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return {};
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  Ran ran;
  bool interrupted = false;
  char buffer[8192];
  while (true) {
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, 200);
    if (ready > 0) {
      const ssize_t n = read(fds[0], buffer, sizeof buffer);
      if (n <= 0) break;
      ran.output.append(buffer, n);
    }
    if (!interrupted && !options.interruptWhen.empty() &&
        ran.output.find(options.interruptWhen) != std::string::npos) {
      kill(pid, options.signal);
      interrupted = true;
    }
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(options.timeoutSeconds)) {
      kill(pid, SIGKILL);
      ran.output += "\n[test: timed out]\n";
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  ran.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (ran.output.find("[test: timed out]") != std::string::npos) return ran;
  ran.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return ran;
}

// A fresh temp directory, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern = std::filesystem::temp_directory_path().string() + "/rpcjob-test-XXXXXX";
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string file = path_ + "/" + name;
    std::ofstream(file) << text;
    return file;
  }

 private:
  std::string path_;
};

// Processes (other than zombies) whose environment has `needle` (e.g.
// "RPCJOB_JOB_NAME=sigint-4711").
inline std::vector<int> processesWithEnv(const std::string& needle) {
  std::vector<int> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream environ(entry.path() / "environ", std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(environ)), std::istreambuf_iterator<char>());
    std::string var;
    for (char c : text + '\0') {
      if (c != '\0') {
        var += c;
        continue;
      }
      if (var == needle) found.push_back(std::stoi(name));
      var.clear();
    }
  }
  return found;
}

}  // namespace rpcjob::runner::testing
