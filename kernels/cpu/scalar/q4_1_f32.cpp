// Q4_1 weights x f32 activations, scalar reference. With w = d*q + m, a block's dot
// is d * sum(q*x) + m * sum(x): the offset costs one sum of the activations.
#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace {

float dot_row(const qmv::BlockQ4_1* blocks, const float* x, std::int64_t n_blocks) {
  float row_sum = 0.0f;
  for (std::int64_t b = 0; b < n_blocks; ++b) {
    const qmv::BlockQ4_1& blk = blocks[b];
    const float* xb = x + b * qmv::kLegacyBlock;
    float q_dot_x = 0.0f, x_sum = 0.0f;
    for (int l = 0; l < qmv::kLegacyBlock / 2; ++l) {
      q_dot_x += static_cast<float>(blk.qs[l] & 0x0f) * xb[l];
      q_dot_x += static_cast<float>(blk.qs[l] >> 4) * xb[l + 16];
      x_sum += xb[l] + xb[l + 16];
    }
    row_sum += qmv::fp16_to_fp32(blk.d) * q_dot_x + qmv::fp16_to_fp32(blk.m) * x_sum;
  }
  return row_sum;
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q4_1.cpu.scalar_f32", qmv::WeightType::Q4_1, qmv::ActFormat::F32,
    qmv::run_rows<qmv::BlockQ4_1, float, dot_row>,
    "Q4_1 x f32, scalar reference: d * sum(q*x) + m * sum(x) per block of 32"));
