// F32 weights x f32 activations, AVX2 + FMA: eight weights per load, four
// accumulators, one horizontal sum per row; any cols (scalar tail).
#include "float_weights_x86.h"

#include "kernel.h"

namespace {

__m256 load8(const float* w) { return _mm256_loadu_ps(w); }
float load1(const float* w) { return *w; }

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "f32.cpu.avx2", qmv::WeightType::F32, qmv::ActFormat::F32,
    qmv::float_x86::run<float, load8, load1>,
    "F32 x f32, AVX2+FMA: 4 accumulators, scalar tail for any cols",
    qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA));
