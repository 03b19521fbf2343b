// F16 weights x f32 activations, AVX2 + FMA + F16C: eight weights widened per
// vcvtph2ps (exact), four accumulators, one horizontal sum per row; any cols.
#include "float_weights.h"

#include "kernel.h"

namespace {

__m256 load8(const qmv::fp16_bits* w) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
}
float load1(const qmv::fp16_bits* w) { return _cvtsh_ss(*w); }

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "f16.cpu.avx2", qmv::WeightType::F16, qmv::ActFormat::F32,
    qmv::float_x86::run<qmv::fp16_bits, load8, load1>,
    "F16 x f32, AVX2+FMA+F16C: vcvtph2ps, 4 accumulators, scalar tail for any cols",
    qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA | qmv::CpuFeature::F16C));

// Four rows at once (float_weights.h, dot_rows): four weight streams per thread
// sharing each activation load, where one stream read about 55-65% of the read peak
// (two streams: 75-86%; results/intel-xeon-2c/float-rows.csv).
QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "f16.cpu.avx2_x4", qmv::WeightType::F16, qmv::ActFormat::F32,
    qmv::float_x86::run_rows_in_parts<4, qmv::fp16_bits, load8, load1>,
    "F16 x f32, AVX2+FMA+F16C: four rows (one per tile quarter) share each activation load, "
    "four prefetched weight streams",
    qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA | qmv::CpuFeature::F16C));
