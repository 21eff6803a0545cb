#include "peer_regions.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "shared_arena.h"

namespace rpcjob::runtime::host_memory {
namespace {

std::string describe(const PeerRegion& r) {
  return "region " + std::to_string(r.id) + " of pid " + std::to_string(r.pid) + " (fd " +
         std::to_string(r.fd) + ")";
}

std::string readLink(const std::string& path) {
  char target[PATH_MAX];
  const ssize_t n = ::readlink(path.c_str(), target, sizeof(target));
  return n > 0 ? std::string(target, static_cast<size_t>(n)) : std::string();
}

}  // namespace

std::string checkPeerRegion(const PeerRegion& region, const std::string& link, int seals,
                            uint64_t fileSize) {
  const std::string expected = "/memfd:" + regionName(region.token, region.id) + " (deleted)";
  if (link != expected) {
    return describe(region) + " is not that rpcjob region (it is \"" + link + "\")";
  }
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return describe(region) + " is not sealed against shrinking";
  }
  if (region.length > fileSize || region.offset > fileSize - region.length) {
    return describe(region) + ": bytes [" + std::to_string(region.offset) + ", +" +
           std::to_string(region.length) + ") lie outside its " + std::to_string(fileSize) +
           " bytes";
  }
  return "";
}

PeerMapping::~PeerMapping() {
  ::munmap(const_cast<char*>(base_), size_);
}

PeerMappings::PeerMappings(size_t maxBytes) : maxBytes_(maxBytes) {}

size_t PeerMappings::maxBytesFromEnv() {
  const char* env = std::getenv("RPCJOB_PEER_MAP_CACHE_MB");
  const unsigned long long mb =
      env != nullptr && *env != '\0' ? std::strtoull(env, nullptr, 10) : 2048;
  return static_cast<size_t>(mb) << 20;
}

std::shared_ptr<const PeerMapping> PeerMappings::open(const PeerRegion& region,
                                                      std::string& error) {
  if (region.pid <= 0 || region.pid > INT_MAX || region.fd < 0 || region.fd > INT_MAX) {
    error = describe(region) + ": no such process or descriptor";
    return nullptr;
  }
  const std::string path =
      "/proc/" + std::to_string(region.pid) + "/fd/" + std::to_string(region.fd);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    error = "cannot open " + describe(region) + ": " + std::strerror(e);
    return nullptr;
  }
  struct stat st {};
  const int seals = ::fcntl(fd, F_GET_SEALS);
  const bool statted = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  error = checkPeerRegion(region, readLink("/proc/self/fd/" + std::to_string(fd)), seals,
                          statted ? static_cast<uint64_t>(st.st_size) : 0);
  if (!error.empty()) {
    ::close(fd);
    return nullptr;
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  const int e = errno;
  ::close(fd);  // the mapping keeps the file
  if (p == MAP_FAILED) {
    error = "cannot map " + describe(region) + ": " + std::strerror(e);
    return nullptr;
  }
  return std::make_shared<PeerMapping>(static_cast<const char*>(p), size);
}

std::shared_ptr<const PeerMapping> PeerMappings::map(const PeerRegion& region, std::string& error) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<const PeerMapping> mapping;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->pid == region.pid && it->token == region.token && it->id == region.id) {
      entries_.splice(entries_.begin(), entries_, it);
      mapping = it->mapping;
      break;
    }
  }
  if (mapping == nullptr) {
    mapping = open(region, error);
    if (mapping == nullptr) return nullptr;
    if (mapping->size() <= maxBytes_) {
      while (bytes_ + mapping->size() > maxBytes_ && !entries_.empty()) {
        bytes_ -= entries_.back().mapping->size();
        entries_.pop_back();
      }
      entries_.push_front(Entry{region.pid, region.token, region.id, mapping});
      bytes_ += mapping->size();
    }
  }
  if (region.length > mapping->size() || region.offset > mapping->size() - region.length) {
    error = describe(region) + ": bytes [" + std::to_string(region.offset) + ", +" +
            std::to_string(region.length) + ") lie outside its " + std::to_string(mapping->size()) +
            " bytes";
    return nullptr;
  }
  return mapping;
}

size_t PeerMappings::cachedBytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace rpcjob::runtime::host_memory
