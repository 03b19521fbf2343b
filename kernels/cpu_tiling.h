// How CPU kernels share out rows: the process-wide row tiling, the parallel loop over
// row tiles, the one-row-at-a-time kernel loop built on it, and per-thread scratch.
// The CPU plugins' support code; the plugin interface itself is kernel.h.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include <omp.h>

#include "kernels/kernel.h"

namespace qmv {

// Per-thread scratch memory for a kernel's per-call preparation (e.g. a re-ordered
// activation), 64-byte aligned, reused across calls, contents undefined. It lives in
// a plain translation unit for the reason given at KernelRecord.
void* thread_scratch(std::size_t bytes);

// How CPU kernels spread rows over threads: OpenMP over tiles of `tile_rows` rows;
// calls with fewer than `min_parallel_rows` rows stay on one thread, where waking
// a thread team costs more than it saves. Both are set for the process by the CLI
// (`--tile-rows`, `--min-parallel-rows`) and recorded in every bench row. The defaults
// come from the tiling sweep in results/<machine>/tiling.csv: tile heights far from
// 64 gain nothing on the FFN shapes, and two threads lose on calls below 128 rows.
struct CpuTiling {
  std::int64_t tile_rows = 64;
  std::int64_t min_parallel_rows = 128;
};
const CpuTiling& cpu_tiling();
void set_cpu_tiling(CpuTiling t);

// A thread of a team that runs several kernel calls in one parallel region (the
// model's calls that read one activation vector): its kernels' parallel loops share
// their rows over the team it is in, without a barrier at their end, instead of
// opening a region of their own. Every thread of the team makes the same calls.
void set_in_call_team(bool member);
bool in_call_team();

// The tile height for `rows` over `threads`: at most cpu_tiling().tile_rows, sized so
// every thread gets the same number of tiles (192 rows on 2 threads are 4 tiles of 48,
// not 64+64 against 64), and a multiple of 4 rows where that fits, so multi-row
// kernels stay on their fast path.
inline std::int64_t balanced_tile_rows(std::int64_t rows, int threads) {
  const std::int64_t target = cpu_tiling().tile_rows;
  if (threads <= 1) return target;
  const std::int64_t per_thread = (rows + threads * target - 1) / (threads * target);
  const std::int64_t tiles = threads * per_thread;
  const std::int64_t height = (rows + tiles - 1) / tiles;
  const std::int64_t rounded = (height + 3) / 4 * 4;
  const bool rounded_balances = rounded <= target && ((rows + rounded - 1) / rounded) % threads == 0;
  return rounded_balances ? rounded : height;
}

// Calls tile(first_row, end_row) for consecutive tiles covering [0, rows), in
// parallel over `threads` OpenMP threads (or serially, per cpu_tiling()).
template <class TileFn>
void parallel_row_tiles(std::int64_t rows, int threads, TileFn&& tile) {
  const CpuTiling t = cpu_tiling();
  if (in_call_team()) {
    const std::int64_t height = balanced_tile_rows(rows, omp_get_num_threads());
    const std::int64_t n_tiles = (rows + height - 1) / height;
#pragma omp for schedule(static) nowait
    for (std::int64_t i = 0; i < n_tiles; ++i) tile(i * height, std::min(rows, (i + 1) * height));
    return;
  }
  if (threads <= 1 || rows < t.min_parallel_rows) {
    // Even a team of one costs a fraction of a microsecond to open, which is most of
    // a small call: stay out of OpenMP.
    for (std::int64_t r = 0; r < rows; r += t.tile_rows) tile(r, std::min(rows, r + t.tile_rows));
    return;
  }
  const std::int64_t height = balanced_tile_rows(rows, threads);
  const std::int64_t n_tiles = (rows + height - 1) / height;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t i = 0; i < n_tiles; ++i) tile(i * height, std::min(rows, (i + 1) * height));
}

// How the multi-row kernels take the rows of a tile [r0, r1): cut into NR contiguous
// parts of q = (r1 - r0) / NR rows, step k hands rows(r) the NR rows r0 + i*q + k, one
// from each part, so each weight stream walks consecutive rows; the rows left over go
// to row(r) one at a time.
template <int NR, class RowsFn, class RowFn>
void for_rows_in_parts(std::int64_t r0, std::int64_t r1, RowsFn&& rows, RowFn&& row) {
  const std::int64_t q = (r1 - r0) / NR;
  for (std::int64_t k = 0; k < q; ++k) {
    std::int64_t r[NR];
    for (int i = 0; i < NR; ++i) r[i] = r0 + i * q + k;
    rows(r);
  }
  for (std::int64_t r = r0 + NR * q; r < r1; ++r) row(r);
}

// The loop of a kernel that computes one row at a time: y[r] = RowDot(row r's
// blocks, x, blocks per row), over row tiles. For float weights a block is one value.
template <class WeightBlock, class Activation,
          float (*RowDot)(const WeightBlock*, const Activation*, std::int64_t)>
Status run_rows(const MatVecArgs& a) {
  static_assert(kValuesPerBlock<WeightBlock> > 0, "kValuesPerBlock not defined for this block type");
  const std::int64_t n_blocks = a.shape.cols / kValuesPerBlock<WeightBlock>;
  const auto* w = static_cast<const WeightBlock*>(a.w);
  const auto* x = static_cast<const Activation*>(a.x);
  parallel_row_tiles(a.shape.rows, a.threads, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) a.y[r] = RowDot(w + r * n_blocks, x, n_blocks);
  });
  return Status::Ok();
}

}  // namespace qmv
