// Device side shared by the Q4_K CUDA variant files: the Loads policies the lane
// functions of q4_K_lanes.h read memory through (GlobalLoads, global_loads.h, with
// Q4_K's cache hints and header broadcasts), the cross-warp reduction of the
// multi-warp layouts, the host-side checks every run function makes before its
// launch, and the resident-block count for grid-stride launches.
#pragma once

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <string>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/q4_K_lanes.h"

namespace qmv::cuda::q4k {

// Weights are streamed once: their words and vectors bypass L1, so the activations,
// which every row reads again, keep it. The byte-per-lane variants' byte and 16-bit
// weight loads take the default path. Activations: the default path.
struct Q4KLoads : GlobalLoads<L1Hint::kNoAllocate> {
  QMV_HD std::uint8_t weight_u8(const void* p) const { return load_nc<std::uint8_t>(p); }
  QMV_HD std::uint16_t weight_u16(const void* p) const { return load_nc<std::uint16_t>(p); }
  // Lane 0 loads the header as four 32-bit words (d | dmin, then the 12 scale
  // bytes as three words); every lane receives them by shuffle.
  QMV_HD void header_from_lane_0(const std::uint32_t* block, int lane, std::uint32_t (&out)[kHeaderWords]) const {
#if defined(__CUDA_ARCH__)
    std::uint32_t mine[kHeaderWords] = {0u, 0u, 0u, 0u};
    if (lane == 0) {
#pragma unroll
      for (int i = 0; i < kHeaderWords; ++i) mine[i] = weight_u32(block + i);
    }
#pragma unroll
    for (int i = 0; i < kHeaderWords; ++i) out[i] = __shfl_sync(0xffffffffu, mine[i], 0);
#else
    (void)lane;
    for (int i = 0; i < kHeaderWords; ++i) out[i] = block[i];
#endif
  }
  // Lane i < 4 loads header word i (one coalesced 16-byte request); every lane
  // receives all four by shuffle.
  QMV_HD void header_from_lanes_0_to_3(const std::uint32_t* block, int lane, std::uint32_t (&out)[kHeaderWords]) const {
#if defined(__CUDA_ARCH__)
    const std::uint32_t mine = lane < kHeaderWords ? weight_u32(block + lane) : 0u;
#pragma unroll
    for (int i = 0; i < kHeaderWords; ++i) out[i] = __shfl_sync(0xffffffffu, mine, i);
#else
    (void)lane;
    for (int i = 0; i < kHeaderWords; ++i) out[i] = block[i];
#endif
  }
};

// As Q4KLoads, with the activations in shared memory (tiled, chunked).
struct SharedActLoads : Q4KLoads {
  QMV_HD float act_f32(const float* p) const { return *p; }
};

// The block's total of `v` (one value per thread) in thread 0; kWarps warps.
// `scratch` is kWarps floats of shared memory.
template <int kWarps>
__device__ __forceinline__ float block_sum_to_thread_0(float v, float* scratch) {
  v = warp_sum(v);
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.0f;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += scratch[w];
  }
  return total;
}

// The grouped DP4A kernels (halfwarp_dp4a, quarterwarp_dp4a): a warp per row at a time
// over a grid-stride loop, each lane grouped_lane_row<kGroups, kUnroll, kWords>. 8 blocks
// of 128 threads per SM at <= 64 registers: 1024 threads, enough 16-byte loads in
// flight per SM for HBM.
template <int kGroups, int kUnroll, int kWords>
__global__ void __launch_bounds__(halfwarp_dp4a::kThreads, 8)
    grouped_dp4a_kernel(const std::uint32_t* __restrict__ w, const std::uint32_t* __restrict__ x,
                        float* __restrict__ y, int rows, int nb) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const std::int64_t stride = halfwarp_dp4a::row_stride(gridDim.x);
  for (std::int64_t row = halfwarp_dp4a::first_row(blockIdx.x, warp); row < rows; row += stride) {
    float acc = grouped_lane_row<kGroups, kUnroll, kWords>(Q4KLoads{}, row_words_of(w, row, nb), x, nb, lane);
    acc = warp_sum(acc);
    if (lane == 0) y[row] = acc;
  }
}

// Their launch: one warp per row, grid-stride only past kMaxWaves waves of resident
// blocks (below it every warp has one row and the block scheduler balances the tail;
// above it, vocabulary-sized matrices, blocks are reused instead of launched by the
// ten thousand).
template <int kGroups, int kUnroll, int kWords>
Status run_grouped_dp4a(const MatVecArgs& a, const char* name) {
  constexpr std::int64_t kMaxWaves = 8;
  constexpr auto kernel = grouped_dp4a_kernel<kGroups, kUnroll, kWords>;
  if (Status s = check_launch(name, a, 16, 4); !s.ok()) return s;
  const int nb = static_cast<int>(a.shape.cols / kSuperBlock);
  const std::int64_t resident = resident_ctas<kernel>(halfwarp_dp4a::kThreads);
  const std::int64_t cap = resident > 0 ? kMaxWaves * resident : halfwarp_dp4a::grid(a.shape.rows, INT_MAX);
  return launch_checked(name, [&] {
    grouped_dp4a_kernel<kGroups, kUnroll, kWords>
        <<<static_cast<unsigned>(halfwarp_dp4a::grid(a.shape.rows, cap)), halfwarp_dp4a::kThreads, 0, stream_of(a)>>>(
            static_cast<const std::uint32_t*>(a.w), static_cast<const std::uint32_t*>(a.x), a.y,
            static_cast<int>(a.shape.rows), nb);
  });
}

// The batch form of the grouped DP4A kernels: kN activation vectors per call, back to
// back in x (vec_words words each) and y (rows floats each); each row's weights are
// read once for all of them.
template <int kGroups, int kUnroll, int kWords, int kN, int kMinBlocks>
__global__ void __launch_bounds__(halfwarp_dp4a::kThreads, kMinBlocks)
    grouped_dp4a_batch_kernel(const std::uint32_t* __restrict__ w, const std::uint32_t* __restrict__ x,
                              float* __restrict__ y, int rows, int nb, std::int64_t vec_words) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const std::int64_t stride = halfwarp_dp4a::row_stride(gridDim.x);
  for (std::int64_t row = halfwarp_dp4a::first_row(blockIdx.x, warp); row < rows; row += stride) {
    float acc[kN];
    grouped_lane_row_batch<kGroups, kUnroll, kWords, kN>(Q4KLoads{}, row_words_of(w, row, nb), x, vec_words, nb,
                                                         lane, acc);
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      const float sum = warp_sum(acc[j]);
      if (lane == 0) y[std::int64_t(j) * rows + row] = sum;
    }
  }
}

template <int kGroups, int kUnroll, int kWords, int kN, int kMinBlocks>
Status launch_grouped_dp4a_batch(const MatVecArgs& a, const char* name) {
  constexpr std::int64_t kMaxWaves = 8;
  constexpr auto kernel = grouped_dp4a_batch_kernel<kGroups, kUnroll, kWords, kN, kMinBlocks>;
  const int nb = static_cast<int>(a.shape.cols / kSuperBlock);
  const std::int64_t resident = resident_ctas<kernel>(halfwarp_dp4a::kThreads);
  const std::int64_t cap = resident > 0 ? kMaxWaves * resident : halfwarp_dp4a::grid(a.shape.rows, INT_MAX);
  return launch_checked(name, [&] {
    kernel<<<static_cast<unsigned>(halfwarp_dp4a::grid(a.shape.rows, cap)), halfwarp_dp4a::kThreads, 0,
             stream_of(a)>>>(static_cast<const std::uint32_t*>(a.w), static_cast<const std::uint32_t*>(a.x), a.y,
                             static_cast<int>(a.shape.rows), nb, std::int64_t{nb} * kQ8_1WordsPerSuperBlock);
  });
}

// One kernel per vector count, so each keeps its accumulators in registers; at least
// kMinBlocks blocks of 128 threads resident per SM (8: at most 64 registers a thread).
template <int kGroups, int kUnroll, int kWords, int kMinBlocks = 8>
Status run_grouped_dp4a_batch(const MatVecArgs& a, const char* name) {
  if (Status s = check_launch(name, a, 16, 4); !s.ok()) return s;
  return for_vector_count(name, a.n, [&](auto n) {
    return launch_grouped_dp4a_batch<kGroups, kUnroll, kWords, decltype(n)::value, kMinBlocks>(a, name);
  });
}

}  // namespace qmv::cuda::q4k
