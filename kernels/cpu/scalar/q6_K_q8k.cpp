// Q6_K weights x Q8_K activations, scalar reference of the integer dot product the
// fast CPU kernels use: int8 x centred 6-bit products summed in int32, scaled by the
// int8 sub-block scale, with the float scales applied once per super-block.
#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace {

// One row. Per super-block: y += d_w*d_x*sum_j(scale_j*sum_l (q-32)*qx). Centring
// the quants first means no min term (Q6_K is symmetric), so bsums are not needed.
// Bounds: |sum_l (q-32)*qx| <= 16*32*128 and |scale| <= 128, so int32 cannot overflow.
float dot_row(const qmv::BlockQ6K* blocks, const qmv::BlockQ8K* x, std::int64_t n_blocks) {
  float row_sum = 0.0f;
  for (std::int64_t b = 0; b < n_blocks; ++b) {
    const qmv::BlockQ6K& wb = blocks[b];
    const qmv::BlockQ8K& xb = x[b];
    std::int8_t q[qmv::kSuperBlock];
    qmv::unpack_q6_K_quants(wb, q);
    std::int32_t sumi = 0;
    for (int j = 0; j < 16; ++j) {
      std::int32_t q_dot_qx = 0;
      for (int l = 0; l < 16; ++l) q_dot_qx += q[16 * j + l] * xb.qs[16 * j + l];
      sumi += wb.scales[j] * q_dot_qx;
    }
    row_sum += qmv::fp16_to_fp32(wb.d) * xb.d * static_cast<float>(sumi);
  }
  return row_sum;
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q6_K.cpu.scalar_q8k", qmv::WeightType::Q6_K, qmv::ActFormat::Q8_K,
    qmv::run_rows<qmv::BlockQ6K, qmv::BlockQ8K, dot_row>,
    "Q6_K x Q8_K, scalar reference: int32 dot per sub-block, float scale per block"));
