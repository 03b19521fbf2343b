// F32 weights x f32 activations, AVX2 + FMA: eight weights per load, four
// accumulators, one horizontal sum per row; any cols (scalar tail).
#include "float_weights.h"

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

// Four rows at once (float_weights.h, dot_rows): four weight streams per thread
// sharing each activation load, where one stream read about 55-65% of the read peak
// (two streams: 75-86%; results/intel-xeon-2c/float-rows.csv).
QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "f32.cpu.avx2_x4", qmv::WeightType::F32, qmv::ActFormat::F32,
    qmv::float_x86::run_rows_in_parts<4, float, load8, load1>,
    "F32 x f32, AVX2+FMA: four rows (one per tile quarter) share each activation load, "
    "four prefetched weight streams",
    qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA));
