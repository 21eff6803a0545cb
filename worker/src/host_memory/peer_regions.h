#pragma once
// A peer's shared regions (shared_arena.h), mapped in this process so that
// rpcjob_cma copies with memcpy: read-only where the receiver reads the
// sender's region, writable where the sender writes into the receiver's
// (the receiver asks for that push: mtcma_channel.h).
//
// The peer names a region in a control message: its pid, its token, the
// region's id, the peer's fd number, and the range wanted. We open it and check
// it as peer_memfd.h says (the name "rpcjob-<token>-<id>", sealed against
// shrinking, the range inside). Then one
// MAP_SHARED, PROT_READ, MAP_POPULATE mapping of the whole region, kept in a
// cache keyed by (pid, token, id) and bounded in bytes (least recently used
// unmapped first): the peer's arena reuses its regions, so the next transfer
// from the same region maps nothing. Region ids are never reused, so a cached
// mapping never stands for another region; the range is checked against the
// mapping on every use.
//
// Trust: the same as process_vm_readv's. A peer that can send us this message
// could already read our memory, and only names its own memory; the checks
// keep a malformed or stale message from reading anything but the named
// region, or crashing us.
//
// A mapping keeps the peer's pages alive after the peer freed the region, until
// the cache drops it: RPCJOB_PEER_MAP_CACHE_MB (default 2048) bounds that.
// Thread-safe.

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>

namespace rpcjob::runtime::host_memory {

struct PeerRegion {
  int64_t pid = 0;
  uint64_t token = 0;
  uint64_t id = 0;
  int64_t fd = -1;  // the peer's descriptor number
  uint64_t offset = 0;
  uint64_t length = 0;
};

// Whether the file we opened for `region` is that region: `link`, what
// /proc/self/fd/<ours> reads; `seals`, F_GET_SEALS (-1: failed, not a memfd);
// `fileSize`, fstat's. "" or why not. Pure.
std::string checkPeerRegion(const PeerRegion& region, const std::string& link, int seals,
                            uint64_t fileSize);

// One mapping of a peer's whole region; unmapped when the last holder lets go
// (a copy in flight keeps it past the cache's eviction). writable() is null
// unless the cache maps for writing.
class PeerMapping {
 public:
  PeerMapping(char* base, size_t size, bool writable)
      : base_(base), size_(size), writable_(writable) {}
  ~PeerMapping();
  PeerMapping(const PeerMapping&) = delete;
  PeerMapping& operator=(const PeerMapping&) = delete;
  const char* base() const { return base_; }
  char* writable() const { return writable_ ? base_ : nullptr; }
  size_t size() const { return size_; }

 private:
  char* base_;
  size_t size_;
  bool writable_;
};

enum class PeerAccess { kRead, kWrite };

class PeerMappings {
 public:
  // maxBytes: how much of peers' memory stays mapped between transfers.
  explicit PeerMappings(size_t maxBytes, PeerAccess access = PeerAccess::kRead);
  // RPCJOB_PEER_MAP_CACHE_MB (default 2048).
  static size_t maxBytesFromEnv();

  // The mapping holding region.offset + [0, length): from the cache, or opened,
  // checked and mapped now. Null with `error` set when the region cannot be
  // mapped or is not what the message says.
  std::shared_ptr<const PeerMapping> map(const PeerRegion& region, std::string& error);

  size_t cachedBytes() const;

 private:
  struct Entry {
    int64_t pid;
    uint64_t token;
    uint64_t id;
    std::shared_ptr<const PeerMapping> mapping;
  };
  std::shared_ptr<const PeerMapping> open(const PeerRegion& region, std::string& error);

  const size_t maxBytes_;
  const PeerAccess access_;
  mutable std::mutex mu_;
  std::list<Entry> entries_;  // most recently used first
  size_t bytes_ = 0;
};

}  // namespace rpcjob::runtime::host_memory
