#include "peer_regions.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "peer_memfd.h"
#include "shared_arena.h"

namespace rpcjob::runtime::host_memory {
namespace {

std::string describe(const PeerRegion& r) {
  return "region " + std::to_string(r.id) + " of pid " + std::to_string(r.pid) + " (fd " +
         std::to_string(r.fd) + ")";
}

PeerMemfd fileOf(const PeerRegion& r) {
  return PeerMemfd{r.pid,       r.fd,    regionName(r.token, r.id), r.offset, r.length,
                   describe(r), "region"};
}

}  // namespace

std::string checkPeerRegion(const PeerRegion& region, const std::string& link, int seals,
                            uint64_t fileSize) {
  return checkPeerMemfd(fileOf(region), link, seals, fileSize);
}

PeerMapping::~PeerMapping() {
  ::munmap(base_, size_);
}

PeerMappings::PeerMappings(size_t maxBytes, PeerAccess access)
    : maxBytes_(maxBytes), access_(access) {}

size_t PeerMappings::maxBytesFromEnv() {
  const char* env = std::getenv("RPCJOB_PEER_MAP_CACHE_MB");
  const unsigned long long mb =
      env != nullptr && *env != '\0' ? std::strtoull(env, nullptr, 10) : 2048;
  return static_cast<size_t>(mb) << 20;
}

std::shared_ptr<const PeerMapping> PeerMappings::open(const PeerRegion& region,
                                                      std::string& error) {
  uint64_t fileSize = 0;
  const bool write = access_ == PeerAccess::kWrite;
  const int fd = openPeerMemfd(fileOf(region), write ? O_RDWR : O_RDONLY, fileSize, error);
  if (fd < 0) return nullptr;
  const size_t size = static_cast<size_t>(fileSize);
  void* p = ::mmap(nullptr, size, write ? PROT_READ | PROT_WRITE : PROT_READ,
                   MAP_SHARED | MAP_POPULATE, fd, 0);
  const int e = errno;
  ::close(fd);  // the mapping keeps the file
  if (p == MAP_FAILED) {
    error = "cannot map " + describe(region) + ": " + std::strerror(e);
    return nullptr;
  }
  return std::make_shared<PeerMapping>(static_cast<char*>(p), size, write);
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
