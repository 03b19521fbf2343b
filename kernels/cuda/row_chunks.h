// A warp's walk over its rows of a matrix, a chunk of super-blocks at a time, with a
// second cursor `ahead` chunks in front naming what to prefetch into L2. The lane code
// of a chunk keeps only a few super-blocks of loads in flight (registers bound it); the
// prefetches keep the DRAM busy for the chunks to come, so those loads find L2 instead.
// The walk runs on in the warp's next row (grid-stride), so the first chunk of a row is
// already on its way while the last one of the previous row is computed.
// Plain arithmetic marked host+device: the kernels (prefetch_rows.cuh) and the CPU
// replay tests run the same walk.
#pragma once

#include <cstdint>

#include "kernels/cuda/lane_math.h"

namespace qmv::cuda {

struct RowChunking {
  std::int64_t rows;        // of the matrix
  std::int64_t row_stride;  // from one of a warp's rows to its next: the warps of the grid
  int blocks_per_row;       // super-blocks
  int chunk_blocks;         // super-blocks per chunk; a row's last chunk may be shorter
  int chunks_per_row;
  int ahead;                // chunks the prefetch cursor leads the compute cursor by
};

QMV_HD RowChunking row_chunking(std::int64_t rows, std::int64_t row_stride, int blocks_per_row, int chunk_blocks,
                                int ahead) {
  const int chunk = blocks_per_row < chunk_blocks ? blocks_per_row : chunk_blocks;
  const int chunks = chunk > 0 ? (blocks_per_row + chunk - 1) / chunk : 0;
  return {rows, row_stride, blocks_per_row, chunk, chunks, ahead};
}

struct ChunkAt {
  std::int64_t row;
  int chunk;
};

QMV_HD ChunkAt next_chunk(const RowChunking& rc, ChunkAt at) {
  if (++at.chunk == rc.chunks_per_row) {
    at.chunk = 0;
    at.row += rc.row_stride;
  }
  return at;
}

QMV_HD int chunk_first_block(const RowChunking& rc, ChunkAt at) { return at.chunk * rc.chunk_blocks; }

QMV_HD int chunk_length(const RowChunking& rc, ChunkAt at) {
  const int rest = rc.blocks_per_row - chunk_first_block(rc, at);
  return rest < rc.chunk_blocks ? rest : rc.chunk_blocks;
}

// The walk of the warp whose first row is `first_row`: prefetch(at) for the first
// `ahead` chunks, then wait() (the kernel waits there for the kernel before it, whose
// output it reads, while those prefetches run), then for every chunk in order one
// prefetch(ahead cursor) and compute(at), and finish(row) after a row's last chunk.
// Every chunk of the warp's rows is prefetched once, in order, before it is computed.
template <class Prefetch, class Wait, class Compute, class Finish>
QMV_HD void walk_row_chunks(const RowChunking& rc, std::int64_t first_row, Prefetch&& prefetch, Wait&& wait,
                            Compute&& compute, Finish&& finish) {
  if (rc.chunks_per_row == 0) return;
  ChunkAt ahead{first_row, 0};
  for (int i = 0; i < rc.ahead && ahead.row < rc.rows; ++i) {
    prefetch(ahead);
    ahead = next_chunk(rc, ahead);
  }
  wait();
  for (ChunkAt at{first_row, 0}; at.row < rc.rows;) {
    if (ahead.row < rc.rows) {
      prefetch(ahead);
      ahead = next_chunk(rc, ahead);
    }
    compute(at);
    const ChunkAt next = next_chunk(rc, at);
    if (next.row != at.row) finish(at.row);
    at = next;
  }
}

}  // namespace qmv::cuda
