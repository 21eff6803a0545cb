#pragma once
// A set of real worker processes on loopback for the runtime tests: the test
// process itself is rank 0 ("driver"); ranks 1..N are rpcjob_test_worker
// processes ("w1".."wN") started with RPCJOB_PEERS and RPCJOB_WORKER_NAME. Ports
// come from binding port 0, and stay reserved while the cluster lives (below).

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "rpcjob/assignment/port_reservation.h"
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
  int port(int rank) const { return ports_[rank]; }
  // Graceful shutdown of the driver, then the exit codes of all workers.
  std::vector<int> shutdown(std::chrono::seconds deadline = std::chrono::seconds(30));

 private:
  void spawn(int rank);
  // The ports, reserved for the cluster's lifetime: the workers' own listeners
  // may still bind them, but nothing else can take them meanwhile: another
  // process's bind to port 0 (an mpt lane listener of any worker, another test's
  // cluster) would, between our pick and the worker's listen, and peers would
  // then dial that stranger.
  PortReservation reserved_;
  std::vector<int> ports_;  // by rank
  std::string peers_;
  std::vector<pid_t> pids_;
  std::unique_ptr<runtime::Runtime> driver_;
  bool shutDown_ = false;
};

}  // namespace rpcjob::testing
