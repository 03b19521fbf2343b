// Warp-per-row matvec kernels that prefetch their weights into L2 ahead of the lane
// code (the walk of row_chunks.h). A variant supplies its row code as a Dot:
//   kBlockBytes   bytes of a weight super-block
//   kActBytes     bytes of the activations one super-block multiplies
//   kChunkBlocks  super-blocks per chunk: a multiple of the lane code's step, about
//                 2.5 KB of weights, so one prefetch instruction per lane covers it
//   partial(w, x, nb, lane)  the lane's share of nb super-blocks from w and x (device)
// The grid is one wave of resident blocks, every warp the same number of rows. Launched
// with MatVecArgs::overlap_previous (sm_90), the kernel starts while the one before it
// finishes: its first prefetches run then, and it waits before reading x.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/q5_K_q6_K_launch.cuh"
#include "kernels/cuda/row_chunks.h"

namespace qmv::cuda {

inline constexpr int kPrefetchRowWarps = q5q6::kRowWarpsPerBlock;  // the balanced grid's warps per block
inline constexpr int kL2Line = 128;

// One L2 prefetch per 128-byte line of [p, p + bytes), spread over the warp's lanes.
// The first line starts at or below p and the last one holds p + bytes - 1, so no
// address lies outside the weights.
__device__ __forceinline__ void prefetch_l2(const std::uint8_t* p, std::int64_t bytes, int lane) {
  const std::uintptr_t first = reinterpret_cast<std::uintptr_t>(p) & ~std::uintptr_t(kL2Line - 1);
  const std::uintptr_t end = reinterpret_cast<std::uintptr_t>(p) + static_cast<std::uintptr_t>(bytes);
  for (std::uintptr_t line = first + std::uintptr_t(lane) * kL2Line; line < end; line += kWarp * kL2Line)
    asm volatile("prefetch.global.L2 [%0];" ::"l"(line));
}

// Where this kernel was launched as a programmatic dependent of the one before it
// (sm_90), waits until that kernel is done and its writes are visible; otherwise the
// launch itself already waited and this does nothing.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

template <class Dot>
__global__ void __launch_bounds__(kPrefetchRowWarps * kWarp, Dot::kMinBlocksPerSm)
    prefetch_rows_kernel(const std::uint8_t* __restrict__ w, const std::uint8_t* __restrict__ x,
                         float* __restrict__ y, RowChunking rc) {
  let_dependent_kernel_start();
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  const std::int64_t row_bytes = std::int64_t(rc.blocks_per_row) * Dot::kBlockBytes;
  const auto weights_of = [&](ChunkAt c) {
    return w + c.row * row_bytes + std::int64_t(chunk_first_block(rc, c)) * Dot::kBlockBytes;
  };
  float acc = 0.0f;
  walk_row_chunks(
      rc, std::int64_t(blockIdx.x) * kPrefetchRowWarps + warp,
      [&](ChunkAt c) { prefetch_l2(weights_of(c), std::int64_t(chunk_length(rc, c)) * Dot::kBlockBytes, lane); },
      [] { wait_for_previous_kernel(); },
      [&](ChunkAt c) {
        acc += Dot::partial(weights_of(c), x + std::int64_t(chunk_first_block(rc, c)) * Dot::kActBytes,
                            chunk_length(rc, c), lane);
      },
      [&](std::int64_t row) {
        const float sum = warp_sum(acc);
        if (lane == 0) y[row] = sum;
        acc = 0.0f;
      });
}

// The run function of a Dot with `ahead` chunks of lookahead.
template <class Dot, int kAhead>
Status run_prefetch_rows(const MatVecArgs& a, const char* name) {
  if (Status s = check_launch(name, a, Dot::kWeightAlign, Dot::kActAlign); !s.ok()) return s;
  static q5q6::ResidentBlocks resident;
  const int blocks = resident.get(prefetch_rows_kernel<Dot>, kPrefetchRowWarps * kWarp);
  const int grid = q5q6::balanced_warp_per_row_grid(a.shape.rows, blocks);
  const RowChunking rc = row_chunking(a.shape.rows, std::int64_t(grid) * kPrefetchRowWarps,
                                      static_cast<int>(a.shape.cols / kSuperBlock), Dot::kChunkBlocks, kAhead);
  const auto* w = static_cast<const std::uint8_t*>(a.w);
  const auto* x = static_cast<const std::uint8_t*>(a.x);
  if (!a.overlap_previous)
    return launch_checked(name, [&] {
      prefetch_rows_kernel<Dot><<<grid, kPrefetchRowWarps * kWarp, 0, stream_of(a)>>>(w, x, a.y, rc);
    });
  // A programmatic dependent of the kernel before it: the kernel waits for it after
  // the first prefetches (wait_for_previous_kernel).
  cudaLaunchAttribute overlap[1] = {};
  overlap[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(grid));
  config.blockDim = dim3(kPrefetchRowWarps * kWarp);
  config.stream = stream_of(a);
  config.attrs = overlap;
  config.numAttrs = 1;
  return launch_checked(name, [&] { cudaLaunchKernelEx(&config, prefetch_rows_kernel<Dot>, w, x, a.y, rc); });
}

}  // namespace qmv::cuda
