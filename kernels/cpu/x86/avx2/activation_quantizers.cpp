// The Q8_K and Q8_1 activation quantizers in AVX2, 8 values per register, exact as the
// AVX-512 ones (x86/avx512/activation_quantizers.cpp); NaN lanes are zeroed before the
// clamp, which would otherwise keep them. Only intrinsics inside: nothing here
// instantiates library code (tests/isa_objects_test.sh).
#include "kernels/cpu/x86/activation_quantizers.h"

#include <algorithm>

#include "kernels/cpu/x86/x86.h"

namespace qmv {

namespace {

inline float abs_max8(const float* x, int n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), m);
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

// round(x / d) clamped to [-127, 127] as int32 lanes; d > 0.
inline __m256i quant8(const float* x, __m256 d) {
  const __m256 v = _mm256_div_ps(_mm256_loadu_ps(x), d);
  __m256 r = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 frac = _mm256_sub_ps(v, r);
  const __m256 one = _mm256_set1_ps(1.0f);
  r = _mm256_add_ps(r, _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ), one));
  r = _mm256_sub_ps(r, _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(-0.5f), _CMP_LE_OQ), one));
  r = _mm256_and_ps(r, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
  r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
  return _mm256_cvttps_epi32(r);
}

// 32 int32 lanes in [-127, 127] (a, b, c, d: 8 each, in order) as 32 int8 at `out`.
inline void store_int8x32(std::int8_t* out, __m256i a, __m256i b, __m256i c, __m256i d) {
  // The packs work within 128-bit lanes: the result's dwords come out as a0 b0 c0 d0
  // a1 b1 c1 d1 (4 values each) and are put back in order.
  const __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                      _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

inline int sum_int32x8(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

}  // namespace

void quantize_row_q8_K_avx2(const float* x, BlockQ8K* y, std::int64_t n) {
  for (std::int64_t b = 0; b < n / kSuperBlock; ++b) {
    const float* xb = x + b * kSuperBlock;
    BlockQ8K& block = y[b];
    const float d = abs_max8(xb, kSuperBlock) / 127.0f;
    block.d = d;
    if (x86::zero_if_unscaled(block, d)) continue;
    const __m256 vd = _mm256_set1_ps(d);
    for (int i = 0; i < kSuperBlock; i += 32) {
      const __m256i q0 = quant8(xb + i, vd), q1 = quant8(xb + i + 8, vd);
      const __m256i q2 = quant8(xb + i + 16, vd), q3 = quant8(xb + i + 24, vd);
      store_int8x32(block.qs + i, q0, q1, q2, q3);
      block.bsums[i / 16] = static_cast<std::int16_t>(sum_int32x8(_mm256_add_epi32(q0, q1)));
      block.bsums[i / 16 + 1] = static_cast<std::int16_t>(sum_int32x8(_mm256_add_epi32(q2, q3)));
    }
  }
}

void quantize_row_q8_1_avx2(const float* x, BlockQ8_1* y, std::int64_t n) {
  for (std::int64_t b = 0; b < n / kQ8_1Block; ++b) {
    const float* xb = x + b * kQ8_1Block;
    BlockQ8_1& block = y[b];
    block.d = fp32_to_fp16(std::min(abs_max8(xb, kQ8_1Block) / 127.0f, kLargestFp16));
    const float d = fp16_to_fp32(block.d);
    if (x86::zero_if_unscaled(block, d)) continue;
    const __m256 vd = _mm256_set1_ps(d);
    const __m256i q0 = quant8(xb, vd), q1 = quant8(xb + 8, vd), q2 = quant8(xb + 16, vd), q3 = quant8(xb + 24, vd);
    store_int8x32(block.qs, q0, q1, q2, q3);
    const int sum = sum_int32x8(_mm256_add_epi32(_mm256_add_epi32(q0, q1), _mm256_add_epi32(q2, q3)));
    block.s = fp32_to_fp16(d * static_cast<float>(sum));
  }
}

}  // namespace qmv
