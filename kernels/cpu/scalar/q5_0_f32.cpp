// Q5_0 weights x f32 activations, scalar reference: per block of 32, the float dot of
// the centred 5-bit quants (q - 16) with the activations, times d.
#include <cstdint>
#include <cstring>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace {

float dot_row(const qmv::BlockQ5_0* blocks, const float* x, std::int64_t n_blocks) {
  float row_sum = 0.0f;
  for (std::int64_t b = 0; b < n_blocks; ++b) {
    const qmv::BlockQ5_0& blk = blocks[b];
    const float* xb = x + b * qmv::kLegacyBlock;
    std::uint32_t high;  // bit i: the fifth bit of weight i
    std::memcpy(&high, blk.qh, sizeof(high));
    float q_dot_x = 0.0f;
    for (int l = 0; l < qmv::kLegacyBlock / 2; ++l) {
      const int q_low = (blk.qs[l] & 0x0f) | static_cast<int>((high >> l) & 1u) << 4;
      const int q_high = (blk.qs[l] >> 4) | static_cast<int>((high >> (l + 16)) & 1u) << 4;
      q_dot_x += static_cast<float>(q_low - 16) * xb[l];
      q_dot_x += static_cast<float>(q_high - 16) * xb[l + 16];
    }
    row_sum += qmv::fp16_to_fp32(blk.d) * q_dot_x;
  }
  return row_sum;
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q5_0.cpu.scalar_f32", qmv::WeightType::Q5_0, qmv::ActFormat::F32,
    qmv::run_rows<qmv::BlockQ5_0, float, dot_row>,
    "Q5_0 x f32, scalar reference: d * sum((q-16)*x) per block of 32"));
