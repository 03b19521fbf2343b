// The two launch shapes of the Q5_K and Q6_K CUDA variants, around the per-lane row
// functions of q5_K_lanes.h and q6_K_lanes.h:
// - warp per row (warp, dp4a, halfwarp_dp4a): 4 warps per block, each warp one row at a
//   time over a grid-stride loop, lane 0 writes the row;
// - multi-warp per row (warpxN): one block of kWarps warps per row, each warp a share of
//   the super-blocks, the warp sums meeting in shared memory; thread 0 writes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/q5_K_q6_K_lanes.h"

namespace qmv::cuda::q5q6 {

// Row::partial(mem, shfl, row bytes, activations, super-blocks per row, lane) is a
// lane's share of one row.
template <class Row>
__global__ void __launch_bounds__(kRowWarpsPerBlock * kLanes, 8)
    warp_per_row_kernel(const std::uint8_t* __restrict__ w, const typename Row::Act* __restrict__ x,
                        float* __restrict__ y, std::int64_t rows, std::int64_t nb) {
  const int warp = static_cast<int>(threadIdx.x) / kLanes, lane = static_cast<int>(threadIdx.x) % kLanes;
  const std::int64_t row_bytes = nb * Row::kBlockBytes;
  Q5KQ6KLoads mem;
  WarpShuffle shfl;
  for (std::int64_t row = warp_first_row(static_cast<int>(blockIdx.x), warp, kRowWarpsPerBlock); row < rows;
       row += warp_row_stride(static_cast<int>(gridDim.x), kRowWarpsPerBlock)) {
    const float sum = warp_sum(Row::partial(mem, shfl, w + row * row_bytes, x, nb, lane));
    if (lane == 0) y[row] = sum;
  }
}

// Row::partial(mem, shfl, row bytes, activations, super-blocks per row, warp, lane).
// Enough blocks stay resident for 32 warps per SM (at most 64 registers a thread).
template <class Row>
__global__ void __launch_bounds__(Row::kWarpsPerRow * kLanes, 1024 / (Row::kWarpsPerRow * kLanes))
    warpxN_kernel(const std::uint8_t* __restrict__ w, const typename Row::Act* __restrict__ x,
                  float* __restrict__ y, std::int64_t nb) {
  __shared__ float warp_sums[Row::kWarpsPerRow];
  const int warp = static_cast<int>(threadIdx.x) / kLanes, lane = static_cast<int>(threadIdx.x) % kLanes;
  const std::int64_t row = blockIdx.x;
  Q5KQ6KLoads mem;
  WarpShuffle shfl;
  const float sum = warp_sum(Row::partial(mem, shfl, w + row * nb * Row::kBlockBytes, x, nb, warp, lane));
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int i = 0; i < Row::kWarpsPerRow; ++i) total += warp_sums[i];
    y[row] = total;
  }
}

// The alignment the row functions' loads need: Q5_K's 176-byte blocks are read in
// 32-bit words, Q6_K's 210-byte blocks (2-aligned inside a row) in 16-bit ones; f32
// activations as 16-byte vectors, Q8_1 blocks as 32-bit words.
template <class Row>
constexpr std::size_t weight_alignment() {
  return Row::kBlockBytes % 4 == 0 ? 4 : 2;
}
template <class Row>
constexpr std::size_t activation_alignment() {
  return std::is_same_v<typename Row::Act, float> ? 16 : 4;
}

// The launches, checked first (a misaligned load would fault the whole context) and
// reported through launch_checked(name).
template <class Row>
Status launch_warp_per_row(const MatVecArgs& a, int grid, const char* name) {
  if (Status s = check_launch(name, a, weight_alignment<Row>(), activation_alignment<Row>()); !s.ok()) return s;
  return launch_checked(name, [&] {
    warp_per_row_kernel<Row><<<grid, kRowWarpsPerBlock * kLanes, 0, stream_of(a)>>>(
        static_cast<const std::uint8_t*>(a.w), static_cast<const typename Row::Act*>(a.x), a.y, a.shape.rows,
        a.shape.cols / kSuperBlock);
  });
}

template <class Row>
Status launch_warpxN(const MatVecArgs& a, const char* name) {
  if (Status s = check_launch(name, a, weight_alignment<Row>(), activation_alignment<Row>()); !s.ok()) return s;
  return launch_checked(name, [&] {
    warpxN_kernel<Row><<<static_cast<unsigned>(a.shape.rows), Row::kWarpsPerRow * kLanes, 0, stream_of(a)>>>(
        static_cast<const std::uint8_t*>(a.w), static_cast<const typename Row::Act*>(a.x), a.y,
        a.shape.cols / kSuperBlock);
  });
}

// A grid-stride warp-per-row kernel's run: a grid the device keeps resident at once,
// sized so every warp has the same number of rows.
template <class Row>
Status run_resident_warp_per_row(const MatVecArgs& a, const char* name) {
  const std::int64_t resident = resident_ctas<warp_per_row_kernel<Row>>(kRowWarpsPerBlock * kLanes);
  return launch_warp_per_row<Row>(a, balanced_warp_per_row_grid(a.shape.rows, resident), name);
}

// The batch form of the warp-per-row kernel: kN activation vectors back to back in x
// (vec_blocks blocks each) and in y (rows floats each);
// Row::partial<kN>(mem, shfl, row bytes, activations, vec_blocks, super-blocks per row,
// lane, acc) fills a lane's share of the row for every vector.
template <class Row, int kN>
__global__ void __launch_bounds__(kRowWarpsPerBlock * kLanes, 8)
    warp_per_row_batch_kernel(const std::uint8_t* __restrict__ w, const typename Row::Act* __restrict__ x,
                              float* __restrict__ y, std::int64_t rows, std::int64_t nb, std::int64_t vec_blocks) {
  const int warp = static_cast<int>(threadIdx.x) / kLanes, lane = static_cast<int>(threadIdx.x) % kLanes;
  const std::int64_t row_bytes = nb * Row::kBlockBytes;
  Q5KQ6KLoads mem;
  WarpShuffle shfl;
  for (std::int64_t row = warp_first_row(static_cast<int>(blockIdx.x), warp, kRowWarpsPerBlock); row < rows;
       row += warp_row_stride(static_cast<int>(gridDim.x), kRowWarpsPerBlock)) {
    float acc[kN];
    Row::template partial<kN>(mem, shfl, w + row * row_bytes, x, vec_blocks, nb, lane, acc);
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      const float sum = warp_sum(acc[j]);
      if (lane == 0) y[j * rows + row] = sum;
    }
  }
}

template <class Row, int kN>
Status launch_resident_warp_per_row_batch(const MatVecArgs& a, const char* name) {
  constexpr auto kernel = warp_per_row_batch_kernel<Row, kN>;
  const std::int64_t resident = resident_ctas<kernel>(kRowWarpsPerBlock * kLanes);
  const int grid = balanced_warp_per_row_grid(a.shape.rows, resident);
  return launch_checked(name, [&] {
    kernel<<<grid, kRowWarpsPerBlock * kLanes, 0, stream_of(a)>>>(
        static_cast<const std::uint8_t*>(a.w), static_cast<const typename Row::Act*>(a.x), a.y, a.shape.rows,
        a.shape.cols / kSuperBlock, a.shape.cols / kQ8_1Block);
  });
}

// A batch kernel's run: one kernel per vector count (1..8), so each keeps its
// accumulators in registers, on run_resident_warp_per_row's grid.
template <class Row>
Status run_resident_warp_per_row_batch(const MatVecArgs& a, const char* name) {
  if (Status s = check_launch(name, a, weight_alignment<Row>(), activation_alignment<Row>()); !s.ok()) return s;
  return for_vector_count(name, a.n, [&](auto n) {
    return launch_resident_warp_per_row_batch<Row, decltype(n)::value>(a, name);
  });
}

}  // namespace qmv::cuda::q5q6
