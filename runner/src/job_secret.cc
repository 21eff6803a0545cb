#include "rpcjob/runner/job_secret.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace rpcjob::runner {

void writeJobSecret(const std::string& path) {
  unsigned char bytes[kJobSecretBytes];
  std::size_t have = 0;
  while (have < sizeof(bytes)) {
    const ssize_t n = getrandom(bytes + have, sizeof(bytes) - have, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    have += static_cast<std::size_t>(n);
  }
  // A fresh inode, created 0600: no window in which another user could read it,
  // and no link left by someone else followed.
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    throw std::runtime_error("cannot replace " + path + ": " + std::strerror(errno));
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) throw std::runtime_error("cannot create " + path + ": " + std::strerror(errno));
  const bool ok = ::write(fd, bytes, sizeof(bytes)) == static_cast<ssize_t>(sizeof(bytes));
  const int err = errno;
  ::explicit_bzero(bytes, sizeof(bytes));
  if (::close(fd) != 0 || !ok) {
    throw std::runtime_error("cannot write " + path + ": " + std::strerror(err));
  }
}

}  // namespace rpcjob::runner
