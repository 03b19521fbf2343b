// Lane code the Q5_K and Q6_K CUDA variants share, with their CPU replay test: the
// block sizes, the memory policy their kernels use, how a lane talks to the other lanes
// (a small policy, so the same lane code runs in a kernel and, with recording policies,
// in the test), and the launch geometry of warp-per-row kernels. Plain C++ with QMV_HD:
// g++ compiles it for the test, nvcc for the kernels.
#pragma once

#include <cstdint>
#include <cstdlib>

#include "kernels/cuda/global_loads.h"
#include "kernels/cuda/lane_math.h"
#include "kernels/formats/formats.h"

// The family namespace keeps these general names (WarpShuffle, kLanes, ...) apart from
// other kernel families' helpers.
namespace qmv::cuda::q5q6 {

inline constexpr int kLanes = 32;
inline constexpr int kQ5KBlockBytes = 176;
inline constexpr int kQ6KBlockBytes = 210;
static_assert(sizeof(BlockQ5K) == kQ5KBlockBytes && sizeof(BlockQ6K) == kQ6KBlockBytes);
static_assert(sizeof(BlockQ8_1) == 36 && kQ8_1Block == 32);

// Weight bytes are used once per call, so their lines are marked first to leave L1:
// they stay for the other 16-bit loads of the same sector (Q6_K words come in two
// halves), then make room for the activation vector, which every row reads again.
using Q5KQ6KLoads = GlobalLoads<L1Hint::kEvictFirst>;

// Lane exchange of the lane code: v from lane `src` (0..31) of the same warp. Every
// lane of the warp must make the same calls in the same order (they are never under a
// lane-dependent condition). The CPU test replays them with its own policy.
struct WarpShuffle {
  QMV_HD std::uint32_t operator()(std::uint32_t v, int src) const {
#if defined(__CUDA_ARCH__)
    return __shfl_sync(0xffffffffu, v, src);
#else
    (void)v;
    (void)src;
    std::abort();  // host code replays shuffles with a policy that sees every lane
#endif
  }
};

// Warp-per-row kernels: `warps_per_block` warps per thread block, one row per warp;
// block `block`'s warp `warp` takes rows first, first + stride, ... (a grid-stride loop,
// so any grid covers every row once).
QMV_HD std::int64_t warp_first_row(int block, int warp, int warps_per_block) {
  return static_cast<std::int64_t>(block) * warps_per_block + warp;
}
QMV_HD std::int64_t warp_row_stride(int grid, int warps_per_block) {
  return static_cast<std::int64_t>(grid) * warps_per_block;
}

inline constexpr int kRowWarpsPerBlock = 4;  // 128 threads: 8 such blocks fill an SM at 64 registers

// Grid of a warp-per-row launch: one row per warp, at most `max_blocks` blocks (the
// grid-stride loop gives the warps of a smaller grid several rows each).
inline int warp_per_row_grid(std::int64_t rows, std::int64_t max_blocks = INT64_MAX) {
  const std::int64_t wanted = (rows + kRowWarpsPerBlock - 1) / kRowWarpsPerBlock;
  const std::int64_t cap = max_blocks < 1 ? 1 : max_blocks;
  const std::int64_t grid = wanted < cap ? wanted : cap;
  return static_cast<int>(grid < 0x7fffffff ? grid : 0x7fffffff);
}

// Grid of a warp-per-row launch when `resident_blocks` blocks fit on the device at
// once: all of them, or fewer, so that every warp gets the same number of rows (one
// more row for some warps would leave the device nearly idle while they finish it).
// 14336 rows on 1056 resident blocks: 896 blocks, 4 rows per warp.
inline int balanced_warp_per_row_grid(std::int64_t rows, std::int64_t resident_blocks) {
  if (resident_blocks < 1) return warp_per_row_grid(rows);
  const std::int64_t warps = resident_blocks * kRowWarpsPerBlock;
  const std::int64_t rows_per_warp = (rows + warps - 1) / warps;
  const std::int64_t busy_warps = (rows + rows_per_warp - 1) / rows_per_warp;
  return warp_per_row_grid(busy_warps);
}

}  // namespace qmv::cuda::q5q6
