// PortReservation: distinct ports, held against other binds, open to the
// workers' listeners.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <set>
#include <vector>

#include "rpcjob/assignment/port_reservation.h"

namespace rpcjob {
namespace {

TEST(Ports, DistinctFreePorts) {
  const PortReservation reserved(8);
  const std::vector<int>& ports = reserved.ports();
  ASSERT_EQ(ports.size(), 8u);
  std::set<int> distinct(ports.begin(), ports.end());
  EXPECT_EQ(distinct.size(), 8u);
  for (int p : ports) EXPECT_GT(p, 0);
}

// A socket on 127.0.0.1:port, with SO_REUSEADDR or not; -1 if bind fails.
int bindLoopback(int port, bool reuse) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (reuse) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// While reserved, a port is the workers' (whose listeners set SO_REUSEADDR, as
// TensorPipe's and the metrics server's do) and nobody else's; released, anyone's.
TEST(Ports, AReservedPortTakesTheWorkersListenerAndNoOtherBind) {
  int port = 0;
  {
    const PortReservation reserved(1);
    port = reserved.ports().at(0);
    EXPECT_EQ(bindLoopback(port, false), -1) << "a bind without SO_REUSEADDR took port " << port;
    const int worker = bindLoopback(port, true);
    ASSERT_GE(worker, 0) << "the worker's listener could not bind port " << port;
    EXPECT_EQ(listen(worker, 8), 0);
    close(worker);
  }
  const int after = bindLoopback(port, false);
  EXPECT_GE(after, 0) << "port " << port << " still held after the reservation went";
  if (after >= 0) close(after);
}

}  // namespace
}  // namespace rpcjob
