// F16 weights x f32 activations, scalar reference: each weight widened to f32
// (exactly), one float dot per row.
#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace {

float dot_row(const qmv::fp16_bits* w, const float* x, std::int64_t cols) {
  float sum = 0.0f;
  for (std::int64_t i = 0; i < cols; ++i) sum += qmv::fp16_to_fp32(w[i]) * x[i];
  return sum;
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "f16.cpu.scalar", qmv::WeightType::F16, qmv::ActFormat::F32,
    qmv::run_rows<qmv::fp16_bits, float, dot_row>,
    "F16 x f32, scalar reference: one float dot per row, any cols"));
