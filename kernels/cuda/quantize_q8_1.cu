// Float activations to Q8_1 on the GPU: one warp per 32-value block, one value per
// lane. The loads are one coalesced 128-byte line per block; the block maximum and
// the quant sum are warp butterflies; lane 0 writes the scale and sum, every lane its
// quant byte. The arithmetic per lane is quantize_q8_1_lane.h, shared with the CPU
// test that proves it gives the host quantizer's bytes.
#include <algorithm>
#include <string>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/quantize_q8_1.h"
#include "kernels/cuda/quantize_q8_1_lane.h"

namespace qmv::cuda {
namespace {

constexpr int kWarpsPerCta = 8;
// Enough CTAs to fill any current GPU several times over; larger vectors loop.
constexpr std::int64_t kMaxCtas = 4096;

__global__ void __launch_bounds__(kWarpsPerCta * kWarp)
    quantize_q8_1_kernel(const float* __restrict__ x, BlockQ8_1* __restrict__ y, std::int64_t n_blocks) {
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const std::int64_t first = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x / kWarp;
  // The loop bound is the same for the whole warp, so every shuffle sees all 32 lanes.
  for (std::int64_t b = first; b < n_blocks; b += stride) {
    const float v = x[b * kQ8_1Block + lane];
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
    BlockQ8_1& out = y[b];
    out.qs[lane] = static_cast<std::int8_t>(q);
    if (lane == 0) {
      out.d = d_bits;
      out.s = q8_1_sum_bits(d, sum);
    }
  }
}

}  // namespace

Status quantize_q8_1(const float* x, BlockQ8_1* y, std::int64_t n, void* stream) {
  if (!x || !y) return Status::Error(std::string(kQuantizeQ8_1Name) + ": null device pointer");
  if (n <= 0 || n % kQ8_1Block != 0)
    return Status::Error(std::string(kQuantizeQ8_1Name) + ": length " + std::to_string(n) +
                         " is not a positive multiple of 32");
  const std::int64_t n_blocks = n / kQ8_1Block;
  const std::int64_t ctas = std::min<std::int64_t>((n_blocks + kWarpsPerCta - 1) / kWarpsPerCta, kMaxCtas);
  return launch_checked(kQuantizeQ8_1Name, [&] {
    quantize_q8_1_kernel<<<static_cast<unsigned>(ctas), kWarpsPerCta * kWarp, 0, static_cast<cudaStream_t>(stream)>>>(
        x, y, n_blocks);
  });
}

}  // namespace qmv::cuda
