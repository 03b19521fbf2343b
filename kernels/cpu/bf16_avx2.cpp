// BF16 weights x f32 activations, AVX2 + FMA: a bf16 is the top half of an f32, so
// eight weights widen exactly by zero-extending to 32 bits and shifting left by 16;
// four accumulators, one horizontal sum per row; any cols.
#include "float_weights_x86.h"

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
