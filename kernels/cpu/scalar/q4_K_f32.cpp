// Q4_K weights x f32 activations, scalar reference: each 4-bit quant is decoded in
// registers and dotted with the float activation. No ISA flags, no tricks: this is
// the baseline every faster Q4_K variant is measured and checked against.
#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace {

// One row: 8 sub-blocks of 32 per super-block, w = d*sc*q - dmin*m. The min term
// is factored out of the inner loop, so it costs one sum of the activations.
float dot_row(const qmv::BlockQ4K* blocks, const float* x, std::int64_t n_blocks) {
  float row_sum = 0.0f;
  for (std::int64_t b = 0; b < n_blocks; ++b) {
    const qmv::BlockQ4K& blk = blocks[b];
    const float d = qmv::fp16_to_fp32(blk.d);
    const float dmin = qmv::fp16_to_fp32(blk.dmin);
    const float* xb = x + b * qmv::kSuperBlock;
    float block_sum = 0.0f;
    for (int j = 0; j < 8; ++j) {
      std::uint8_t scale, min;
      qmv::unpack_scale_min_k4(j, blk.scales, scale, min);
      // Sub-blocks 2g and 2g+1 share the 32 bytes of group g: low, then high nibbles.
      const std::uint8_t* qs = blk.qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      const float* xs = xb + 32 * j;
      float q_dot_x = 0.0f, x_sum = 0.0f;
      for (int l = 0; l < 32; ++l) {
        q_dot_x += static_cast<float>((qs[l] >> shift) & 0xF) * xs[l];
        x_sum += xs[l];
      }
      block_sum += d * scale * q_dot_x - dmin * min * x_sum;
    }
    row_sum += block_sum;
  }
  return row_sum;
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q4_K.cpu.scalar_f32", qmv::WeightType::Q4_K, qmv::ActFormat::F32,
    qmv::run_rows<qmv::BlockQ4K, float, dot_row>,
    "Q4_K x f32, scalar reference: dequantize in registers, float dot"));
