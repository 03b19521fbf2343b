// One Q8_1 block from one warp, a value per lane: the block maximum and the quant sum
// are warp butterflies over the exact steps of quantize_q8_1_lanes.h, so the bytes are
// quantize_row_q8_1's. Shared by the standalone quantizer (quantize_q8_1.cu) and the
// decode kernels that quantize the vector they have just written (RMSNorm, SwiGLU):
// those save a launch and a read of the vector. Every lane of the warp must call it.
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/quantize_q8_1_lanes.h"
#include "kernels/formats/formats.h"

namespace qmv::cuda {

__device__ __forceinline__ void quantize_q8_1_warp_block(float v, int lane, BlockQ8_1& out) {
  float amax = q8_1_magnitude(v);
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset >>= 1)
    amax = q8_1_max(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
  const std::uint16_t d_bits = q8_1_scale_bits(amax);
  const float d = half_bits_to_float(d_bits);
  const int q = q8_1_quant(v, d);
  int sum = q;
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  out.qs[lane] = static_cast<std::int8_t>(q);
  if (lane == 0) {
    out.d = d_bits;
    out.s = q8_1_sum_bits(d, sum);
  }
}

}  // namespace qmv::cuda
