// The chunked row walk of the L2-prefetching CUDA kernels (kernels/cuda/row_chunks.h),
// run on the CPU: on random geometries, every chunk of a warp's rows is computed once,
// in order, covering each row's super-blocks exactly; every chunk is prefetched once,
// before it is computed and never more than `ahead` chunks in front; the wait comes
// after the first prefetches and before any compute; each row is finished once, after
// its last chunk.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/row_chunks.h"

namespace qmv::cuda {
namespace {

struct Event {
  char what;  // 'p' prefetch, 'w' wait, 'c' compute, 'f' finish
  std::int64_t row;
  int chunk;
};

std::vector<Event> walk(const RowChunking& rc, std::int64_t first_row) {
  std::vector<Event> events;
  walk_row_chunks(
      rc, first_row, [&](ChunkAt c) { events.push_back({'p', c.row, c.chunk}); },
      [&] { events.push_back({'w', -1, -1}); }, [&](ChunkAt c) { events.push_back({'c', c.row, c.chunk}); },
      [&](std::int64_t row) { events.push_back({'f', row, -1}); });
  return events;
}

TEST(RowChunks, ChunksCoverEachRowOnceInSteps) {
  const RowChunking rc = row_chunking(10, 4, 56, 16, 2);
  EXPECT_EQ(rc.chunk_blocks, 16);
  EXPECT_EQ(rc.chunks_per_row, 4);
  EXPECT_EQ(chunk_length(rc, {0, 3}), 8);
  const RowChunking short_rows = row_chunking(10, 4, 3, 16, 2);  // a row shorter than a chunk: one chunk
  EXPECT_EQ(short_rows.chunk_blocks, 3);
  EXPECT_EQ(short_rows.chunks_per_row, 1);
  EXPECT_EQ(chunk_length(short_rows, {0, 0}), 3);
}

TEST(RowChunks, WalkPrefetchesEveryChunkOnceAheadOfItsCompute) {
  const std::uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> rows_of(1, 300), stride_of(1, 40);
  std::uniform_int_distribution<int> nb_of(1, 120), chunk_of(1, 24), ahead_of(0, 6);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::int64_t rows = rows_of(rng), stride = stride_of(rng);
    const int nb = nb_of(rng), chunk = chunk_of(rng), ahead = ahead_of(rng);
    const std::int64_t first_row = std::uniform_int_distribution<std::int64_t>(0, stride - 1)(rng);
    SCOPED_TRACE(std::to_string(rows) + " rows, stride " + std::to_string(stride) + ", first " +
                 std::to_string(first_row) + ", " + std::to_string(nb) + " blocks, chunk " + std::to_string(chunk) +
                 ", ahead " + std::to_string(ahead));
    const RowChunking rc = row_chunking(rows, stride, nb, chunk, ahead);
    // What the warp must compute: its rows, each row's chunks in order.
    std::vector<ChunkAt> want;
    for (std::int64_t r = first_row; r < rows; r += stride) {
      int covered = 0;
      for (int c = 0; c < rc.chunks_per_row; ++c) {
        ASSERT_EQ(chunk_first_block(rc, {r, c}), covered);
        const int len = chunk_length(rc, {r, c});
        ASSERT_GT(len, 0);
        ASSERT_LE(len, chunk);
        if (c + 1 < rc.chunks_per_row) ASSERT_EQ(len, rc.chunk_blocks);
        covered += len;
        want.push_back({r, c});
      }
      ASSERT_EQ(covered, nb);
    }
    const std::vector<Event> events = walk(rc, first_row);
    std::vector<ChunkAt> computed, prefetched;
    int waits = 0;
    std::size_t finishes = 0;
    for (const Event& e : events) {
      if (e.what == 'w') {
        ++waits;
        ASSERT_TRUE(computed.empty()) << "waited after computing";
        ASSERT_EQ(prefetched.size(), std::min<std::size_t>(ahead, want.size()));
      } else if (e.what == 'p') {
        prefetched.push_back({e.row, e.chunk});
        ASSERT_LE(prefetched.size(), computed.size() + 1 + ahead) << "prefetched too far ahead";
      } else if (e.what == 'c') {
        ASSERT_EQ(waits, 1) << "computed before the wait";
        computed.push_back({e.row, e.chunk});
        ASSERT_GE(prefetched.size(), computed.size()) << "computed a chunk before prefetching it";
        ASSERT_GE(prefetched.size(), std::min(computed.size() + ahead, want.size()));
      } else {
        ASSERT_FALSE(computed.empty());
        ASSERT_EQ(e.row, computed.back().row);
        ASSERT_EQ(computed.back().chunk, rc.chunks_per_row - 1) << "finished a row before its last chunk";
        ++finishes;
      }
    }
    const auto same = [](const std::vector<ChunkAt>& a, const std::vector<ChunkAt>& b) {
      return a.size() == b.size() &&
             std::equal(a.begin(), a.end(), b.begin(), [](ChunkAt x, ChunkAt y) { return x.row == y.row && x.chunk == y.chunk; });
    };
    ASSERT_EQ(waits, 1);
    ASSERT_TRUE(same(computed, want)) << "computed " << computed.size() << " chunks, want " << want.size();
    ASSERT_TRUE(same(prefetched, want)) << "prefetched " << prefetched.size() << " chunks, want " << want.size();
    ASSERT_EQ(finishes, want.size() / static_cast<std::size_t>(rc.chunks_per_row));
  }
}

}  // namespace
}  // namespace qmv::cuda
