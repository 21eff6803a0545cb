#include "rpcjob/assignment/port_reservation.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace rpcjob {

PortReservation::PortReservation(int count, bool anyAddress) {
  for (int i = 0; i < count; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      const int error = errno;
      release();
      throw std::system_error(error, std::generic_category(), "socket");
    }
    sockets_.push_back(fd);
    const int one = 1;
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(anyAddress ? INADDR_ANY : INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t length = sizeof addr;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
      const int error = errno;
      release();
      throw std::system_error(error, std::generic_category(),
                              anyAddress ? "bind 0.0.0.0:0" : "bind 127.0.0.1:0");
    }
    ports_.push_back(ntohs(addr.sin_port));
  }
}

PortReservation::~PortReservation() {
  release();
}

void PortReservation::release() {
  for (int fd : sockets_) close(fd);
  sockets_.clear();
}

}  // namespace rpcjob
