// Q5_1 weights x f32 activations, scalar reference: d * sum(q*x) + m * sum(x) per
// block of 32, q the 5-bit quant.
#include <cstdint>
#include <cstring>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace {

float dot_row(const qmv::BlockQ5_1* blocks, const float* x, std::int64_t n_blocks) {
  float row_sum = 0.0f;
  for (std::int64_t b = 0; b < n_blocks; ++b) {
    const qmv::BlockQ5_1& blk = blocks[b];
    const float* xb = x + b * qmv::kLegacyBlock;
    std::uint32_t high;  // bit i: the fifth bit of weight i
    std::memcpy(&high, blk.qh, sizeof(high));
    float q_dot_x = 0.0f, x_sum = 0.0f;
    for (int l = 0; l < qmv::kLegacyBlock / 2; ++l) {
      const int q_low = (blk.qs[l] & 0x0f) | static_cast<int>((high >> l) & 1u) << 4;
      const int q_high = (blk.qs[l] >> 4) | static_cast<int>((high >> (l + 16)) & 1u) << 4;
      q_dot_x += static_cast<float>(q_low) * xb[l];
      q_dot_x += static_cast<float>(q_high) * xb[l + 16];
      x_sum += xb[l] + xb[l + 16];
    }
    row_sum += qmv::fp16_to_fp32(blk.d) * q_dot_x + qmv::fp16_to_fp32(blk.m) * x_sum;
  }
  return row_sum;
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q5_1.cpu.scalar_f32", qmv::WeightType::Q5_1, qmv::ActFormat::F32,
    qmv::run_rows<qmv::BlockQ5_1, float, dot_row>,
    "Q5_1 x f32, scalar reference: d * sum(q*x) + m * sum(x) per block of 32"));
