// Q6_K weights x f32 activations, scalar reference: each block's 6-bit quants are
// unpacked into a small local array and dotted with the float activation. The
// baseline every faster Q6_K variant is measured and checked against.
#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace {

// One row: 16 sub-blocks of 16 per super-block, w = d*scale[j]*(q-32).
float dot_row(const qmv::BlockQ6K* blocks, const float* x, std::int64_t n_blocks) {
  float row_sum = 0.0f;
  for (std::int64_t b = 0; b < n_blocks; ++b) {
    const qmv::BlockQ6K& blk = blocks[b];
    std::int8_t q[qmv::kSuperBlock];
    qmv::unpack_q6_K_quants(blk, q);
    const float d = qmv::fp16_to_fp32(blk.d);
    const float* xb = x + b * qmv::kSuperBlock;
    float block_sum = 0.0f;
    for (int j = 0; j < 16; ++j) {
      float q_dot_x = 0.0f;
      for (int l = 0; l < 16; ++l) q_dot_x += static_cast<float>(q[16 * j + l]) * xb[16 * j + l];
      block_sum += d * blk.scales[j] * q_dot_x;
    }
    row_sum += block_sum;
  }
  return row_sum;
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q6_K.cpu.scalar_f32", qmv::WeightType::Q6_K, qmv::ActFormat::F32,
    qmv::run_rows<qmv::BlockQ6K, float, dot_row>,
    "Q6_K x f32, scalar reference: dequantize in registers, float dot"));
