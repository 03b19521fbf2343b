// F32 weights x f32 activations, scalar reference: one float dot per row.
#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace {

float dot_row(const float* w, const float* x, std::int64_t cols) {
  float sum = 0.0f;
  for (std::int64_t i = 0; i < cols; ++i) sum += w[i] * x[i];
  return sum;
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "f32.cpu.scalar", qmv::WeightType::F32, qmv::ActFormat::F32,
    qmv::run_rows<float, float, dot_row>,
    "F32 x f32, scalar reference: one float dot per row, any cols"));
