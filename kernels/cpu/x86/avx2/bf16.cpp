// BF16 weights x f32 activations, AVX2 + FMA: a bf16 is the top half of an f32, so
// eight weights widen exactly by zero-extending to 32 bits and shifting left by 16;
// four accumulators, one horizontal sum per row; any cols.
#include "float_weights.h"

#include "kernel.h"

namespace {

__m256 load8(const qmv::bf16_bits* w) {
  const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
float load1(const qmv::bf16_bits* w) {
  return _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(std::uint32_t{*w} << 16))));
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "bf16.cpu.avx2", qmv::WeightType::BF16, qmv::ActFormat::F32,
    qmv::float_x86::run<qmv::bf16_bits, load8, load1>,
    "BF16 x f32, AVX2+FMA: zero-extend and shift by 16, 4 accumulators, scalar tail for any cols",
    qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA));

// Four rows at once (float_weights.h, dot_rows): four weight streams per thread
// sharing each activation load, where one stream read about 55-65% of the read peak
// (two streams: 75-86%; results/intel-xeon-2c/float-rows.csv).
QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "bf16.cpu.avx2_x4", qmv::WeightType::BF16, qmv::ActFormat::F32,
    qmv::float_x86::run_rows_in_parts<4, qmv::bf16_bits, load8, load1>,
    "BF16 x f32, AVX2+FMA: four rows (one per tile quarter) share each activation load, "
    "four prefetched weight streams",
    qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA));
