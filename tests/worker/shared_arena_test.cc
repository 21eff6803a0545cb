// The shared-memory arena (worker/src/host_memory/shared_arena.h) and the
// mapping of a peer's regions (peer_regions.h), in one process: the arena's
// regions are sealed memfds named after the token and id, lookups answer for
// ranges inside one region only, freed regions are reused and the cache stays
// within its bound, a retired region is never reused; a peer's region is
// mapped (read-only, or writable for a push) only when the descriptor named is
// that region, and only for ranges inside it. No libtorch.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <climits>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "host_memory/peer_regions.h"
#include "host_memory/shared_arena.h"

namespace rpcjob::runtime::host_memory {
namespace {

constexpr size_t MiB = size_t{1} << 20;

std::string linkOf(int fd) {
  char target[PATH_MAX];
  ssize_t n = ::readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), target, sizeof(target));
  return n > 0 ? std::string(target, static_cast<size_t>(n)) : "";
}

TEST(SharedArena, RegionsAreSealedMemfdsNamedAfterTokenAndId) {
  SharedArena arena(64 * MiB);
  ASSERT_NE(arena.token(), 0u);
  char* a = static_cast<char*>(arena.allocate(3 * MiB));
  char* b = static_cast<char*>(arena.allocate(1));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(arena.shared()) << "memfd_create should work here";
  auto sa = arena.find(a, 1), sb = arena.find(b, 1);
  ASSERT_TRUE(sa && sb);
  EXPECT_EQ(sa->regionSize, 4 * MiB);  // whole 2 MiB units
  EXPECT_EQ(sb->regionSize, 2 * MiB);
  EXPECT_NE(sa->id, sb->id);
  EXPECT_NE(sa->fd, sb->fd);
  EXPECT_EQ(linkOf(sa->fd), "/memfd:" + regionName(arena.token(), sa->id) + " (deleted)");
  EXPECT_EQ(regionName(0xabc, 7), "rpcjob-0000000000000abc-7");
  const int seals = ::fcntl(sa->fd, F_GET_SEALS);
  EXPECT_EQ(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
            F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  // Writable, and the memfd holds what was written (what a peer maps).
  std::memset(a, 0x5a, 3 * MiB);
  char byte = 0;
  ASSERT_EQ(::pread(sa->fd, &byte, 1, 3 * MiB - 1), 1);
  EXPECT_EQ(byte, 0x5a);
  arena.release(a);
  arena.release(b);
}

TEST(SharedArena, FindAnswersForRangesInsideOneRegionOnly) {
  SharedArena arena(64 * MiB);
  std::vector<char*> regions;
  for (int i = 0; i < 4; ++i) regions.push_back(static_cast<char*>(arena.allocate(2 * MiB)));
  for (char* r : regions) {
    auto whole = arena.find(r, 2 * MiB);
    ASSERT_TRUE(whole);
    EXPECT_EQ(whole->offset, 0u);
    auto inside = arena.find(r + 4097, MiB);
    ASSERT_TRUE(inside);
    EXPECT_EQ(inside->offset, 4097u);
    EXPECT_EQ(inside->id, whole->id);
    auto last = arena.find(r + 2 * MiB - 1, 1);
    ASSERT_TRUE(last);
    EXPECT_EQ(last->offset, 2 * MiB - 1);
    EXPECT_TRUE(arena.find(r + MiB, 0));           // length 0: the byte at ptr
    EXPECT_FALSE(arena.find(r + MiB, MiB + 1));    // past the end
    EXPECT_FALSE(arena.find(r + 2 * MiB - 1, 2));  // straddles the end
    EXPECT_FALSE(arena.find(r, SIZE_MAX));         // no overflow
    EXPECT_FALSE(arena.find(r - 1, 2) && arena.find(r - 1, 2)->id == whole->id);
  }
  int local = 0;
  EXPECT_FALSE(arena.find(&local, sizeof(local)));  // the stack
  EXPECT_FALSE(arena.find(nullptr, 1));
  for (char* r : regions) arena.release(r);
}

TEST(SharedArena, AnEmptyArenaFindsNothing) {
  SharedArena arena(0);
  int local = 0;
  EXPECT_FALSE(arena.find(&local, 1));
  EXPECT_EQ(arena.mappedRegions(), 0u);
}

TEST(SharedArena, FreedRegionsAreReusedBySize) {
  SharedArena arena(64 * MiB);
  void* a = arena.allocate(4 * MiB);
  const uint64_t id = arena.find(a, 1)->id;
  arena.release(a);
  EXPECT_EQ(arena.cachedBytes(), 4 * MiB);
  // A cached region still answers lookups (its holder may be mid-send).
  EXPECT_TRUE(arena.find(a, 1));
  void* other = arena.allocate(6 * MiB);  // another size: a new region
  EXPECT_NE(other, a);
  void* again = arena.allocate(4 * MiB - 100);  // the same 2 MiB units: the cached one
  EXPECT_EQ(again, a);
  EXPECT_EQ(arena.find(again, 1)->id, id);
  EXPECT_EQ(arena.cachedBytes(), 0u);
  arena.release(again);
  arena.release(other);
  arena.release(other);  // twice: ignored
  int local = 0;
  arena.release(&local);  // not a region: ignored
  EXPECT_EQ(arena.cachedBytes(), 10 * MiB);
}

// A region a peer may still write into (a push whose receive failed) is never
// handed out again: released, it is unmapped rather than cached.
TEST(SharedArena, ARetiredRegionIsUnmappedWhenReleasedNotCached) {
  SharedArena arena(64 * MiB);
  char* a = static_cast<char*>(arena.allocate(4 * MiB));
  void* b = arena.allocate(4 * MiB);
  EXPECT_TRUE(arena.retire(a + 3 * MiB));  // any byte of it
  int local = 0;
  EXPECT_FALSE(arena.retire(&local));  // not in a region
  EXPECT_FALSE(arena.retire(a + 5 * MiB + 64 * MiB));
  EXPECT_EQ(arena.mappedRegions(), 2u);
  EXPECT_TRUE(arena.release(a));
  EXPECT_EQ(arena.mappedRegions(), 1u);
  EXPECT_EQ(arena.cachedBytes(), 0u);
  EXPECT_FALSE(arena.find(a, 1)) << "a retired region answers no lookup once released";
  arena.release(b);  // the other one is cached as before
  EXPECT_EQ(arena.cachedBytes(), 4 * MiB);
  EXPECT_EQ(arena.allocate(4 * MiB), b);
  arena.release(b);
}

TEST(SharedArena, TheCacheStaysWithinItsBoundOldestFirst) {
  SharedArena arena(5 * MiB);
  void* r[3];
  uint64_t ids[3];
  for (int i = 0; i < 3; ++i) {
    r[i] = arena.allocate(2 * MiB);
    ids[i] = arena.find(r[i], 1)->id;
  }
  for (void* p : r) arena.release(p);
  EXPECT_EQ(arena.cachedBytes(), 4 * MiB);
  EXPECT_EQ(arena.mappedRegions(), 2u);
  // The oldest went; the two newest are still cached.
  auto first = arena.find(r[0], 1);
  EXPECT_TRUE(!first || first->id != ids[0]);
  EXPECT_EQ(arena.find(r[1], 1)->id, ids[1]);
  EXPECT_EQ(arena.find(r[2], 1)->id, ids[2]);
  // Larger than the whole cache: unmapped at once.
  void* big = arena.allocate(6 * MiB);
  arena.release(big);
  EXPECT_EQ(arena.cachedBytes(), 4 * MiB);
  EXPECT_EQ(arena.mappedRegions(), 2u);
  // New regions get new ids, never a freed one's.
  void* fresh = arena.allocate(8 * MiB);
  std::set<uint64_t> seen(ids, ids + 3);
  EXPECT_EQ(seen.count(arena.find(fresh, 1)->id), 0u);
  arena.release(fresh);
}

// A region the system would refuse as private memory is refused as shared
// memory too (memfds are not accounted when mapped): a peer announcing a huge
// tensor gets an allocation failure, not an OOM kill mid-copy.
TEST(SharedArena, ARegionTheSystemCannotBackIsRefused) {
  const size_t huge = size_t{1} << 40;
  void* probe = ::mmap(nullptr, huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (probe != MAP_FAILED) {
    ::munmap(probe, huge);
    GTEST_SKIP() << "this machine grants 1 TiB of private memory (overcommit_memory=1?)";
  }
  SharedArena arena(64 * MiB);
  EXPECT_EQ(arena.allocate(huge), nullptr);
  EXPECT_EQ(arena.mappedRegions(), 0u);
  EXPECT_NE(arena.allocate(2 * MiB), nullptr);  // and it still works
  EXPECT_TRUE(arena.shared());
}

PeerRegion regionOf(const SharedArena& arena, const void* ptr, size_t length) {
  auto span = arena.find(ptr, length);
  EXPECT_TRUE(span);
  return PeerRegion{::getpid(), arena.token(), span->id, span->fd, span->offset, length};
}

TEST(CheckPeerRegion, OnlyTheNamedSealedRegionCoveringTheRange) {
  const PeerRegion r{42, 0x1234, 9, 5, 4096, 8192};
  const std::string good = "/memfd:rpcjob-0000000000001234-9 (deleted)";
  const int sealed = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
  EXPECT_EQ(checkPeerRegion(r, good, sealed, 2 * MiB), "");
  EXPECT_EQ(checkPeerRegion(r, good, F_SEAL_SHRINK, 4096 + 8192), "");  // exactly covered
  auto fails = [&](const std::string& link, int seals, uint64_t size, const PeerRegion& region,
                   const std::string& why) {
    const std::string error = checkPeerRegion(region, link, seals, size);
    EXPECT_NE(error.find(why), std::string::npos) << link << ": " << error;
  };
  fails("/memfd:rpcjob-0000000000001235-9 (deleted)", sealed, 2 * MiB, r, "not that rpcjob region");
  fails("/memfd:rpcjob-0000000000001234-90 (deleted)", sealed, 2 * MiB, r, "not that rpcjob");
  fails("/memfd:rpcjob-0000000000001234-9", sealed, 2 * MiB, r, "not that rpcjob region");
  fails("/dev/null", sealed, 2 * MiB, r, "not that rpcjob region");
  fails("", sealed, 2 * MiB, r, "not that rpcjob region");
  fails(good, -1, 2 * MiB, r, "not sealed");
  fails(good, F_SEAL_GROW | F_SEAL_SEAL, 2 * MiB, r, "not sealed");
  fails(good, sealed, 4096 + 8191, r, "outside");
  PeerRegion wraps = r;
  wraps.offset = UINT64_MAX - 10;  // offset + length wraps around
  fails(good, sealed, 2 * MiB, wraps, "outside");
  PeerRegion huge = r;
  huge.offset = 0;
  huge.length = UINT64_MAX;
  fails(good, sealed, 2 * MiB, huge, "outside");
}

TEST(PeerMappings, MapsARegionOnceAndReadsItsBytes) {
  SharedArena arena(64 * MiB);
  char* p = static_cast<char*>(arena.allocate(4 * MiB));
  for (size_t i = 0; i < 4 * MiB; ++i) p[i] = static_cast<char>(i % 251);
  PeerMappings mappings(64 * MiB);
  std::string error;
  auto m = mappings.map(regionOf(arena, p + 100, 3 * MiB), error);
  ASSERT_NE(m, nullptr) << error;
  EXPECT_EQ(m->size(), 4 * MiB);
  EXPECT_EQ(std::memcmp(m->base() + 100, p + 100, 3 * MiB), 0);
  p[200] = 7;  // shared, not a copy
  EXPECT_EQ(m->base()[200], 7);
  auto again = mappings.map(regionOf(arena, p, 4 * MiB), error);
  EXPECT_EQ(again, m) << "the second transfer should find the mapping cached";
  EXPECT_EQ(mappings.cachedBytes(), 4 * MiB);
  // A cached mapping still checks the range.
  PeerRegion past = regionOf(arena, p, 1);
  past.offset = 4 * MiB - 1;
  past.length = 2;
  EXPECT_EQ(mappings.map(past, error), nullptr);
  EXPECT_NE(error.find("outside"), std::string::npos) << error;
  arena.release(p);
}

// What a push writes through: the receiver's region mapped writable, the
// bytes landing in the receiver's own view of it. A read-only cache gives no
// writable pointer.
TEST(PeerMappings, AWritableMappingWritesIntoTheRegion) {
  SharedArena arena(64 * MiB);
  char* p = static_cast<char*>(arena.allocate(4 * MiB));
  std::memset(p, 0, 4 * MiB);
  PeerMappings writable(64 * MiB, PeerAccess::kWrite);
  std::string error;
  auto m = writable.map(regionOf(arena, p + 4096, MiB), error);
  ASSERT_NE(m, nullptr) << error;
  ASSERT_NE(m->writable(), nullptr);
  std::memset(m->writable() + 4096, 0x5a, MiB);
  EXPECT_EQ(p[4096], 0x5a);
  EXPECT_EQ(p[4096 + MiB - 1], 0x5a);
  EXPECT_EQ(p[4096 + MiB], 0);
  PeerMappings readOnly(64 * MiB);
  auto r = readOnly.map(regionOf(arena, p, MiB), error);
  ASSERT_NE(r, nullptr) << error;
  EXPECT_EQ(r->writable(), nullptr);
  arena.release(p);
}

TEST(PeerMappings, AForgedRegionIsAnErrorNotAMapping) {
  SharedArena arena(64 * MiB);
  char* p = static_cast<char*>(arena.allocate(2 * MiB));
  const PeerRegion good = regionOf(arena, p, 2 * MiB);
  PeerMappings mappings(64 * MiB);
  std::string error;
  auto fails = [&](PeerRegion r, const std::string& why) {
    error.clear();
    EXPECT_EQ(mappings.map(r, error), nullptr) << why;
    EXPECT_NE(error.find(why), std::string::npos) << error;
  };
  const int devNull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  PeerRegion r = good;
  r.fd = devNull;  // not a memfd
  fails(r, "not that rpcjob region");
  r = good;
  r.id += 1000;  // the right descriptor, another id
  fails(r, "not that rpcjob region");
  r = good;
  r.token ^= 1;  // another process's token
  fails(r, "not that rpcjob region");
  r = good;
  r.offset = 2 * MiB;  // out of range
  fails(r, "outside");
  r = good;
  r.fd = 1 << 20;  // no such descriptor
  fails(r, "cannot open");
  r = good;
  r.fd = -3;
  fails(r, "no such process or descriptor");
  r = good;
  r.pid = -1;
  fails(r, "no such process or descriptor");
  r = good;
  r.pid = int64_t{1} << 40;
  fails(r, "no such process or descriptor");
  // A memfd with the right name but no seals (it could shrink under a mapping).
  const uint64_t id = 999999;
  const int unsealed = ::memfd_create(regionName(arena.token(), id).c_str(), MFD_CLOEXEC);
  ASSERT_GE(unsealed, 0);
  ASSERT_EQ(::ftruncate(unsealed, 2 * MiB), 0);
  r = good;
  r.fd = unsealed;
  r.id = id;
  fails(r, "not sealed");
  EXPECT_EQ(mappings.cachedBytes(), 0u);
  // The genuine region still maps.
  EXPECT_NE(mappings.map(good, error), nullptr) << error;
  ::close(unsealed);
  ::close(devNull);
  arena.release(p);
}

TEST(PeerMappings, TheCacheStaysWithinItsBoundAndMappingsOutliveEviction) {
  SharedArena arena(64 * MiB);
  PeerMappings mappings(5 * MiB);
  std::vector<char*> regions;
  std::vector<std::shared_ptr<const PeerMapping>> held;
  std::string error;
  for (int i = 0; i < 3; ++i) {
    regions.push_back(static_cast<char*>(arena.allocate(2 * MiB)));
    regions.back()[0] = static_cast<char>(i + 1);
    held.push_back(mappings.map(regionOf(arena, regions.back(), 1), error));
    ASSERT_NE(held.back(), nullptr) << error;
    EXPECT_LE(mappings.cachedBytes(), 5 * MiB);
  }
  EXPECT_EQ(mappings.cachedBytes(), 4 * MiB);
  // The evicted one is still readable by whoever holds it (a copy in flight).
  EXPECT_EQ(held[0]->base()[0], 1);
  // Mapped again on demand: a new mapping.
  auto first = mappings.map(regionOf(arena, regions[0], 1), error);
  ASSERT_NE(first, nullptr);
  EXPECT_NE(first, held[0]);
  // Larger than the cache: mapped for the caller, not kept.
  char* big = static_cast<char*>(arena.allocate(8 * MiB));
  auto bigMapping = mappings.map(regionOf(arena, big, 8 * MiB), error);
  ASSERT_NE(bigMapping, nullptr) << error;
  EXPECT_LE(mappings.cachedBytes(), 5 * MiB);
  held.clear();
  for (char* r : regions) arena.release(r);
  arena.release(big);
}

}  // namespace
}  // namespace rpcjob::runtime::host_memory
