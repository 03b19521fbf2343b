// Q8_0 weights x f32 activations, scalar reference: d * sum(q*x) per block of 32.
#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace {

float dot_row(const qmv::BlockQ8_0* blocks, const float* x, std::int64_t n_blocks) {
  float row_sum = 0.0f;
  for (std::int64_t b = 0; b < n_blocks; ++b) {
    const qmv::BlockQ8_0& blk = blocks[b];
    const float* xb = x + b * qmv::kLegacyBlock;
    float q_dot_x = 0.0f;
    for (int l = 0; l < qmv::kLegacyBlock; ++l) q_dot_x += static_cast<float>(blk.qs[l]) * xb[l];
    row_sum += qmv::fp16_to_fp32(blk.d) * q_dot_x;
  }
  return row_sum;
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q8_0.cpu.scalar_f32", qmv::WeightType::Q8_0, qmv::ActFormat::F32,
    qmv::run_rows<qmv::BlockQ8_0, float, dot_row>,
    "Q8_0 x f32, scalar reference: d * sum(q*x) per block of 32"));
