// rpcjob_cma's split of a transfer into pieces (chunk_plan.h): every length
// from 0 to past the reader's limit, for pool sizes 1..16, is covered exactly
// once by whole, aligned pieces, and the receiving thread is never given more
// than kMaxReaderPiece; plus the sizes the benchmark moves.
#include <gtest/gtest.h>

#include <algorithm>

#include "channels/mtcma/chunk_plan.h"

namespace rpcjob::runtime::channels {
namespace {

void expectCovers(size_t length, size_t threads, size_t fixed) {
  SCOPED_TRACE(::testing::Message()
               << "length " << length << " threads " << threads << " fixed " << fixed);
  const ChunkPlan p = planChunks(length, threads, fixed);
  if (length == 0) {
    EXPECT_EQ(p.pieces, 0u);
    return;
  }
  ASSERT_GT(p.piece, 0u);
  // The pieces [i * piece, min((i + 1) * piece, length)) tile [0, length).
  EXPECT_EQ(p.pieces, (length + p.piece - 1) / p.piece);
  EXPECT_GE(p.piece * p.pieces, length);
  EXPECT_LT(p.piece * (p.pieces - 1), length);  // no empty last piece
  if (p.pieces > 1) {
    EXPECT_EQ(p.piece % kPieceAlign, 0u);
    EXPECT_GE(p.piece, fixed > 0 ? fixed : kMinPiece);
  }
  if (p.readerTakesFirst && p.pieces > 1) {
    EXPECT_LE(p.piece, kMaxReaderPiece);
    EXPECT_LE(p.pieces, std::max<size_t>(threads, 1) + 1);  // a pool thread for each other piece
  }
  if (fixed > 0 && p.pieces > 1) {
    EXPECT_FALSE(p.readerTakesFirst);
  }
}

TEST(MtCmaChunkPlan, EveryLengthIsCoveredOnceByAlignedPieces) {
  for (size_t threads = 0; threads <= 16; ++threads) {
    for (size_t length = 0; length <= (size_t{20} << 20); length += 4093) {
      expectCovers(length, threads, 0);
    }
    for (size_t fixed : {size_t{1} << 20, size_t{3} << 20}) {
      for (size_t length = 0; length <= (size_t{8} << 20); length += 65521) {
        expectCovers(length, threads, fixed);
      }
    }
  }
  for (size_t length : {size_t{400} << 20, (size_t{400} << 20) + 1, size_t{100000000} * 4}) {
    for (size_t threads : {1, 2, 8, 16}) expectCovers(length, threads, 0);
  }
}

TEST(MtCmaChunkPlan, SmallTransfersAreReadInOnePieceByTheReceiver) {
  for (size_t length : {size_t{1}, size_t{4096}, 2 * kMinPiece - 1}) {
    const ChunkPlan p = planChunks(length, 8, 0);
    EXPECT_EQ(p.pieces, 1u);
    EXPECT_TRUE(p.readerTakesFirst);
  }
}

TEST(MtCmaChunkPlan, FourMegabytesUseEveryThreadAndTheReceiver) {
  const size_t fourMb = size_t{4} << 20;
  ChunkPlan p = planChunks(fourMb, 8, 0);
  EXPECT_EQ(p.pieces, 9u);  // 8 pool threads + the receiving thread, ~455 KiB each
  EXPECT_TRUE(p.readerTakesFirst);
  // Too few threads for pieces of at most 1 MiB: the pool alone, as before.
  p = planChunks(fourMb, 2, 0);
  EXPECT_EQ(p.pieces, 4u);
  EXPECT_EQ(p.piece, size_t{1} << 20);
  EXPECT_FALSE(p.readerTakesFirst);
  // The override reproduces the old split.
  p = planChunks(fourMb, 8, size_t{1} << 20);
  EXPECT_EQ(p.pieces, 4u);
  EXPECT_FALSE(p.readerTakesFirst);
}

TEST(MtCmaChunkPlan, LargeTransfersLeaveTheReceiverFree) {
  const ChunkPlan p = planChunks(size_t{400} << 20, 8, 0);
  EXPECT_EQ(p.pieces, 16u);
  EXPECT_FALSE(p.readerTakesFirst);
}

}  // namespace
}  // namespace rpcjob::runtime::channels
