#pragma once
// How rpcjob_cma splits one transfer into process_vm_readv calls: pure logic,
// no I/O (tests/worker/mtcma_chunk_plan_test.cc).
//
// A transfer's time is that of its slowest piece plus the hand-offs. At 4 MB a
// floor of 1 MiB per piece left 4 of 8 threads idle and put a 1 MiB read (about
// 175 us at cma's single-thread speed) on every direction of a round trip; so
// pieces may be as small as kMinPiece, and when a transfer is small enough
// (each of threads + 1 pieces at most kMaxReaderPiece, what cma reads inline
// anyway), the thread that received the control message reads one piece itself
// instead of waiting for the pool. Larger transfers keep the reader free and
// split into 2 x threads pieces (some slack for threads that start late).

#include <cstddef>

namespace rpcjob::runtime::channels {

struct ChunkPlan {
  size_t piece = 0;       // bytes per piece (the last may be shorter); 0: nothing to read
  size_t pieces = 0;      // ceil(length / piece)
  bool readerTakesFirst;  // piece 0 is read by the receiving thread, 1.. by the pool
};

inline constexpr size_t kMinPiece = size_t{256} << 10;
inline constexpr size_t kMaxReaderPiece = size_t{1} << 20;
inline constexpr size_t kPieceAlign = 4096;

// threads: the pool's size (>= 1); fixedPiece: RPCJOB_MTCMA_CHUNK_BYTES (0: auto),
// whose pieces all go to the pool (the channel's behaviour before kMinPiece: 1 MiB).
inline ChunkPlan planChunks(size_t length, size_t threads, size_t fixedPiece) {
  auto plan = [length](size_t piece, bool readerTakesFirst) {
    return ChunkPlan{piece, (length + piece - 1) / piece, readerTakesFirst};
  };
  auto alignUp = [](size_t n) { return (n + kPieceAlign - 1) / kPieceAlign * kPieceAlign; };
  if (length == 0) return ChunkPlan{0, 0, true};
  if (threads == 0) threads = 1;
  if (length < 2 * kMinPiece) return plan(length, true);  // one piece, read inline
  if (fixedPiece > 0) return plan(fixedPiece, false);
  const size_t shared = alignUp((length + threads) / (threads + 1));
  if (shared <= kMaxReaderPiece) {
    const size_t piece = shared < kMinPiece ? kMinPiece : shared;
    return plan(piece, true);
  }
  const size_t piece = alignUp((length + 2 * threads - 1) / (2 * threads));
  return plan(piece < kMinPiece ? kMinPiece : piece, false);
}

}  // namespace rpcjob::runtime::channels
