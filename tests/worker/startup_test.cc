// Start-up of jobs (worker/src/startup/) with real worker processes on
// loopback: the leader barrier above the full-mesh limit, a worker that never
// starts, workers under a low soft file-descriptor limit. The test process is
// rank 0 ("driver", the leader); rpcjob_test_worker processes are the others.
#include <ATen/core/ivalue.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cluster.h"
#include "rpcjob/assignment/environment.h"
#include "rpcjob/assignment/port_reservation.h"
#include "rpcjob/runtime/runtime.h"
#include "test_functions.h"

namespace rpcjob::testing {
namespace {

using Clock = std::chrono::steady_clock;
using runtime::StartPipes;

// Whether something listens on 127.0.0.1:`port` (IPv4), read from /proc/net/tcp
// rather than by connecting: a connection that never says hello is an event
// for the worker's listener of its own.
bool listening(int port) {
  std::ifstream in("/proc/net/tcp");
  std::string line;
  std::getline(in, line);  // the header
  char want[16];
  std::snprintf(want, sizeof want, ":%04X", static_cast<unsigned>(port));
  while (std::getline(in, line)) {
    std::istringstream fields(line);  // sl local_address rem_address st ...
    std::string slot, local, remote, state;
    fields >> slot >> local >> remote >> state;
    if (state == "0A" && local.size() > 5 && local.compare(local.size() - 5, 5, want) == 0)
      return true;
  }
  return false;
}

// Worker processes of one job, started by hand: some ranks may stay missing,
// each may run under `sh -c PREFIX; exec worker`, and each one's stderr goes to
// a file the test reads.
class Job {
 public:
  explicit Job(int workers) : reserved_(workers), ports_(reserved_.ports()) {
    for (int rank = 0; rank < workers; ++rank) {
      if (rank) peers_ += ",";
      peers_ += name(rank) + "@127.0.0.1:" + std::to_string(ports_[rank]);
    }
    dir_ = ::testing::TempDir() + "startup-" + std::to_string(getpid()) + "-" +
           std::to_string(ports_[0]);
    ::mkdir(dir_.c_str(), 0700);
  }
  ~Job() {
    for (pid_t pid : pids_) {
      if (pid > 0 && waitpid(pid, nullptr, WNOHANG) == 0) {
        ::kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
      }
    }
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  static std::string name(int rank) { return rank == 0 ? "driver" : "w" + std::to_string(rank); }
  const std::string& peers() const { return peers_; }
  int port(int rank) const { return ports_[rank]; }

  void spawn(int rank, const std::vector<std::string>& extraEnv, const std::string& shell = "") {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string entry = *e;
      if (entry.rfind("RPCJOB_", 0) != 0) env.push_back(entry);
    }
    env.push_back(std::string(kEnvPeers) + "=" + peers_);
    env.push_back(std::string(kEnvWorkerName) + "=" + name(rank));
    env.insert(env.end(), extraEnv.begin(), extraEnv.end());
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string program = RPCJOB_TEST_WORKER;
    std::string sh = "/bin/sh", dashC = "-c", script = shell + "; exec " + program;
    std::vector<char*> argv;
    if (shell.empty()) {
      argv = {program.data(), nullptr};
    } else {
      argv = {sh.data(), dashC.data(), script.data(), nullptr};
    }
    const std::string log = this->log(rank);
    const pid_t pid = fork();
    if (pid == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (fd >= 0) ::dup2(fd, 2);
      ::execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    if (static_cast<int>(pids_.size()) <= rank) pids_.resize(rank + 1, -1);
    pids_[rank] = pid;
  }

  // Exit code, 128 + signal, or -1 when still running at `deadline`.
  int wait(int rank, Clock::time_point deadline) {
    for (;;) {
      int status = 0;
      const pid_t r = waitpid(pids_[rank], &status, WNOHANG);
      if (r == pids_[rank]) {
        pids_[rank] = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      if (r < 0 || Clock::now() >= deadline) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  std::string stderrOf(int rank) const {
    std::ifstream in(log(rank));
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  std::string log(int rank) const { return dir_ + "/" + name(rank) + ".stderr"; }
  PortReservation reserved_;
  std::vector<int> ports_;
  std::string peers_;
  std::string dir_;
  std::vector<pid_t> pids_;
};

// Sets environment variables for this test (and the workers it starts).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

TEST(StartupTest, AboveTheFullMeshLimitTheLeaderBarrierStartsTheJob) {
  // 6 workers over a limit of 4: the leader barrier, as 17 and more by default.
  ScopedEnv limit("RPCJOB_FULL_MESH_MAX_WORKERS", "4");
  runtime::RuntimeOptions options;
  options.fullMeshMaxWorkers = 4;
  options.startTimeout = std::chrono::seconds(90);  // 5 processes load libtorch on 2 cores
  Cluster cluster(5, options);
  runtime::Runtime& rt = cluster.driver();
  // No full mesh: a worker's start() opened its pipe to the leader only.
  for (int rank = 1; rank <= 5; ++rank) {
    EXPECT_EQ(rt.rpcSync(cluster.name(rank), "peers_with_pipes", {}).toInt(), 1) << rank;
  }
  // Every worker calls every other one (pipes opened on first use) and each
  // callee names its caller rightly.
  std::vector<runtime::Future> futures;
  for (int rank = 1; rank <= 5; ++rank) {
    futures.push_back(rt.rpcAsync(cluster.name(rank), "all_to_all_callers", {}));
  }
  for (auto& f : futures) EXPECT_EQ(f.value().toInt(), 5);
  for (int rank = 1; rank <= 5; ++rank) {
    EXPECT_EQ(rt.rpcSync(cluster.name(rank), "caller", {}).toStringRef(), "driver");
  }
  EXPECT_EQ(rt.rpcSync(cluster.name(3), "peers_with_pipes", {}).toInt(), 5);  // the others
  for (int code : cluster.shutdown(std::chrono::seconds(60))) EXPECT_EQ(code, 0);
}

TEST(StartupTest, AWorkerThatNeverStartsFailsEveryStartNamingIt) {
  // w4 of 5 never starts: the leader and the others fail within startTimeout.
  Job job(5);
  const auto timeout = std::chrono::seconds(4);
  // The workers' own timeout is longer, and the leader starts once they listen:
  // loading libtorch took over 4 s on a loaded 2-core machine, and the leader
  // then rightly named them too. The leader's verdict reaches them at once.
  const std::vector<std::string> env = {"RPCJOB_START_PIPES=leader",
                                        "RPCJOB_START_TIMEOUT_MS=30000"};
  for (int rank = 1; rank <= 3; ++rank) job.spawn(rank, env);
  const auto loaded = Clock::now() + std::chrono::seconds(60);
  for (int rank = 1; rank <= 3; ++rank) {
    while (!listening(job.port(rank)) && Clock::now() < loaded)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_TRUE(listening(job.port(rank))) << Job::name(rank) << " never listened";
  }
  runtime::RuntimeOptions options;
  options.startPipes = StartPipes::kLeaderBarrier;
  options.startTimeout = timeout;
  runtime::Runtime driver(assignmentFromPeerList(job.peers()), "driver", options);
  const auto begin = Clock::now();
  try {
    driver.start();
    FAIL() << "start() returned without w4";
  } catch (const runtime::RpcError& e) {
    EXPECT_EQ(e.code(), runtime::ErrorCode::kConnection);
    EXPECT_EQ(e.worker(), "w4");
    EXPECT_NE(std::string(e.what()).find("worker 'w4' did not start"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(Clock::now() - begin, timeout + std::chrono::seconds(2));
  // Each worker's start() fails too, naming w4 (loading libtorch comes first).
  const auto until = Clock::now() + std::chrono::seconds(60);
  for (int rank = 1; rank <= 3; ++rank) {
    EXPECT_EQ(job.wait(rank, until), 1) << Job::name(rank);
    const std::string err = job.stderrOf(rank);
    EXPECT_NE(err.find("worker 'w4' did not start"), std::string::npos)
        << Job::name(rank) << ": " << err;
  }
}

TEST(StartupTest, ALeaderThatNeverStartsFailsTheStartNamingIt) {
  Job job(3);  // nobody else: the leader "driver" never listens
  runtime::RuntimeOptions options;
  options.startPipes = StartPipes::kLeaderBarrier;
  options.startTimeout = std::chrono::milliseconds(1500);
  runtime::Runtime w1(assignmentFromPeerList(job.peers()), "w1", options);
  const auto begin = Clock::now();
  try {
    w1.start();
    FAIL() << "start() returned without a leader";
  } catch (const runtime::RpcError& e) {
    EXPECT_EQ(e.code(), runtime::ErrorCode::kConnection);
    EXPECT_EQ(e.worker(), "driver");
    EXPECT_NE(std::string(e.what()).find("the leader 'driver' (rank 0) did not answer"),
              std::string::npos)
        << e.what();
  }
  const auto took = Clock::now() - begin;
  EXPECT_GE(took, std::chrono::milliseconds(1400));
  EXPECT_LT(took, std::chrono::milliseconds(3500));
}

TEST(StartupTest, AFullMeshStartsUnderALowSoftFileDescriptorLimit) {
  // 8 workers in a full mesh hold about 16 pipes each, some 370 descriptors:
  // more than a soft limit of 256 allows. Each worker raises its soft limit to
  // the hard limit at start(); before, TensorPipe aborted (a descriptor passed
  // over the shm transport's socket was lost to EMFILE).
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_max < 1024) GTEST_SKIP() << "hard limit " << limit.rlim_max << " too low";
  Job job(8);
  const std::vector<std::string> env = {"RPCJOB_START_PIPES=full-mesh"};
  for (int rank = 1; rank < 8; ++rank) job.spawn(rank, env, "ulimit -Sn 256");
  runtime::RuntimeOptions options;
  options.startPipes = StartPipes::kFullMesh;
  options.startTimeout = std::chrono::seconds(90);
  runtime::Runtime driver(assignmentFromPeerList(job.peers()), "driver", options);
  registerTestFunctions(driver);
  driver.start();
  for (int rank = 1; rank < 8; ++rank) {
    // A worker's start() is over once it has a pipe to every worker.
    const auto until = Clock::now() + std::chrono::seconds(90);
    while (driver.rpcSync(Job::name(rank), "peers_with_pipes", {}).toInt() < 8 &&
           Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(driver.rpcSync(Job::name(rank), "all_to_all_callers", {}).toInt(), 7) << rank;
  }
  driver.shutdown(runtime::ShutdownMode::kGraceful, std::chrono::seconds(60));
  const auto until = Clock::now() + std::chrono::seconds(60);
  for (int rank = 1; rank < 8; ++rank) {
    EXPECT_EQ(job.wait(rank, until), 0) << Job::name(rank) << ": " << job.stderrOf(rank);
  }
}

TEST(StartupTest, AHardLimitTooLowFailsStartClearly) {
  // Under a hard limit of 128 a full mesh of 8 cannot fit: start() says so
  // (instead of TensorPipe aborting the process later), before listening.
  Job job(8);
  job.spawn(1, {"RPCJOB_START_PIPES=full-mesh"}, "ulimit -n 128");
  EXPECT_EQ(job.wait(1, Clock::now() + std::chrono::seconds(60)), 1);
  const std::string err = job.stderrOf(1);
  for (const char* part : {"worker 'w1'", "16 pipes", "RLIMIT_NOFILE", "128"}) {
    EXPECT_NE(err.find(part), std::string::npos) << part << " in: " << err;
  }
}

// A TCP connection to 127.0.0.1:port, closed at once; false when refused.
bool connectAndClose(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool connected = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return connected;
}

TEST(StartupTest, AConnectionClosedBeforeItsHelloLeavesTheWorkerListening) {
  // TensorPipe's listener fails for good when a connection closes before its
  // hello (as a peer that gives up mid-connect does; 64 workers dialling one
  // leader did): the worker must listen again, or every later pipe to it is
  // refused.
  Job job(2);
  job.spawn(1, {"RPCJOB_START_PIPES=full-mesh"});  // waits in start() for the driver
  // The connect that succeeds is the one closed before its hello; connecting
  // again at once would race the worker's re-listen (refused in between).
  const auto until = Clock::now() + std::chrono::seconds(60);
  bool reached = false;
  while (!(reached = connectAndClose(job.port(1))) && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(reached) << "w1 never listened";
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  runtime::RuntimeOptions options;
  options.startPipes = StartPipes::kFullMesh;
  options.startTimeout = std::chrono::seconds(20);
  runtime::Runtime driver(assignmentFromPeerList(job.peers()), "driver", options);
  registerTestFunctions(driver);
  driver.start();  // connects to w1: ECONNREFUSED until the deadline when it no longer listens
  EXPECT_EQ(driver.rpcSync("w1", "caller", {}).toStringRef(), "driver");
  driver.shutdown(runtime::ShutdownMode::kGraceful, std::chrono::seconds(30));
  EXPECT_EQ(job.wait(1, Clock::now() + std::chrono::seconds(30)), 0) << job.stderrOf(1);
  EXPECT_NE(job.stderrOf(1).find("the listener failed"), std::string::npos) << job.stderrOf(1);
}

}  // namespace
}  // namespace rpcjob::testing
