#include "rpcjob/runner/ports.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

namespace rpcjob::runner {

std::vector<int> pickFreePorts(int count) {
  std::vector<int> sockets;
  std::vector<int> ports;
  auto closeAll = [&] {
    for (int fd : sockets) close(fd);
  };
  for (int i = 0; i < count; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      closeAll();
      throw std::system_error(errno, std::generic_category(), "socket");
    }
    sockets.push_back(fd);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t length = sizeof addr;
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
      const int error = errno;
      closeAll();
      throw std::system_error(error, std::generic_category(), "bind 127.0.0.1:0");
    }
    ports.push_back(ntohs(addr.sin_port));
  }
  closeAll();
  return ports;
}

}  // namespace rpcjob::runner
