// The kernels and launches the legacy-quant and float-weight GPU matvecs share: one
// warp per row, the lane arithmetic of legacy_lanes.h (f32 activations) or
// legacy_dp4a_lanes.h (Q8_1), a warp sum, lane 0 writes. Each
// variant file instantiates them for its type and registers itself.
#pragma once

#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/legacy_dp4a_lanes.h"
#include "kernels/cuda/legacy_lanes.h"

namespace qmv::cuda {
namespace {

// Act: float (legacy_lanes.h) or BlockQ8_1 (legacy_dp4a_lanes.h), the legacy_lane_sum
// overload that reads it.
template <class Block, class Act>
__global__ void __launch_bounds__(kLegacyWarpsPerCta* kWarp)
    legacy_matvec_kernel(const Block* __restrict__ w, const Act* __restrict__ x, float* __restrict__ y,
                         std::int64_t rows, std::int64_t n_blocks) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const std::int64_t row = legacy_row(blockIdx.x, static_cast<int>(threadIdx.x) / kWarp);
  if (row >= rows) return;  // the whole warp leaves together: the shuffles below see all 32 lanes
  const float sum = warp_sum(legacy_lane_sum(w + row * n_blocks, x, n_blocks, lane));
  if (lane == 0) y[row] = sum;
}

template <class Value, WeightType Type>
__global__ void __launch_bounds__(kLegacyWarpsPerCta* kWarp)
    float_matvec_kernel(const Value* __restrict__ w, const float* __restrict__ x, float* __restrict__ y,
                        std::int64_t rows, std::int64_t cols) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const std::int64_t row = legacy_row(blockIdx.x, static_cast<int>(threadIdx.x) / kWarp);
  if (row >= rows) return;
  const float sum = warp_sum(float_lane_sum(w + row * cols, Type, x, cols, lane));
  if (lane == 0) y[row] = sum;
}

// The run() of a block-type variant: args already validated by invoke(). Q8_1
// activations are read in 32-bit words and the weights then in 16-bit halves
// (legacy_dp4a_lanes.h), which check_launch makes sure of first.
template <class Block, class Act = float>
Status launch_legacy_matvec(const MatVecArgs& a, const char* name) {
  if constexpr (std::is_same_v<Act, BlockQ8_1>) {
    if (Status s = check_launch(name, a, 2, 4); !s.ok()) return s;
  }
  return launch_checked(name, [&] {
    legacy_matvec_kernel<Block, Act><<<static_cast<unsigned>(legacy_ctas(a.shape.rows)), kLegacyWarpsPerCta * kWarp,
                                       0, stream_of(a)>>>(static_cast<const Block*>(a.w),
                                                          static_cast<const Act*>(a.x), a.y, a.shape.rows,
                                                          a.shape.cols / kLegacyBlock);
  });
}

template <class Value, WeightType Type>
Status launch_float_matvec(const MatVecArgs& a, const char* name) {
  return launch_checked(name, [&] {
    float_matvec_kernel<Value, Type><<<static_cast<unsigned>(legacy_ctas(a.shape.rows)), kLegacyWarpsPerCta * kWarp, 0,
                                       stream_of(a)>>>(static_cast<const Value*>(a.w), static_cast<const float*>(a.x),
                                                       a.y, a.shape.rows, a.shape.cols);
  });
}

}  // namespace
}  // namespace qmv::cuda
