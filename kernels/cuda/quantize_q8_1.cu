// Float activations to Q8_1 on the GPU: one warp per 32-value block, one value per
// lane (quantize_q8_1_warp.cuh). The loads are one coalesced 128-byte line per block.
#include <algorithm>
#include <string>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/quantize_q8_1.h"
#include "kernels/cuda/quantize_q8_1_warp.cuh"

namespace qmv::cuda {
namespace {

constexpr int kWarpsPerCta = 8;
// Enough CTAs to fill any current GPU several times over; larger vectors loop.
constexpr std::int64_t kMaxCtas = 4096;

__global__ void __launch_bounds__(kWarpsPerCta * kWarp)
    quantize_q8_1_kernel(const float* __restrict__ x, BlockQ8_1* __restrict__ y, std::int64_t n_blocks) {
  let_dependent_kernel_start();  // a matvec after it may stream its weights meanwhile
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  const std::int64_t first = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x / kWarp;
  // The loop bound is the same for the whole warp, so every shuffle sees all 32 lanes.
  for (std::int64_t b = first; b < n_blocks; b += stride) quantize_q8_1_warp_block(x[b * kQ8_1Block + lane], lane, y[b]);
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
