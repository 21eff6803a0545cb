#include "peer_memfd.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

namespace rpcjob::runtime::host_memory {
namespace {

std::string readLink(const std::string& path) {
  char target[PATH_MAX];
  const ssize_t n = ::readlink(path.c_str(), target, sizeof(target));
  return n > 0 ? std::string(target, static_cast<size_t>(n)) : std::string();
}

}  // namespace

std::string checkPeerMemfd(const PeerMemfd& file, const std::string& link, int seals,
                           uint64_t fileSize) {
  const std::string expected = "/memfd:" + file.name + " (deleted)";
  if (link != expected) {
    return file.what + " is not that rpcjob " + file.kind + " (it is \"" + link + "\")";
  }
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return file.what + " is not sealed against shrinking";
  }
  if (file.length > fileSize || file.offset > fileSize - file.length) {
    return file.what + ": bytes [" + std::to_string(file.offset) + ", +" +
           std::to_string(file.length) + ") lie outside its " + std::to_string(fileSize) + " bytes";
  }
  return "";
}

int openPeerMemfd(const PeerMemfd& file, int flags, uint64_t& size, std::string& error) {
  if (file.pid <= 0 || file.pid > INT_MAX || file.fd < 0 || file.fd > INT_MAX) {
    error = file.what + ": no such process or descriptor";
    return -1;
  }
  const std::string path = "/proc/" + std::to_string(file.pid) + "/fd/" + std::to_string(file.fd);
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    error = "cannot open " + file.what + ": " + std::strerror(e);
    return -1;
  }
  struct stat st {};
  const int seals = ::fcntl(fd, F_GET_SEALS);
  const bool statted = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  size = statted ? static_cast<uint64_t>(st.st_size) : 0;
  error = checkPeerMemfd(file, readLink("/proc/self/fd/" + std::to_string(fd)), seals, size);
  if (!error.empty()) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace rpcjob::runtime::host_memory
