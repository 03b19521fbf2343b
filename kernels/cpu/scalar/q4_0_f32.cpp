// Q4_0 weights x f32 activations, scalar reference: per block of 32, the float dot of
// the centred quants (q - 8) with the activations, times the block scale d.
#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace {

float dot_row(const qmv::BlockQ4_0* blocks, const float* x, std::int64_t n_blocks) {
  float row_sum = 0.0f;
  for (std::int64_t b = 0; b < n_blocks; ++b) {
    const qmv::BlockQ4_0& blk = blocks[b];
    const float* xb = x + b * qmv::kLegacyBlock;
    float q_dot_x = 0.0f;
    for (int l = 0; l < qmv::kLegacyBlock / 2; ++l) {
      // Byte l holds weight l (low nibble) and weight l + 16 (high nibble).
      q_dot_x += static_cast<float>((blk.qs[l] & 0x0f) - 8) * xb[l];
      q_dot_x += static_cast<float>((blk.qs[l] >> 4) - 8) * xb[l + 16];
    }
    row_sum += qmv::fp16_to_fp32(blk.d) * q_dot_x;
  }
  return row_sum;
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q4_0.cpu.scalar_f32", qmv::WeightType::Q4_0, qmv::ActFormat::F32,
    qmv::run_rows<qmv::BlockQ4_0, float, dot_row>,
    "Q4_0 x f32, scalar reference: d * sum((q-8)*x) per block of 32"));
