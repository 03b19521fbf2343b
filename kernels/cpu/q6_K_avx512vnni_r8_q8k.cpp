// Q6_K weights in the row-interleaved layout x Q8_K activations, AVX-512 VNNI: two and
// four weight streams per thread on the copy the AVX2 r8 kernels read
// (q6_K_avx2_r8_q8k.cpp). The triples V and V+1 of a quarter, which hold the same
// sub-blocks, share each 512-bit register: a 64-byte register of t[V][k] below and
// t[V+1][k] above. The whole 6-bit quants of three of the four chunks are one mask each
// and the fourth's are gathered from the three bytes' bits 6-7 (three shifts, two bit
// selects, one mask), for two triples at once; one vpdpbusd per chunk pair multiplies
// the quants (0..63, unsigned) with the activation quads that one vpermd per pair, shared
// by the streams, sets in lanes 0-7 (triple V) and 8-15 (triple V+1). Each sub-block's
// int32 sum takes its int8 scale in int32; lanes r and 8+r are folded once per
// super-block. The -32 offset is the AVX2 kernel's: -32 * sum_j scale_j * bsum_j(x), one
// vpmaddwd per two sub-blocks against the activation's block sums.
//
// Bounds: a lane of a sub-block's sum adds 8 products of at most 63 * 128, 64512; times
// a scale (|s| <= 128) over sixteen sub-blocks it stays under 2^27, and the offset under
// 2^28 (q6_K_avx2_r8_q8k.cpp): their difference is inside int32.
#include "r8_avx512vnni.h"

namespace {

using qmv::interleave::BlockQ6_Kx8;
using qmv::interleave::XMinSums;

// As the AVX2 kernel: two streams prefetch each 1680-byte super-block 2048 bytes ahead,
// seven lines per quarter; four streams leave it to the hardware.
constexpr int kPrefetchBytes = 2048;
constexpr int kLinesPerQuarter = 7;

// Lanes 0-7 take dword i of the permuted register, lanes 8-15 dword j.
inline __m512i lane_halves(int i, int j) {
  return _mm512_setr_epi32(i, i, i, i, i, i, i, i, j, j, j, j, j, j, j, j);
}

// t[V][k] in the lower 32 bytes, t[V+1][k] in the upper.
inline __m512i triple_pair_load(const BlockQ6_Kx8::Quarter& q, int v, int k) {
  const __m256i low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.t[v][k]));
  const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.t[v + 1][k]));
  return _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
}

// Row r's int8 scale of one sub-block, in lanes r and 8 + r: `pairs` holds the rows'
// scale pairs (row r at bytes 2r, 2r+1), Second picks the pair's second.
template <bool Second>
inline __m512i scale_twice(const std::int8_t* pairs) {
  constexpr char e = Second ? 1 : 0;
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pairs));
  const __m128i picked = _mm_shuffle_epi8(v, _mm_setr_epi8(0 + e, 2 + e, 4 + e, 6 + e, 8 + e, 10 + e, 12 + e, 14 + e,
                                                           -1, -1, -1, -1, -1, -1, -1, -1));
  const __m256i eight = _mm256_cvtepi8_epi32(picked);
  return _mm512_inserti64x4(_mm512_castsi256_si512(eight), eight, 1);
}

// The four sub-block sums of triples v, v+1 (v = 0: the quarter's low-half sub-block 4g
// and high-half 4g+2; v = 2: 4g+1 and 4g+3), added into low and high.
inline void triple_pair(const BlockQ6_Kx8::Quarter& q, int v, const __m512i xs[4], __m512i& low, __m512i& high) {
  const __m512i m6 = _mm512_set1_epi8(0x3f);
  const __m512i t0 = triple_pair_load(q, v, 0), t1 = triple_pair_load(q, v, 1), t2 = triple_pair_load(q, v, 2);
  // Bits 6-7 of t0, t1, t2 to bits 4-5, 2-3, 0-1: each 16-bit shift brings the byte's own
  // bits where the select (0xca: A ? B : C, A the mask) takes them, and the final mask
  // drops what the shifts moved in from the neighbouring byte.
  const __m512i from_t0 = _mm512_srli_epi16(t0, 2), from_t1 = _mm512_srli_epi16(t1, 4);
  const __m512i from_t2 = _mm512_srli_epi16(t2, 6);
  const __m512i upper4 = _mm512_ternarylogic_epi32(_mm512_set1_epi8(0x30), from_t0, from_t1, 0xca);
  const __m512i spread =
      _mm512_and_si512(_mm512_ternarylogic_epi32(_mm512_set1_epi8(0x3c), upper4, from_t2, 0xca), m6);
  low = _mm512_dpbusd_epi32(low, _mm512_and_si512(t0, m6), xs[0]);
  low = _mm512_dpbusd_epi32(low, _mm512_and_si512(t1, m6), xs[1]);
  high = _mm512_dpbusd_epi32(high, _mm512_and_si512(t2, m6), xs[2]);
  high = _mm512_dpbusd_epi32(high, spread, xs[3]);
}

// NG groups of eight rows against the activation, into out[i][0..7].
template <int NG, bool Prefetch>
void dot_groups(const BlockQ6_Kx8* const w[NG], const qmv::BlockQ8K* x, const XMinSums*, std::int64_t nb,
                float* const out[NG]) {
  // Quads (dwords of the quarter's 64 activations) of triple pair v: chunk 2V and 2V+1
  // of the low half are dwords 2V, 2V+1, of the high half 8 + 2V, 9 + 2V; V+1 above.
  const __m512i index[2][4] = {
      {lane_halves(0, 2), lane_halves(1, 3), lane_halves(8, 10), lane_halves(9, 11)},
      {lane_halves(4, 6), lane_halves(5, 7), lane_halves(12, 14), lane_halves(13, 15)}};
  __m256 acc[NG];
  for (int i = 0; i < NG; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const qmv::BlockQ8K& xb = x[b];
    __m512i isum[NG];
    __m256i offset[NG];
    for (int i = 0; i < NG; ++i) {
      isum[i] = _mm512_setzero_si512();
      offset[i] = _mm256_setzero_si256();
    }
#pragma GCC unroll 1
    for (int g = 0; g < 4; ++g) {
      const __m512i xv = _mm512_loadu_si512(xb.qs + 64 * g);
      __m512i xs[2][4];
      for (int p = 0; p < 2; ++p)
        for (int k = 0; k < 4; ++k) xs[p][k] = _mm512_permutexvar_epi32(index[p][k], xv);
      std::int32_t x_low, x_high;
      std::memcpy(&x_low, &xb.bsums[4 * g], sizeof(x_low));
      std::memcpy(&x_high, &xb.bsums[4 * g + 2], sizeof(x_high));
      for (int i = 0; i < NG; ++i) {
        const BlockQ6_Kx8& wb = w[i][b];
        if constexpr (Prefetch) {
          const std::uintptr_t ahead = reinterpret_cast<std::uintptr_t>(&wb) + kPrefetchBytes;
          for (int line = kLinesPerQuarter * g; line < kLinesPerQuarter * (g + 1); ++line)
            qmv::x86::prefetch_line(ahead + 64 * line);
        }
        const std::int8_t* pairs_low = wb.scale_pairs[2 * g];
        const std::int8_t* pairs_high = wb.scale_pairs[2 * g + 1];
        const __m256i wide_low = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pairs_low)));
        const __m256i wide_high = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pairs_high)));
        offset[i] = _mm256_add_epi32(offset[i], _mm256_madd_epi16(wide_low, _mm256_set1_epi32(x_low)));
        offset[i] = _mm256_add_epi32(offset[i], _mm256_madd_epi16(wide_high, _mm256_set1_epi32(x_high)));
        const BlockQ6_Kx8::Quarter& q = wb.quarter[g];
        // Sub-blocks 4g (low0), 4g+1 (low1), 4g+2 (high0), 4g+3 (high1).
        __m512i low0 = _mm512_setzero_si512(), high0 = _mm512_setzero_si512();
        __m512i low1 = _mm512_setzero_si512(), high1 = _mm512_setzero_si512();
        triple_pair(q, 0, xs[0], low0, high0);
        triple_pair(q, 2, xs[1], low1, high1);
        isum[i] = _mm512_add_epi32(isum[i], _mm512_mullo_epi32(low0, scale_twice<false>(pairs_low)));
        isum[i] = _mm512_add_epi32(isum[i], _mm512_mullo_epi32(low1, scale_twice<true>(pairs_low)));
        isum[i] = _mm512_add_epi32(isum[i], _mm512_mullo_epi32(high0, scale_twice<false>(pairs_high)));
        isum[i] = _mm512_add_epi32(isum[i], _mm512_mullo_epi32(high1, scale_twice<true>(pairs_high)));
      }
    }
    const __m256 dx = _mm256_set1_ps(xb.d);
    for (int i = 0; i < NG; ++i) {
      const __m256i dot = _mm256_sub_epi32(qmv::interleave::vnni::fold_halves(isum[i]), _mm256_slli_epi32(offset[i], 5));
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(qmv::interleave::fp16x8(w[i][b].d), dx), acc[i]);
    }
  }
  for (int i = 0; i < NG; ++i) _mm256_storeu_ps(out[i], acc[i]);
}

struct Q6KVnni {
  using Layout = BlockQ6_Kx8;
  static constexpr qmv::WeightType kType = qmv::WeightType::Q6_K;
  template <int NG>
  static void dot_groups(const Layout* const w[NG], const qmv::BlockQ8K* x, const XMinSums* xm, std::int64_t nb,
                         float* const out[NG]) {
    ::dot_groups<NG, (NG < 4)>(w, x, xm, nb, out);
  }
};

// Records made at compile time (see q5_K_avx512vnni_r8_q8k.cpp).
constexpr qmv::KernelRecord kTwoStreams = qmv::interleave::kquant_r8_record<Q6KVnni, 2>(
    "q6_K.cpu.avx512vnni_r8x2_q8k",
    "Q6_K x Q8_K, AVX-512 VNNI, eight-row interleaved super-blocks as avx2_r8_q8k, two triples per register, "
    "one vpdpbusd per chunk pair, two prefetched weight streams per thread sharing each activation permute",
    qmv::interleave::kAvx512VnniFeatures);
constexpr qmv::KernelRecord kFourStreams = qmv::interleave::kquant_r8_record<Q6KVnni, 4>(
    "q6_K.cpu.avx512vnni_r8x4_q8k",
    "Q6_K x Q8_K, AVX-512 VNNI, eight-row interleaved super-blocks as avx2_r8_q8k, two triples per register, "
    "one vpdpbusd per chunk pair, four weight streams per thread without software prefetch",
    qmv::interleave::kAvx512VnniFeatures);

}  // namespace

QMV_REGISTER_KERNEL(kTwoStreams);
QMV_REGISTER_KERNEL(kFourStreams);
