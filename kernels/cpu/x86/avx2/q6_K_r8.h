// The loop of the AVX2 row-interleaved Q6_K x Q8_K kernels
// (q6_K_r8*_q8k.cpp, a file per stream count and fused form).
//
// Q6_K weights in the row-interleaved layout (row_interleaved.h) x Q8_K activations,
// AVX2: eight rows per step, one 32-bit lane per row. Each quarter of a super-block
// (64 weights of each row) is four triples of 32-byte loads; every byte holds a whole
// 6-bit quant in bits 0-5, so three of a triple's four chunks are one mask each, and
// the fourth chunk's quant is spread over the three bytes' bits 6-7 (three masks, three
// shifts, two ORs): 11 vector operations for four chunks where a nibble plane plus a
// 2-bit plane would take 17. The quants (0..63) meet the activation quads in
// vpmaddubsw, two chunks' pair sums add in int16 (one sub-block's), and one vpmaddwd
// against the rows' int8 scales, widened once per quarter to int16 and repeated in both
// halves of each lane by a vpshufb, gives the scaled dots in int32. The -32 offset is
// -32 * sum_j scale_j * bsum_j(x): one vpmaddwd per two sub-blocks of the same widened
// scale pairs against the activation's two Q8_K block sums, taken straight from the
// block.
//
// Bounds: a vpmaddubsw pair is at most 2 * 63 * 128 = 16128 in size, two of them
// 32256 < 2^15; a sub-block dot (<= 129024) times a scale (<= 128) over sixteen
// sub-blocks is under 2^29, and the offset (16 * 128 * 2048, times 32) likewise;
// their difference stays inside int32.
#pragma once

#include <cstring>

#include "kquant_r8.h"

namespace {

using qmv::interleave::BlockQ6_Kx8;
using qmv::interleave::XMinSums;

// How far ahead of the super-block being read each weight stream is prefetched, in
// bytes (just over one super-block; 4096 was slower,
// results/intel-xeon-2c/r8-prefetch-chunked-pages.csv), and the lines each quarter of
// the 1680-byte super-block prefetches: four quarters of seven cover it at any alignment.
// A quarter's seven go two after each of its first three triples and one after the
// fourth, unrolled: as a loop of their own they cost a counter, a compare and a branch
// each, scalar work on the ports the vector loop is bound on.
constexpr int kPrefetchBytes = 2048;
constexpr int kLinesPerQuarter = 7;

// The vpshufb controls that repeat, from a row's pair of int16 scales (the pair in its
// 32-bit lane), the first (Second = false) or second scale in both halves of the lane.
template <bool Second>
inline __m256i repeat_control() {
  constexpr char e = Second ? 2 : 0;
  return _mm256_setr_epi8(0 + e, 1 + e, 0 + e, 1 + e, 4 + e, 5 + e, 4 + e, 5 + e, 8 + e, 9 + e, 8 + e, 9 + e,      //
                          12 + e, 13 + e, 12 + e, 13 + e, 0 + e, 1 + e, 0 + e, 1 + e, 4 + e, 5 + e, 4 + e, 5 + e,  //
                          8 + e, 9 + e, 8 + e, 9 + e, 12 + e, 13 + e, 12 + e, 13 + e);
}

// The four chunks of triple V of a quarter: whole 6-bit quants (0..63) in three of
// them, the fourth's spread over the three bytes' bits 6-7. Masked first, each 16-bit
// shift moves only the byte's own bits 6-7 (to 4-5, 2-3, 0-1).
struct TripleChunks {
  __m256i q0, q1, q2, q3;
};
inline TripleChunks unpack_triple(const std::uint8_t (&t)[3][4 * qmv::interleave::kGroupRows]) {
  const __m256i m6 = _mm256_set1_epi8(0x3f), top2 = _mm256_set1_epi8(static_cast<char>(0xc0));
  const __m256i t0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t[0]));
  const __m256i t1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t[1]));
  const __m256i t2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(t[2]));
  const __m256i spread = _mm256_or_si256(_mm256_or_si256(_mm256_srli_epi16(_mm256_and_si256(t0, top2), 2),
                                                         _mm256_srli_epi16(_mm256_and_si256(t1, top2), 4)),
                                         _mm256_srli_epi16(_mm256_and_si256(t2, top2), 6));
  return {_mm256_and_si256(t0, m6), _mm256_and_si256(t1, m6), _mm256_and_si256(t2, m6), spread};
}

// The rows' int8 scales of quarter g's low half (sub-blocks 4g, 4g+1; half 0) or high
// half (4g+2, 4g+3; half 1) as int16 pairs, row r's pair in 32-bit lane r.
inline __m256i scale_pairs16(const BlockQ6_Kx8& wb, int g, int half) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.scale_pairs[2 * g + half])));
}

// Quarter g's share of the -32 offset against activation block xb: the widened scale
// pairs of each half against the block's two sub-block sums of that half, one vpmaddwd.
inline __m256i add_offset(__m256i offset, __m256i pairs_low, __m256i pairs_high, const qmv::BlockQ8K& xb, int g) {
  std::int32_t x_low, x_high;
  std::memcpy(&x_low, &xb.bsums[4 * g], sizeof(x_low));
  std::memcpy(&x_high, &xb.bsums[4 * g + 2], sizeof(x_high));
  offset = _mm256_add_epi32(offset, _mm256_madd_epi16(pairs_low, _mm256_set1_epi32(x_low)));
  return _mm256_add_epi32(offset, _mm256_madd_epi16(pairs_high, _mm256_set1_epi32(x_high)));
}

// Triple V of a quarter (chunks 2V, 2V+1 of the low half, one sub-block, and of the
// high half, another): their scaled dots against the activation, added into isum; then
// the triple's share of the quarter's prefetches, from quarter_ahead.
template <int V, bool kPrefetch>
inline void triple(const BlockQ6_Kx8::Quarter& q, const std::int8_t* xq, __m256i scale_low, __m256i scale_high,
                   __m256i& isum, std::uintptr_t quarter_ahead) {
  const TripleChunks c = unpack_triple(q.t[V]);
  using qmv::interleave::broadcast_quad;
  const __m256i low = _mm256_add_epi16(_mm256_maddubs_epi16(c.q0, broadcast_quad(xq + 8 * V)),
                                       _mm256_maddubs_epi16(c.q1, broadcast_quad(xq + 8 * V + 4)));
  const __m256i high = _mm256_add_epi16(_mm256_maddubs_epi16(c.q2, broadcast_quad(xq + 32 + 8 * V)),
                                        _mm256_maddubs_epi16(c.q3, broadcast_quad(xq + 32 + 8 * V + 4)));
  isum = _mm256_add_epi32(isum, _mm256_madd_epi16(low, scale_low));
  isum = _mm256_add_epi32(isum, _mm256_madd_epi16(high, scale_high));
  if constexpr (kPrefetch)
    for (int line = 2 * V; line < 2 * V + 2 && line < kLinesPerQuarter; ++line)
      qmv::x86::prefetch_line_after(quarter_ahead + 64 * line, isum);
}

// NG groups of eight rows against the activation, into out[i][0..7]: the streams one
// after another through each super-block, each quarter's triples prefetching a quarter
// of the block kPrefetch bytes ahead (0: no software prefetch).
template <int NG, int kPrefetch>
void dot_groups(const BlockQ6_Kx8* const w[NG], const qmv::BlockQ8K* x, const XMinSums*, std::int64_t nb,
                float* const out[NG]) {
  const __m256i first = repeat_control<false>(), second = repeat_control<true>();
  __m256 acc[NG];
  for (int i = 0; i < NG; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const qmv::BlockQ8K& xb = x[b];
    const __m256 dx = _mm256_set1_ps(xb.d);
    for (int i = 0; i < NG; ++i) {
      const BlockQ6_Kx8& wb = w[i][b];
      const std::uintptr_t ahead = reinterpret_cast<std::uintptr_t>(&wb) + kPrefetch;
      __m256i isum = _mm256_setzero_si256(), offset = _mm256_setzero_si256();
      for (int g = 0; g < 4; ++g) {
        // Sub-blocks 4g, 4g+1 (the low half's) and 4g+2, 4g+3 (the high half's).
        const __m256i pairs_low = scale_pairs16(wb, g, 0), pairs_high = scale_pairs16(wb, g, 1);
        offset = add_offset(offset, pairs_low, pairs_high, xb, g);
        const __m256i low0 = _mm256_shuffle_epi8(pairs_low, first), low1 = _mm256_shuffle_epi8(pairs_low, second);
        const __m256i high0 = _mm256_shuffle_epi8(pairs_high, first), high1 = _mm256_shuffle_epi8(pairs_high, second);
        const BlockQ6_Kx8::Quarter& q = wb.quarter[g];
        const std::int8_t* xq = xb.qs + 64 * g;
        const std::uintptr_t quarter_ahead = ahead + 64 * kLinesPerQuarter * g;
        triple<0, (kPrefetch > 0)>(q, xq, low0, high0, isum, quarter_ahead);
        triple<1, (kPrefetch > 0)>(q, xq, low0, high0, isum, quarter_ahead);
        triple<2, (kPrefetch > 0)>(q, xq, low1, high1, isum, quarter_ahead);
        triple<3, (kPrefetch > 0)>(q, xq, low1, high1, isum, quarter_ahead);
      }
      const __m256i dot = _mm256_sub_epi32(isum, _mm256_slli_epi32(offset, 5));
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(qmv::interleave::fp16x8(wb.d), dx), acc[i]);
    }
  }
  for (int i = 0; i < NG; ++i) _mm256_storeu_ps(out[i], acc[i]);
}

// Triple V of quarter q against N activations' quarter quants xq[j] (64 each), into
// isum[j]: the four chunks unpacked once, then each vector's two sub-block pairs.
template <int V, int N, qmv::x86::PrefetchTo kTo>
inline void triple_batch(const BlockQ6_Kx8::Quarter& q, const std::int8_t* const xq[N], __m256i scale_low,
                         __m256i scale_high, __m256i isum[N], std::uintptr_t quarter_ahead) {
  using qmv::interleave::broadcast_quad;
  const TripleChunks c = unpack_triple(q.t[V]);
  for (int j = 0; j < N; ++j) {
    const std::int8_t* x = xq[j];
    const __m256i low = _mm256_add_epi16(_mm256_maddubs_epi16(c.q0, broadcast_quad(x + 8 * V)),
                                         _mm256_maddubs_epi16(c.q1, broadcast_quad(x + 8 * V + 4)));
    const __m256i high = _mm256_add_epi16(_mm256_maddubs_epi16(c.q2, broadcast_quad(x + 32 + 8 * V)),
                                          _mm256_maddubs_epi16(c.q3, broadcast_quad(x + 32 + 8 * V + 4)));
    isum[j] = _mm256_add_epi32(isum[j], _mm256_add_epi32(_mm256_madd_epi16(low, scale_low),
                                                         _mm256_madd_epi16(high, scale_high)));
  }
  for (int line = 2 * V; line < 2 * V + 2 && line < kLinesPerQuarter; ++line)
    qmv::x86::prefetch_line_after<kTo>(quarter_ahead + 64 * line, isum[0]);
}

// One group of eight rows against N activations (the batch op), into out[j][0..7]:
// each triple of 32-byte loads is unpacked once into its four chunks of 6-bit quants
// (11 vector operations) and then met by every vector's broadcast quads: four
// vpmaddubsw, two int16 adds and two vpmaddwd by the rows' scales per vector. The scales
// are widened and repeated once per quarter for all vectors; each vector's -32 offset is
// one vpmaddwd per two sub-blocks against its Q8_K block sums, as in dot_groups.
template <int N, qmv::x86::PrefetchTo kTo>
void dot_batch(const BlockQ6_Kx8* w, const qmv::BlockQ8K* const x[N], const XMinSums* const[N], std::int64_t nb,
               float* const out[N]) {
  constexpr int kAhead = qmv::x86::prefetch_ahead_bytes<kTo>(kPrefetchBytes);
  const __m256i first = repeat_control<false>(), second = repeat_control<true>();
  __m256 acc[N];
  for (int j = 0; j < N; ++j) acc[j] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const BlockQ6_Kx8& wb = w[b];
    const std::uintptr_t ahead = reinterpret_cast<std::uintptr_t>(&wb) + kAhead;
    __m256i isum[N], offset[N];
    for (int j = 0; j < N; ++j) isum[j] = offset[j] = _mm256_setzero_si256();
#pragma GCC unroll 1
    for (int g = 0; g < 4; ++g) {
      // Sub-blocks 4g, 4g+1 (the low half's) and 4g+2, 4g+3 (the high half's).
      const __m256i pairs_low = scale_pairs16(wb, g, 0), pairs_high = scale_pairs16(wb, g, 1);
      const std::int8_t* xq[N];
      for (int j = 0; j < N; ++j) {
        offset[j] = add_offset(offset[j], pairs_low, pairs_high, x[j][b], g);
        xq[j] = x[j][b].qs + 64 * g;
      }
      const __m256i low0 = _mm256_shuffle_epi8(pairs_low, first), low1 = _mm256_shuffle_epi8(pairs_low, second);
      const __m256i high0 = _mm256_shuffle_epi8(pairs_high, first), high1 = _mm256_shuffle_epi8(pairs_high, second);
      const BlockQ6_Kx8::Quarter& q = wb.quarter[g];
      const std::uintptr_t quarter_ahead = ahead + 64 * kLinesPerQuarter * g;
      triple_batch<0, N, kTo>(q, xq, low0, high0, isum, quarter_ahead);
      triple_batch<1, N, kTo>(q, xq, low0, high0, isum, quarter_ahead);
      triple_batch<2, N, kTo>(q, xq, low1, high1, isum, quarter_ahead);
      triple_batch<3, N, kTo>(q, xq, low1, high1, isum, quarter_ahead);
    }
    const __m256 d = qmv::interleave::fp16x8(wb.d);
    for (int j = 0; j < N; ++j) {
      const __m256i dot = _mm256_sub_epi32(isum[j], _mm256_slli_epi32(offset[j], 5));
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(d, _mm256_set1_ps(x[j][b].d)), acc[j]);
    }
  }
  for (int j = 0; j < N; ++j) _mm256_storeu_ps(out[j], acc[j]);
}

// The family's entry for the runs and records of kquant_r8.h, with its matvec loop's
// software prefetch distance (0: none; q4_K_r8.h says why both are kernels) and where its
// batch loop prefetches to.
template <int kPrefetch, qmv::x86::PrefetchTo kBatchTo = qmv::x86::PrefetchTo::L1>
struct Q6KWithPrefetch {
  using Layout = BlockQ6_Kx8;
  static constexpr qmv::WeightType kType = qmv::WeightType::Q6_K;
  template <int NG>
  static void dot_groups(const Layout* const w[NG], const qmv::BlockQ8K* x, const XMinSums* xm, std::int64_t nb,
                         float* const out[NG]) {
    ::dot_groups<NG, kPrefetch>(w, x, xm, nb, out);
  }
  template <int N>
  static void dot_batch(const Layout* w, const qmv::BlockQ8K* const x[N], const XMinSums* const xm[N],
                        std::int64_t nb, float* const out[N]) {
    ::dot_batch<N, kBatchTo>(w, x, xm, nb, out);
  }
};
using Q6K = Q6KWithPrefetch<kPrefetchBytes>;
using Q6KNoPrefetch = Q6KWithPrefetch<0>;
// The batch loop prefetching to L2 (the _l2pf kernels; x86.h, PrefetchTo).
using Q6KBatchL2 = Q6KWithPrefetch<kPrefetchBytes, qmv::x86::PrefetchTo::L2>;

}  // namespace
