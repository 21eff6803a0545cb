#pragma once
// A set of real worker processes on loopback for the runtime tests: the test
// process itself is rank 0 ("driver"); ranks 1..N are rpcjob_test_worker
// processes ("w1".."wN") started with RPCJOB_PEERS and RPCJOB_WORKER_NAME. Ports
// come from binding port 0.

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "rpcjob/runtime/runtime.h"

namespace rpcjob::testing {

class Cluster {
 public:
  explicit Cluster(int workers, runtime::RuntimeOptions options = {});
  ~Cluster();  // graceful shutdown of everyone; kills what is left after a deadline

  runtime::Runtime& driver() { return *driver_; }
  std::string name(int rank) const { return rank == 0 ? "driver" : "w" + std::to_string(rank); }
  void kill(int rank);     // SIGKILL
  void restart(int rank);  // start it again, same name and address
  // Graceful shutdown of the driver, then the exit codes of all workers.
  std::vector<int> shutdown(std::chrono::seconds deadline = std::chrono::seconds(30));

 private:
  void spawn(int rank);
  std::string peers_;
  std::vector<pid_t> pids_;
  std::unique_ptr<runtime::Runtime> driver_;
  bool shutDown_ = false;
};

}  // namespace rpcjob::testing
