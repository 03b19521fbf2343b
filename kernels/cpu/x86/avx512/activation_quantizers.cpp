// The Q8_K and Q8_1 activation quantizers in AVX-512 (F, BW, VL), 16 values per
// register. Exactness: vmaxps keeps the running maximum when a value is NaN (as
// std::max does); trunc(v) plus one step where the exact remainder v - trunc(v) reaches
// a half is std::round(v); NaN quantizes to 0. Only intrinsics inside: nothing here
// instantiates library code (tests/isa_objects_test.sh).
#include "kernels/cpu/x86/activation_quantizers.h"

#include <algorithm>

#include "kernels/cpu/x86/x86.h"

namespace qmv {

namespace {

inline float abs_max16(const float* x, int n) {
  __m512 m = _mm512_setzero_ps();
  for (int i = 0; i < n; i += 16) m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + i)), m);
  return _mm512_reduce_max_ps(m);
}

// round(x / d) clamped to [-127, 127] as int32 lanes; d > 0.
inline __m512i quant16(const float* x, __m512 d) {
  const __m512 v = _mm512_div_ps(_mm512_loadu_ps(x), d);
  __m512 r = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 frac = _mm512_sub_ps(v, r);
  const __m512 one = _mm512_set1_ps(1.0f);
  r = _mm512_mask_add_ps(r, _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ), r, one);
  r = _mm512_mask_sub_ps(r, _mm512_cmp_ps_mask(frac, _mm512_set1_ps(-0.5f), _CMP_LE_OQ), r, one);
  r = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
  return _mm512_maskz_cvttps_epi32(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), r);
}

}  // namespace

void quantize_row_q8_K_avx512(const float* x, BlockQ8K* y, std::int64_t n) {
  for (std::int64_t b = 0; b < n / kSuperBlock; ++b) {
    const float* xb = x + b * kSuperBlock;
    BlockQ8K& block = y[b];
    const float d = abs_max16(xb, kSuperBlock) / 127.0f;
    block.d = d;
    if (x86::zero_if_unscaled(block, d)) continue;
    const __m512 vd = _mm512_set1_ps(d);
    for (int g = 0; g < kSuperBlock / 16; ++g) {
      const __m512i q = quant16(xb + 16 * g, vd);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(block.qs + 16 * g), _mm512_cvtsepi32_epi8(q));
      block.bsums[g] = static_cast<std::int16_t>(_mm512_reduce_add_epi32(q));
    }
  }
}

void quantize_row_q8_1_avx512(const float* x, BlockQ8_1* y, std::int64_t n) {
  for (std::int64_t b = 0; b < n / kQ8_1Block; ++b) {
    const float* xb = x + b * kQ8_1Block;
    BlockQ8_1& block = y[b];
    block.d = fp32_to_fp16(std::min(abs_max16(xb, kQ8_1Block) / 127.0f, kLargestFp16));
    const float d = fp16_to_fp32(block.d);
    if (x86::zero_if_unscaled(block, d)) continue;
    const __m512 vd = _mm512_set1_ps(d);
    const __m512i lo = quant16(xb, vd), hi = quant16(xb + 16, vd);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(block.qs), _mm512_cvtsepi32_epi8(lo));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(block.qs + 16), _mm512_cvtsepi32_epi8(hi));
    block.s = fp32_to_fp16(d * static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(lo, hi))));
  }
}

}  // namespace qmv
