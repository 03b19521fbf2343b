// Q6_K weights x f32 activations, AVX2 + FMA.
//
// Per super-block the 256 six-bit quants are rebuilt 32 at a time in registers, as in
// the integer kernels (low or high nibble of ql | two qh bits moved to bits 4-5), and
// made signed (q - 32, int8). Each 128-bit half of such a vector is one sub-block of
// 16: two sign extensions (vpmovsxbd, 8 weights each), two int->float conversions and
// a mul + fma against the float activations; its sum (8 lanes) is scaled by
// d*scale[j] (the per-16 int8 scales, converted once per super-block) into one of four
// __m256 accumulators, which keeps the fma chains short.
// One horizontal sum per row. A software prefetch runs kPrefetch super-blocks ahead.
#include "kernels/cpu/x86/q6_K.h"

#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace {

// q - 32 (int8) of one half super-block (64 bytes of ql, 32 of qh): v[k] byte l is
// weight 32k+l of the half (q6k_x86::unpack_half).
inline void unpack_half(const std::uint8_t* ql, const std::uint8_t* qh, __m256i v[4]) {
  const __m256i c32 = _mm256_set1_epi8(32);
  qmv::q6k_x86::unpack_half(ql, qh, v, [c32](__m256i q) { return _mm256_sub_epi8(q, c32); });
}

// The low 8 int8 of v as floats.
inline __m256 to_float(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }

// Sum over one sub-block: 16 int8 weights (q - 32) times 16 floats of x, in 8 lanes.
inline __m256 sub_block_dot(__m128i q16, const float* x) {
  const __m256 t = _mm256_mul_ps(to_float(q16), _mm256_loadu_ps(x));
  return _mm256_fmadd_ps(to_float(_mm_unpackhi_epi64(q16, q16)), _mm256_loadu_ps(x + 8), t);
}

// Super-blocks ahead that the software prefetch fetches. Rows are contiguous and
// computed in order, so the stream runs on into the next row: w + kPrefetch is always
// what this loop reads next. The kernel is compute-bound; without the prefetch each
// new 4 KiB page, where the hardware streamer stops, stalls it on a demand miss. 8 to
// 16 blocks ahead are close to each other; 32 gives part of the gain back.
constexpr int kPrefetch = 8;

float dot_row(const qmv::BlockQ6K* w, const float* x, std::int64_t n_blocks) {
  // Four accumulators: vector k of a half feeds accumulators 2*(k%2) and 2*(k%2)+1.
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  for (const qmv::BlockQ6K* const end = w + n_blocks; w != end; ++w, x += qmv::kSuperBlock) {
    qmv::q6k_x86::prefetch_block(w, kPrefetch);
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(w->d));
    // d * scale[j] for the 16 sub-blocks.
    const __m256 sf_lo =
        _mm256_mul_ps(d, to_float(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w->scales))));
    const __m256 sf_hi = _mm256_mul_ps(
        d, to_float(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w->scales + 8))));
    for (int h = 0; h < 2; ++h) {
      __m256i v[4];
      unpack_half(w->ql + 64 * h, w->qh + 32 * h, v);
      const __m256 sf = h == 0 ? sf_lo : sf_hi;  // scales of sub-blocks 8h..8h+7
      const float* xh = x + 128 * h;
      for (int k = 0; k < 4; k += 2) {
        // Vector k: sub-blocks 8h+2k (bytes 0-15) and 8h+2k+1 (bytes 16-31).
        const __m256 s0 = _mm256_permutevar8x32_ps(sf, _mm256_set1_epi32(2 * k));
        const __m256 s1 = _mm256_permutevar8x32_ps(sf, _mm256_set1_epi32(2 * k + 1));
        const __m256 s2 = _mm256_permutevar8x32_ps(sf, _mm256_set1_epi32(2 * k + 2));
        const __m256 s3 = _mm256_permutevar8x32_ps(sf, _mm256_set1_epi32(2 * k + 3));
        acc0 = _mm256_fmadd_ps(sub_block_dot(_mm256_castsi256_si128(v[k]), xh + 32 * k), s0, acc0);
        acc1 = _mm256_fmadd_ps(sub_block_dot(_mm256_extracti128_si256(v[k], 1), xh + 32 * k + 16),
                               s1, acc1);
        acc2 = _mm256_fmadd_ps(sub_block_dot(_mm256_castsi256_si128(v[k + 1]), xh + 32 * k + 32),
                               s2, acc2);
        acc3 = _mm256_fmadd_ps(
            sub_block_dot(_mm256_extracti128_si256(v[k + 1], 1), xh + 32 * k + 48), s3, acc3);
      }
    }
  }
  return qmv::q6k_x86::hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q6_K.cpu.avx2_f32", qmv::WeightType::Q6_K, qmv::ActFormat::F32,
    qmv::run_rows<qmv::BlockQ6K, float, dot_row>,
    "Q6_K x f32, AVX2+FMA: quants rebuilt in registers (q-32 int8), "
    "int8->float, fma per sub-block scaled by d*scale, one hsum per row, prefetch",
    qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA | qmv::CpuFeature::F16C));
