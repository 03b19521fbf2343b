// Q6_K weights in the row-interleaved layout x 1 to 8 Q8_K activations per call (the
// batch op), AVX2: the copy avx2_r8_q8k reads (q6_K_r8_q8k.cpp describes its bytes and
// bounds), one weight stream per thread. Each triple of 32-byte loads is unpacked once
// into its four chunks of 6-bit quants (11 vector operations) and then met by every
// vector's broadcast quads: four vpmaddubsw, two int16 adds and two vpmaddwd by the
// rows' scales per vector. The scales are widened and repeated once per quarter for
// all vectors; each vector's -32 offset is one vpmaddwd per two sub-blocks against its
// Q8_K block sums, as in the single-vector loop.
#include "kquant_r8.h"

#include <cstring>

namespace {

using qmv::interleave::BlockQ6_Kx8;
using qmv::interleave::XMinSums;

// As q6_K_r8_q8k.cpp: just over one super-block ahead, seven lines per quarter.
constexpr int kPrefetchBytes = 2048;
constexpr int kLinesPerQuarter = 7;

// The vpshufb controls that repeat, from a row's pair of int16 scales, the first
// (Second = false) or second scale in both halves of the lane.
template <bool Second>
inline __m256i repeat_control() {
  constexpr char e = Second ? 2 : 0;
  return _mm256_setr_epi8(0 + e, 1 + e, 0 + e, 1 + e, 4 + e, 5 + e, 4 + e, 5 + e, 8 + e, 9 + e, 8 + e, 9 + e,      //
                          12 + e, 13 + e, 12 + e, 13 + e, 0 + e, 1 + e, 0 + e, 1 + e, 4 + e, 5 + e, 4 + e, 5 + e,  //
                          8 + e, 9 + e, 8 + e, 9 + e, 12 + e, 13 + e, 12 + e, 13 + e);
}

// Triple V of quarter q against N activations' quarter quants xq[j] (64 each), into
// isum[j]: the four chunks unpacked once, then each vector's two sub-block pairs.
template <int V, int N>
inline void triple(const BlockQ6_Kx8::Quarter& q, const std::int8_t* const xq[N], __m256i scale_low,
                   __m256i scale_high, __m256i isum[N], std::uintptr_t quarter_ahead) {
  using qmv::interleave::broadcast_quad;
  const __m256i m6 = _mm256_set1_epi8(0x3f), top2 = _mm256_set1_epi8(static_cast<char>(0xc0));
  const __m256i t0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.t[V][0]));
  const __m256i t1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.t[V][1]));
  const __m256i t2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.t[V][2]));
  const __m256i spread = _mm256_or_si256(_mm256_or_si256(_mm256_srli_epi16(_mm256_and_si256(t0, top2), 2),
                                                         _mm256_srli_epi16(_mm256_and_si256(t1, top2), 4)),
                                         _mm256_srli_epi16(_mm256_and_si256(t2, top2), 6));
  const __m256i q0 = _mm256_and_si256(t0, m6), q1 = _mm256_and_si256(t1, m6), q2 = _mm256_and_si256(t2, m6);
  for (int j = 0; j < N; ++j) {
    const std::int8_t* x = xq[j];
    const __m256i low = _mm256_add_epi16(_mm256_maddubs_epi16(q0, broadcast_quad(x + 8 * V)),
                                         _mm256_maddubs_epi16(q1, broadcast_quad(x + 8 * V + 4)));
    const __m256i high = _mm256_add_epi16(_mm256_maddubs_epi16(q2, broadcast_quad(x + 32 + 8 * V)),
                                          _mm256_maddubs_epi16(spread, broadcast_quad(x + 32 + 8 * V + 4)));
    isum[j] = _mm256_add_epi32(isum[j], _mm256_add_epi32(_mm256_madd_epi16(low, scale_low),
                                                         _mm256_madd_epi16(high, scale_high)));
  }
  for (int line = 2 * V; line < 2 * V + 2 && line < kLinesPerQuarter; ++line)
    qmv::x86::prefetch_line_after(quarter_ahead + 64 * line, isum[0]);
}

template <int N>
void dot_batch(const BlockQ6_Kx8* w, const qmv::BlockQ8K* const x[N], const XMinSums* const[N], std::int64_t nb,
               float* const out[N]) {
  const __m256i first = repeat_control<false>(), second = repeat_control<true>();
  __m256 acc[N];
  for (int j = 0; j < N; ++j) acc[j] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const BlockQ6_Kx8& wb = w[b];
    const std::uintptr_t ahead = reinterpret_cast<std::uintptr_t>(&wb) + kPrefetchBytes;
    __m256i isum[N], offset[N];
    for (int j = 0; j < N; ++j) isum[j] = offset[j] = _mm256_setzero_si256();
#pragma GCC unroll 1
    for (int g = 0; g < 4; ++g) {
      // Sub-blocks 4g, 4g+1 (the low half's) and 4g+2, 4g+3 (the high half's).
      const __m256i pairs_low =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.scale_pairs[2 * g])));
      const __m256i pairs_high =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.scale_pairs[2 * g + 1])));
      const std::int8_t* xq[N];
      for (int j = 0; j < N; ++j) {
        std::int32_t x_low, x_high;
        std::memcpy(&x_low, &x[j][b].bsums[4 * g], sizeof(x_low));
        std::memcpy(&x_high, &x[j][b].bsums[4 * g + 2], sizeof(x_high));
        offset[j] = _mm256_add_epi32(offset[j], _mm256_madd_epi16(pairs_low, _mm256_set1_epi32(x_low)));
        offset[j] = _mm256_add_epi32(offset[j], _mm256_madd_epi16(pairs_high, _mm256_set1_epi32(x_high)));
        xq[j] = x[j][b].qs + 64 * g;
      }
      const __m256i low0 = _mm256_shuffle_epi8(pairs_low, first), low1 = _mm256_shuffle_epi8(pairs_low, second);
      const __m256i high0 = _mm256_shuffle_epi8(pairs_high, first), high1 = _mm256_shuffle_epi8(pairs_high, second);
      const BlockQ6_Kx8::Quarter& q = wb.quarter[g];
      const std::uintptr_t quarter_ahead = ahead + 64 * kLinesPerQuarter * g;
      triple<0, N>(q, xq, low0, high0, isum, quarter_ahead);
      triple<1, N>(q, xq, low0, high0, isum, quarter_ahead);
      triple<2, N>(q, xq, low1, high1, isum, quarter_ahead);
      triple<3, N>(q, xq, low1, high1, isum, quarter_ahead);
    }
    const __m256 d = qmv::interleave::fp16x8(wb.d);
    for (int j = 0; j < N; ++j) {
      const __m256i dot = _mm256_sub_epi32(isum[j], _mm256_slli_epi32(offset[j], 5));
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(d, _mm256_set1_ps(x[j][b].d)), acc[j]);
    }
  }
  for (int j = 0; j < N; ++j) _mm256_storeu_ps(out[j], acc[j]);
}

struct Q6K {
  using Layout = BlockQ6_Kx8;
  static constexpr qmv::WeightType kType = qmv::WeightType::Q6_K;
  template <int N>
  static void dot_batch(const Layout* w, const qmv::BlockQ8K* const x[N], const XMinSums* const xm[N],
                        std::int64_t nb, float* const out[N]) {
    ::dot_batch<N>(w, x, xm, nb, out);
  }
};

}  // namespace

namespace {
// Built at compile time: nothing of this file runs before main.
constexpr qmv::KernelRecord kBatch = qmv::interleave::kquant_r8_batch_record<Q6K>(
    "q6_K.cpu.avx2_r8_batch_q8k",
    "Q6_K x 1-8 Q8_K vectors (batch), AVX2, eight-row interleaved super-blocks as avx2_r8_q8k: each "
    "triple of loads unpacked once, then dotted with every vector");
}  // namespace

QMV_REGISTER_KERNEL(kBatch);
