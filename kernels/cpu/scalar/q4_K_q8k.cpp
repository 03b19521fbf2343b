// Q4_K weights x Q8_K activations, scalar reference of the integer dot product the
// fast CPU kernels use: int8 x 4-bit products summed in int32, scaled by the integer
// sub-block scale, with the float scales applied once per super-block.
#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace {

// One row. Per super-block: y += d_w*d_x*sum_j(sc_j*sum_l q*qx) - dmin_w*d_x*sum_j(m_j*sum_l qx).
// The min multiplies every weight of a sub-block, so its term needs only the sum of
// the sub-block's activation quants, which Q8_K stores per 16 (two bsums per sub-block).
// Bounds: |sum_l q*qx| <= 32*15*128 and sc <= 63, so the int32 sums cannot overflow.
float dot_row(const qmv::BlockQ4K* blocks, const qmv::BlockQ8K* x, std::int64_t n_blocks) {
  float row_sum = 0.0f;
  for (std::int64_t b = 0; b < n_blocks; ++b) {
    const qmv::BlockQ4K& wb = blocks[b];
    const qmv::BlockQ8K& xb = x[b];
    std::int32_t sumi_scales = 0, sumi_mins = 0;
    for (int j = 0; j < 8; ++j) {
      std::uint8_t scale, min;
      qmv::unpack_scale_min_k4(j, wb.scales, scale, min);
      // Sub-blocks 2g and 2g+1 share the 32 bytes of group g: low, then high nibbles.
      const std::uint8_t* qs = wb.qs + 32 * (j / 2);
      const int shift = 4 * (j % 2);
      const std::int8_t* qx = xb.qs + 32 * j;
      std::int32_t q_dot_qx = 0;
      for (int l = 0; l < 32; ++l) q_dot_qx += ((qs[l] >> shift) & 0xF) * qx[l];
      sumi_scales += scale * q_dot_qx;
      sumi_mins += min * (xb.bsums[2 * j] + xb.bsums[2 * j + 1]);
    }
    const float d = qmv::fp16_to_fp32(wb.d) * xb.d;
    const float dmin = qmv::fp16_to_fp32(wb.dmin) * xb.d;
    row_sum += d * static_cast<float>(sumi_scales) - dmin * static_cast<float>(sumi_mins);
  }
  return row_sum;
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q4_K.cpu.scalar_q8k", qmv::WeightType::Q4_K, qmv::ActFormat::Q8_K,
    qmv::run_rows<qmv::BlockQ4K, qmv::BlockQ8K, dot_row>,
    "Q4_K x Q8_K, scalar reference: int32 dot per sub-block, mins via bsums"));
