// Q6_K weights in the row-interleaved layout (row_interleaved.h) x Q8_K activations,
// AVX2: eight rows per step, one 32-bit lane per row. Per pair of 64 weights, eight
// 32-byte loads hold the low 4 bits of four weights of each row per lane (two
// weights per byte, as in the Q4_K kernel), and four loads their top 2 bits, each
// serving two chunks through constant shifts and a mask. The 6-bit quants (0..63)
// meet the activation quads in vpmaddubsw, two chunks' pair sums add in int16 (one
// sub-block's), and one vpmaddwd against the rows' int8 scales, sign-extended into
// both int16 halves of each lane by a vpshufb and an arithmetic shift, gives the
// scaled dots in int32. The -32 offset is -32 * sum_j scale_j * bsum_j(x): one
// vpmaddwd per two sub-blocks of the rows' paired scales against the activation's two
// Q8_K block sums, taken straight from the block.
//
// Bounds: a vpmaddubsw pair is at most 2 * 63 * 128 = 16128 in size, two of them
// 32256 < 2^15; a sub-block dot (<= 129024) times a scale (<= 128) over sixteen
// sub-blocks is under 2^29, and the offset (16 * 128 * 2048, times 32) likewise;
// their difference stays inside int32.
#include "kquant_r8_avx2.h"

namespace {

using qmv::interleave::BlockQ6_Kx8;
using qmv::interleave::XMinSums;

// How far ahead of the super-block being read each weight stream is prefetched, in
// bytes (just over one super-block; 4096 was slower,
// results/intel-xeon-2c/r8-prefetch-chunked-pages.csv), and the lines each quarter of
// the 1680-byte super-block prefetches: four quarters of seven cover it at any alignment.
constexpr int kPrefetchBytes = 2048;
constexpr int kLinesPerQuarter = 7;

// The vpshufb controls that spread, from a scale pair block broadcast to both halves,
// the first (Second = false) or second scale of each row into the high bytes of both
// int16 halves of its lane (the low bytes zero, for the arithmetic shift).
template <bool Second>
inline __m256i spread_control() {
  constexpr char e = Second ? 1 : 0;
  return _mm256_setr_epi8(-1, 0 + e, -1, 0 + e, -1, 2 + e, -1, 2 + e, -1, 4 + e, -1, 4 + e, -1, 6 + e, -1, 6 + e,  //
                          -1, 8 + e, -1, 8 + e, -1, 10 + e, -1, 10 + e, -1, 12 + e, -1, 12 + e, -1, 14 + e, -1, 14 + e);
}

// Chunks 2V and 2V+1 of a quarter (one sub-block of each half of the pair): their
// scaled dots against the activation, added into isum.
template <int V>
inline void chunk_pair(const BlockQ6_Kx8::Quarter& q, const std::int8_t* xq, __m256i scale_a, __m256i scale_b,
                       __m256i& isum) {
  const __m256i m4 = _mm256_set1_epi8(0x0f), bits45 = _mm256_set1_epi8(0x30);
  const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.qh[V]));
  const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.ql[2 * V]));
  const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.ql[2 * V + 1]));
  const __m256i a0 = _mm256_or_si256(_mm256_and_si256(v0, m4), qmv::interleave::bits_to_4<0>(qh, bits45));
  const __m256i b0 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v0, 4), m4), qmv::interleave::bits_to_4<2>(qh, bits45));
  const __m256i a1 = _mm256_or_si256(_mm256_and_si256(v1, m4), qmv::interleave::bits_to_4<4>(qh, bits45));
  const __m256i b1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v1, 4), m4), qmv::interleave::bits_to_4<6>(qh, bits45));
  using qmv::interleave::broadcast_quad;
  const __m256i sum_a = _mm256_add_epi16(_mm256_maddubs_epi16(a0, broadcast_quad(xq + 8 * V)),
                                         _mm256_maddubs_epi16(a1, broadcast_quad(xq + 8 * V + 4)));
  const __m256i sum_b = _mm256_add_epi16(_mm256_maddubs_epi16(b0, broadcast_quad(xq + 32 + 8 * V)),
                                         _mm256_maddubs_epi16(b1, broadcast_quad(xq + 32 + 8 * V + 4)));
  isum = _mm256_add_epi32(isum, _mm256_madd_epi16(sum_a, scale_a));
  isum = _mm256_add_epi32(isum, _mm256_madd_epi16(sum_b, scale_b));
}

// NG groups of eight rows against the activation, into out[i][0..7]: each group a
// weight stream of its own, each activation quad loaded once for all of them, each
// quarter of a super-block prefetching a quarter of the block kPrefetchBytes ahead.
template <int NG>
void dot_groups(const BlockQ6_Kx8* const w[NG], const qmv::BlockQ8K* x, const XMinSums*, std::int64_t nb,
                float* const out[NG]) {
  const __m256i first = spread_control<false>(), second = spread_control<true>();
  __m256 acc[NG];
  for (int i = 0; i < NG; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const qmv::BlockQ8K& xb = x[b];
    const __m256 dx = _mm256_set1_ps(xb.d);
    for (int i = 0; i < NG; ++i) {
      const BlockQ6_Kx8& wb = w[i][b];
      const std::uintptr_t ahead = reinterpret_cast<std::uintptr_t>(&wb) + kPrefetchBytes;
      __m256i isum = _mm256_setzero_si256(), offset = _mm256_setzero_si256();
      for (int g = 0; g < 4; ++g) {
        for (int line = kLinesPerQuarter * g; line < kLinesPerQuarter * (g + 1); ++line)
          qmv::x86::prefetch_line(ahead + 64 * line);
        // Sub-blocks 4g, 4g+1 (the low nibbles' half) and 4g+2, 4g+3 (the high ones').
        const __m128i pairs_a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.scale_pairs[2 * g]));
        const __m128i pairs_b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.scale_pairs[2 * g + 1]));
        const __m256i both_a = _mm256_broadcastsi128_si256(pairs_a), both_b = _mm256_broadcastsi128_si256(pairs_b);
        std::int32_t x_a, x_b;
        std::memcpy(&x_a, &xb.bsums[4 * g], sizeof(x_a));
        std::memcpy(&x_b, &xb.bsums[4 * g + 2], sizeof(x_b));
        offset = _mm256_add_epi32(offset, _mm256_madd_epi16(_mm256_cvtepi8_epi16(pairs_a), _mm256_set1_epi32(x_a)));
        offset = _mm256_add_epi32(offset, _mm256_madd_epi16(_mm256_cvtepi8_epi16(pairs_b), _mm256_set1_epi32(x_b)));
        const __m256i scale_a0 = _mm256_srai_epi16(_mm256_shuffle_epi8(both_a, first), 8);
        const __m256i scale_a1 = _mm256_srai_epi16(_mm256_shuffle_epi8(both_a, second), 8);
        const __m256i scale_b0 = _mm256_srai_epi16(_mm256_shuffle_epi8(both_b, first), 8);
        const __m256i scale_b1 = _mm256_srai_epi16(_mm256_shuffle_epi8(both_b, second), 8);
        const BlockQ6_Kx8::Quarter& q = wb.quarter[g];
        const std::int8_t* xq = xb.qs + 64 * g;
        chunk_pair<0>(q, xq, scale_a0, scale_b0, isum);
        chunk_pair<1>(q, xq, scale_a0, scale_b0, isum);
        chunk_pair<2>(q, xq, scale_a1, scale_b1, isum);
        chunk_pair<3>(q, xq, scale_a1, scale_b1, isum);
      }
      const __m256i dot = _mm256_sub_epi32(isum, _mm256_slli_epi32(offset, 5));
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(qmv::interleave::fp16x8(wb.d), dx), acc[i]);
    }
  }
  for (int i = 0; i < NG; ++i) _mm256_storeu_ps(out[i], acc[i]);
}

// The family's entry for the runs and records of kquant_r8_avx2.h.
struct Q6K {
  using Layout = BlockQ6_Kx8;
  static constexpr qmv::WeightType kType = qmv::WeightType::Q6_K;
  template <int NG>
  static void dot_groups(const Layout* const w[NG], const qmv::BlockQ8K* x, const XMinSums* xm, std::int64_t nb,
                         float* const out[NG]) {
    ::dot_groups<NG>(w, x, xm, nb, out);
  }
};

}  // namespace

QMV_REGISTER_KERNEL((qmv::interleave::kquant_r8_record<Q6K, 1>(
    "q6_K.cpu.avx2_r8_q8k",
    "Q6_K x Q8_K, AVX2, weights repacked once into eight-row interleaved super-blocks "
    "(top 2 bits two chunks per load, scales paired): one float lane per row, one weight stream per thread")));
QMV_REGISTER_KERNEL((qmv::interleave::kquant_r8_record<Q6K, 2>(
    "q6_K.cpu.avx2_r8x2_q8k",
    "Q6_K x Q8_K, AVX2, eight-row interleaved super-blocks as avx2_r8_q8k, two weight "
    "streams per thread (the two halves of its rows) sharing each activation load")));
