// The integer dot products of the AVX2 K-quant x Q8_K kernels, written once for NR
// rows: q{4,5,6}_K.cpu.avx2_q8k run them with NR = 1, the avx2_x4_q8k kernels with
// NR = 4 (and NR = 1 for the rows left over). The math per row, in the ggml style:
// vpmaddubsw (unsigned quants x signed int8 activations, pairs summed to int16, never
// saturating for these ranges), then vpmaddwd against the int16 sub-block scale (pairs
// summed to int32, the scale applied by the instruction that widens); offsets (the
// Q4_K/Q5_K mins, the Q6_K -32) come from the Q8_K bsums by one vpmaddwd per
// super-block, never per weight; one float accumulator per row and one horizontal sum.
//
// Row order within a super-block: row 0's whole block, then row 1's, ... The
// activation vectors are read again for each row, as memory operands of vpmaddubsw
// (an L1 hit, micro-fused, no extra instruction), not held in registers across the
// rows: with 16 ymm registers, keeping the four rows' accumulators, scales and partial
// sums live beside the activations would spill them, and a spill costs a store and a
// load where the re-read costs neither. What the rows share is everything that is per
// activation block (d, bsums) and the loop itself; what NR rows gain over one is
// NR weight streams in flight at once, each with its own software prefetch.
//
// Only for files built with AVX2, FMA and F16C (names containing avx2). Internal
// linkage throughout, as the family headers.
#pragma once

#include "kernels/cpu/x86/q4_K.h"
#include "kernels/cpu/x86/q5_K.h"
#include "kernels/cpu/x86/q6_K.h"

#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace qmv::kq_avx2 {
namespace {

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Prefetches `Lines` cache lines from byte address a with Hint. An integer address:
// near the end of the matrix it lies past the buffer, which a prefetch may name.
template <int Lines, auto Hint>
__attribute__((always_inline)) inline void prefetch_lines(std::uintptr_t a) {
  const char* p = reinterpret_cast<const char*>(a);
  for (int l = 0; l < Lines; ++l) _mm_prefetch(p + 64 * l, Hint);
}

// vpshufb controls that broadcast byte j of each 128-bit lane, zero-extended, to all
// its int16 words (scale j of a scale vector that holds one scale per byte).
alignas(32) constexpr std::uint8_t kByteToWords[8][32] = {
#define QMV_ROW(j)                                                         \
  {j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80, \
   j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80}
    QMV_ROW(0), QMV_ROW(1), QMV_ROW(2), QMV_ROW(3), QMV_ROW(4), QMV_ROW(5), QMV_ROW(6), QMV_ROW(7)
#undef QMV_ROW
};

// vpshufb controls that broadcast int16 word m of each 128-bit lane to all its words.
alignas(32) constexpr std::uint8_t kWordToWords[8][32] = {
#define QMV_ROW(m)                                                                            \
  {2 * m, 2 * m + 1, 2 * m, 2 * m + 1, 2 * m, 2 * m + 1, 2 * m, 2 * m + 1, 2 * m, 2 * m + 1, \
   2 * m, 2 * m + 1, 2 * m, 2 * m + 1, 2 * m, 2 * m + 1, 2 * m, 2 * m + 1, 2 * m, 2 * m + 1, \
   2 * m, 2 * m + 1, 2 * m, 2 * m + 1, 2 * m, 2 * m + 1, 2 * m, 2 * m + 1, 2 * m, 2 * m + 1, \
   2 * m, 2 * m + 1}
    QMV_ROW(0), QMV_ROW(1), QMV_ROW(2), QMV_ROW(3), QMV_ROW(4), QMV_ROW(5), QMV_ROW(6), QMV_ROW(7)
#undef QMV_ROW
};

inline __m256i ctrl(const std::uint8_t (*table)[32], int j) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(table[j]));
}

// ---- Q4_K ----------------------------------------------------------------------------
// Per 32 weights (a nibble plane of one 32-byte group: sub-block 2g in the low nibbles,
// 2g+1 in the high ones) one vpmaddubsw and one vpmaddwd. A maddubs pair is at most
// 2*15*128 = 3840, times a scale <= 63, summed over 256 weights: far inside int32.
template <int NR, std::int64_t PrefetchBytes, auto Hint>
__attribute__((always_inline)) inline void q4k_dot_rows(const BlockQ4K* const* rows,
                                                        const BlockQ8K* __restrict x,
                                                        std::int64_t nb, float* out) {
  const __m256i m4 = _mm256_set1_epi8(0xF);
  __m256 acc[NR];
  for (int i = 0; i < NR; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const BlockQ8K& xb = x[b];
    const __m128 dx = _mm_set1_ps(xb.d);
    const std::int8_t* q8 = xb.qs;
    for (int i = 0; i < NR; ++i) {
      const BlockQ4K& wb = rows[i][b];
      prefetch_lines<3, Hint>(reinterpret_cast<std::uintptr_t>(&wb) + PrefetchBytes);
      const __m128i head = q4k_x86::load_head(wb);
      const __m128i scm = q4k_x86::unpack_scales_mins(head);  // scales, then mins
      const __m128 dm = _mm_mul_ps(q4k_x86::d_dmin(head), dx);
      // Min term: words (m0,m0,m1,m1,..,m7,m7) x bsums -> m_j*(bsums[2j]+bsums[2j+1]).
      const __m256i mins2 = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(scm, scm));
      const __m256i summ = _mm256_madd_epi16(mins2, load256(xb.bsums));
      const __m256i scales = _mm256_broadcastsi128_si256(scm);
      __m256i sumi = _mm256_setzero_si256();
      for (int g = 0; g < 4; ++g) {
        const __m256i bits = load256(wb.qs + 32 * g);
        const __m256i lo = _mm256_and_si256(bits, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
        const __m256i pl = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, ctrl(kByteToWords, 2 * g)),
                                             _mm256_maddubs_epi16(lo, load256(q8 + 64 * g)));
        const __m256i ph = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, ctrl(kByteToWords, 2 * g + 1)),
                                             _mm256_maddubs_epi16(hi, load256(q8 + 64 * g + 32)));
        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
      }
      acc[i] = _mm256_fmadd_ps(_mm256_broadcastss_ps(dm), _mm256_cvtepi32_ps(sumi), acc[i]);
      acc[i] = _mm256_fnmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dm)), _mm256_cvtepi32_ps(summ), acc[i]);
    }
  }
  for (int i = 0; i < NR; ++i) out[i] = x86::hsum(acc[i]);
}

// ---- Q5_K ----------------------------------------------------------------------------
// As Q4_K with the fifth bit of sub-block j (bit j of the 32 qh bytes) moved to bit 4
// and or-ed into the nibble. |q*qx + q*qx| <= 2*31*128 < 32767: no saturation.

// Bit J of every byte of `h` moved to bit 4, other bits cleared. 16-bit shifts by at
// most 4 never carry bit 4 of a byte in from the other byte of the word.
template <int J>
__attribute__((always_inline)) inline __m256i q5k_high_bit(__m256i h, __m256i m16) {
  if constexpr (J < 4) return _mm256_and_si256(_mm256_slli_epi16(h, 4 - J), m16);
  else if constexpr (J == 4) return _mm256_and_si256(h, m16);
  else return _mm256_and_si256(_mm256_srli_epi16(h, J - 4), m16);
}

template <int G>
__attribute__((always_inline)) inline __m256i q5k_pair_dot(const std::uint8_t* qs, const std::int8_t* qx,
                                                          __m256i hbits, __m256i scales, __m256i m4,
                                                          __m256i m16, __m256i sumi) {
  const __m256i bits = load256(qs + 32 * G);
  const __m256i q0 = _mm256_or_si256(_mm256_and_si256(bits, m4), q5k_high_bit<2 * G>(hbits, m16));
  const __m256i q1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4),
                                     q5k_high_bit<2 * G + 1>(hbits, m16));
  const __m256i p0 = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, ctrl(kByteToWords, 2 * G)),
                                       _mm256_maddubs_epi16(q0, load256(qx + 64 * G)));
  const __m256i p1 = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, ctrl(kByteToWords, 2 * G + 1)),
                                       _mm256_maddubs_epi16(q1, load256(qx + 64 * G + 32)));
  return _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
}

template <int NR, std::int64_t PrefetchBytes, auto Hint>
__attribute__((always_inline)) inline void q5k_dot_rows(const BlockQ5K* const* rows,
                                                        const BlockQ8K* __restrict x,
                                                        std::int64_t nb, float* out) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m16 = _mm256_set1_epi8(0x10);
  const __m256i lane1 = _mm256_set1_epi32(1);
  __m256 acc[NR];
  for (int i = 0; i < NR; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const BlockQ8K& xb = x[b];
    const __m128 dx = _mm_set1_ps(xb.d);
    for (int i = 0; i < NR; ++i) {
      const BlockQ5K& wb = rows[i][b];
      prefetch_lines<3, Hint>(reinterpret_cast<std::uintptr_t>(&wb) + PrefetchBytes);
      // d*d_x, dmin*d_x (lanes 0, 1); scales (bytes 0..7) and mins (8..15) in both lanes.
      const __m128 dd = _mm_mul_ps(q5k_x86::d_dmin(wb), dx);
      const __m256i scales = _mm256_broadcastsi128_si256(q5k_x86::unpack_scales_mins(q5k_x86::load_head(wb)));
      const __m256i prod_m = q5k_x86::min_sums(load256(xb.bsums), scales, q5k_x86::min_pair_control());
      acc[i] = _mm256_fnmadd_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(dd), lane1),
                                _mm256_cvtepi32_ps(prod_m), acc[i]);
      const __m256i hbits = load256(wb.qh);
      __m256i sumi = _mm256_setzero_si256();
      sumi = q5k_pair_dot<0>(wb.qs, xb.qs, hbits, scales, m4, m16, sumi);
      sumi = q5k_pair_dot<1>(wb.qs, xb.qs, hbits, scales, m4, m16, sumi);
      sumi = q5k_pair_dot<2>(wb.qs, xb.qs, hbits, scales, m4, m16, sumi);
      sumi = q5k_pair_dot<3>(wb.qs, xb.qs, hbits, scales, m4, m16, sumi);
      acc[i] = _mm256_fmadd_ps(_mm256_broadcastss_ps(dd), _mm256_cvtepi32_ps(sumi), acc[i]);
    }
  }
  for (int i = 0; i < NR; ++i) out[i] = x86::hsum(acc[i]);
}

// ---- Q6_K ----------------------------------------------------------------------------
// Per half super-block (64 bytes of ql, 32 of qh) four vectors of unsigned quants in
// [0,63] (q6k_x86::unpack_half); maddubs with the activations (|2*63*128| < 2^15), madd
// with the int8 sub-block scales widened to int16. The -32 centring is never paid per
// weight: sum_{i in g} (q_i-32)*qx_i = sum q_i*qx_i - 32*bsums[g], so one madd of the
// scales (times 32, a shift) with the bsums per super-block, subtracted at the end.
// Bounds: per super-block |sum| <= 256*63*128*128 + 32*128*16*2048 < 2^31.

// int32 partial sums of one half super-block; `sc` holds the 16 scales as int16, even
// sub-blocks in 128-bit lane 0 and odd ones in lane 1 (how a 32-weight vector splits:
// bytes 0-15 belong to sub-block 2k, 16-31 to 2k+1), H the half.
template <int H>
__attribute__((always_inline)) inline __m256i q6k_half_dot(const BlockQ6K& w, const std::int8_t* q8,
                                                          __m256i sc) {
  __m256i q[4];
  q6k_x86::unpack_half(w.ql + 64 * H, w.qh + 32 * H, q, [](__m256i v) { return v; });
  const std::int8_t* x = q8 + 128 * H;
  const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(q[0], load256(x)),
                                       _mm256_shuffle_epi8(sc, ctrl(kWordToWords, 4 * H + 0)));
  const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(q[1], load256(x + 32)),
                                       _mm256_shuffle_epi8(sc, ctrl(kWordToWords, 4 * H + 1)));
  const __m256i p2 = _mm256_madd_epi16(_mm256_maddubs_epi16(q[2], load256(x + 64)),
                                       _mm256_shuffle_epi8(sc, ctrl(kWordToWords, 4 * H + 2)));
  const __m256i p3 = _mm256_madd_epi16(_mm256_maddubs_epi16(q[3], load256(x + 96)),
                                       _mm256_shuffle_epi8(sc, ctrl(kWordToWords, 4 * H + 3)));
  return _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3));
}

template <int NR, std::int64_t PrefetchBytes, auto Hint>
__attribute__((always_inline)) inline void q6k_dot_rows(const BlockQ6K* const* rows,
                                                        const BlockQ8K* __restrict x,
                                                        std::int64_t nb, float* out) {
  // Scale bytes reordered to even sub-blocks, then odd ones.
  const __m128i even_odd = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  __m256 acc[NR];
  for (int i = 0; i < NR; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const BlockQ8K& xb = x[b];
    for (int i = 0; i < NR; ++i) {
      const BlockQ6K& wb = rows[i][b];
      prefetch_lines<4, Hint>(reinterpret_cast<std::uintptr_t>(&wb) + PrefetchBytes);
      const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb.scales));
      const __m256i centring =
          _mm256_madd_epi16(_mm256_slli_epi16(_mm256_cvtepi8_epi16(sc8), 5), load256(xb.bsums));
      const __m256i sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, even_odd));
      const __m256i sumi = _mm256_sub_epi32(
          _mm256_add_epi32(q6k_half_dot<0>(wb, xb.qs, sc), q6k_half_dot<1>(wb, xb.qs, sc)), centring);
      acc[i] = _mm256_fmadd_ps(_mm256_set1_ps(_cvtsh_ss(wb.d) * xb.d), _mm256_cvtepi32_ps(sumi), acc[i]);
    }
  }
  for (int i = 0; i < NR; ++i) out[i] = x86::hsum(acc[i]);
}

// ---- Row loops -----------------------------------------------------------------------

template <class Block>
using DotRowsFn = void (*)(const Block* const*, const BlockQ8K*, std::int64_t, float*);

// One row at a time, over row tiles.
template <class Block, DotRowsFn<Block> Dot1>
Status run_one_row(const MatVecArgs& a) {
  const std::int64_t nb = a.shape.cols / kSuperBlock;
  const auto* w = static_cast<const Block*>(a.w);
  const auto* x = static_cast<const BlockQ8K*>(a.x);
  float* y = a.y;
  parallel_row_tiles(a.shape.rows, a.threads, [=](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) {
      const Block* row[1] = {w + r * nb};
      Dot1(row, x, nb, y + r);
    }
  });
  return Status::Ok();
}

// NR rows at a time. A tile of n rows is cut into NR contiguous parts of q = n/NR rows
// and step k takes row k of each part, so each weight stream walks consecutive rows
// (its prefetch runs on into the stream's next row) and the NR streams lie in
// different pages, which keeps more misses in flight on cold weights
// (x86/avx512vnni/q4_K_x4_q8k.cpp explains the choice). Rows left over (n % NR) take the
// one-row dot.
template <class Block, int NR, DotRowsFn<Block> DotN, DotRowsFn<Block> Dot1>
Status run_row_groups(const MatVecArgs& a) {
  const std::int64_t nb = a.shape.cols / kSuperBlock;
  const auto* w = static_cast<const Block*>(a.w);
  const auto* x = static_cast<const BlockQ8K*>(a.x);
  float* y = a.y;
  parallel_row_tiles(a.shape.rows, a.threads, [=](std::int64_t r0, std::int64_t r1) {
    for_rows_in_parts<NR>(
        r0, r1,
        [&](const std::int64_t (&r)[NR]) {
          const Block* rows[NR];
          for (int i = 0; i < NR; ++i) rows[i] = w + r[i] * nb;
          float out[NR];
          DotN(rows, x, nb, out);
          for (int i = 0; i < NR; ++i) y[r[i]] = out[i];
        },
        [&](std::int64_t r) {
          const Block* row[1] = {w + r * nb};
          Dot1(row, x, nb, y + r);
        });
  });
  return Status::Ok();
}

}  // namespace
}  // namespace qmv::kq_avx2
