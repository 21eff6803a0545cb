#pragma once
// Free TCP ports for the addresses of workers on this machine (the local
// runner's, a test cluster's, the bench's channel passes), reserved until the
// workers listen on them.
//
// How: bind `count` sockets to 127.0.0.1:0 with SO_REUSEADDR at once (so the
// ports are distinct) and keep them bound, not listening, until the reservation
// goes. Meanwhile the kernel gives none of these ports to another program's bind
// to port 0 (the usual way to find a free port, as tests running beside us do),
// while the workers' own listeners still bind them: TensorPipe's (libuv) and the
// metrics server both set SO_REUSEADDR, and no socket of ours listens. Released
// between picking and the worker's bind, a port was taken by such a program now
// and then, and the worker failed to listen.

#include <vector>

namespace rpcjob {

class PortReservation {
 public:
  // `count` distinct ports on 127.0.0.1, or on any address with `anyAddress`
  // (for listeners on another interface, such as a pod's). Throws
  // std::system_error when a socket cannot be bound.
  explicit PortReservation(int count, bool anyAddress = false);
  ~PortReservation();
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;

  const std::vector<int>& ports() const { return ports_; }

 private:
  void release();
  std::vector<int> sockets_;
  std::vector<int> ports_;
};

}  // namespace rpcjob
