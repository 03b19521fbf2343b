// The loop of the AVX2 row-interleaved Q5_K x Q8_K kernels
// (q5_K_r8*_q8k.cpp, a file per stream count and fused form).
//
// Q5_K weights in the row-interleaved layout (row_interleaved.h) x Q8_K activations,
// AVX2: eight rows per step, one 32-bit lane per row, as the Q4_K kernel
// (q4_K_r8.h) with the fifth bits added. Per pair of sub-blocks, eight
// 32-byte loads hold four weights of each of the eight rows per lane, each byte a
// whole low weight (one mask) and the low three bits of a high weight (a shift and a
// mask); the high weights' top two bits come from one 32-byte load per four chunks,
// moved into place by a constant shift and a mask and OR'd in. Both meet their
// activation quads in vpmaddubsw. The scale and min terms are the Q4_K kernel's: one
// vpmaddwd against the rows' scales per sub-block and half, one against the paired
// mins per two sub-blocks. The loop is laid out as Q4_K's: each activation quad
// broadcast once for all the streams, the int16 sums pinned in registers, each
// prefetch after a fixed chunk.
//
// Bounds: a vpmaddubsw pair is at most 2 * 31 * 128 = 7936 in size, so the int16 sums
// take four pairs (31744 < 2^15) before each vpmaddwd; a sub-block dot (<= 126976)
// times a scale (<= 63), over eight sub-blocks, is inside int32 (< 2^26), and so is
// the min term (4096 * 63 * 8). The float conversion of the int32 sums rounds far
// below the Q8_K activation's own rounding.
#pragma once

#include "kquant_r8.h"

namespace {

using qmv::interleave::BlockQ5_Kx8;
using qmv::interleave::XMinSums;

// How far ahead of the super-block being read each weight stream is prefetched, in
// bytes: a little over two super-blocks, which beat 1536 once the prepared copies lay
// wholly in huge pages (r8-prefetch-chunked-pages.csv in results/intel-xeon-2c; in
// ordinary pages 512 was slower and 2048 and 3072 no faster than 1536,
// q5_K-r8-prefetch.csv). Each quarter of the 1440-byte super-block prefetches six
// lines, one after each of its first six chunks: four quarters cover it at any
// alignment.
constexpr int kPrefetchBytes = 3072;
constexpr int kLinesPerQuarter = 6;

// Chunk 4h+K of quarter g of NG streams: the low and high weights against their
// activation quads, added into lo16[i] and hi16[i]; chunks before the quarter's
// kLinesPerQuarter-th each prefetch one line of each stream.
template <int NG, int K>
inline void chunk(const BlockQ5_Kx8* const wb[NG], int g, int h, const __m256i top[NG], const std::int8_t* xq,
                  const std::uintptr_t ahead[NG], __m256i lo16[NG], __m256i hi16[NG]) {
  const int c = 4 * h + K;
  const __m256i x_lo = qmv::interleave::broadcast_quad(xq + 4 * c),
                x_hi = qmv::interleave::broadcast_quad(xq + 32 + 4 * c);
  for (int i = 0; i < NG; ++i) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb[i]->quarter[g].qs[c]));
    __m256i lo, hi;
    qmv::interleave::five_bit_quants(v, top[i], K, lo, hi);
    lo16[i] = _mm256_add_epi16(lo16[i], _mm256_maddubs_epi16(lo, x_lo));
    hi16[i] = _mm256_add_epi16(hi16[i], _mm256_maddubs_epi16(hi, x_hi));
    qmv::x86::keep_in_register(lo16[i]);
    qmv::x86::keep_in_register(hi16[i]);
    if (c < kLinesPerQuarter) qmv::x86::prefetch_line_after(ahead[i] + 64 * (kLinesPerQuarter * g + c), lo16[i]);
  }
}

// NG groups of eight rows against the activation, into out[i][0..7]: each group a
// weight stream of its own, each activation quad loaded once for all of them.
template <int NG>
void dot_groups(const BlockQ5_Kx8* const w[NG], const qmv::BlockQ8K* x, const XMinSums* xm, std::int64_t nb,
                float* const out[NG]) {
  const __m256i pick = qmv::interleave::scale_pair_control();
  __m256 acc[NG];
  for (int i = 0; i < NG; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const qmv::BlockQ8K& xb = x[b];
    const BlockQ5_Kx8* wb[NG];
    std::uintptr_t ahead[NG];
    __m256i isum[NG];
    for (int i = 0; i < NG; ++i) {
      wb[i] = &w[i][b];
      ahead[i] = reinterpret_cast<std::uintptr_t>(wb[i]) + kPrefetchBytes;
      isum[i] = _mm256_setzero_si256();
    }
    // A loop, not unrolled: with cached weights it computes 1.12x faster so
    // (results/amd-zen3-2c/kquant-r8-compute.csv), though both forms touch the stack;
    // as for four Q4_K streams, the unrolled loop's size is the likely cause.
#pragma GCC unroll 1
    for (int g = 0; g < 4; ++g) {
      const std::int8_t* xq = xb.qs + 64 * g;
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        __m256i top[NG], lo16[NG], hi16[NG];
        for (int i = 0; i < NG; ++i) {
          top[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb[i]->quarter[g].top[h]));
          lo16[i] = hi16[i] = _mm256_setzero_si256();
        }
        chunk<NG, 0>(wb, g, h, top, xq, ahead, lo16, hi16);
        chunk<NG, 1>(wb, g, h, top, xq, ahead, lo16, hi16);
        chunk<NG, 2>(wb, g, h, top, xq, ahead, lo16, hi16);
        chunk<NG, 3>(wb, g, h, top, xq, ahead, lo16, hi16);
        for (int i = 0; i < NG; ++i)
          isum[i] = _mm256_add_epi32(isum[i], qmv::interleave::scaled_pair(lo16[i], hi16[i], wb[i]->scales[2 * g],
                                                                           wb[i]->scales[2 * g + 1], pick));
      }
    }
    const __m256 dx = _mm256_set1_ps(xb.d);
    for (int i = 0; i < NG; ++i) acc[i] = qmv::interleave::add_block_with_mins(acc[i], isum[i], *wb[i], xm[b], dx);
  }
  for (int i = 0; i < NG; ++i) _mm256_storeu_ps(out[i], acc[i]);
}

// The family's entry for the runs and records of kquant_r8.h.
struct Q5K {
  using Layout = BlockQ5_Kx8;
  static constexpr qmv::WeightType kType = qmv::WeightType::Q5_K;
  template <int NG>
  static void dot_groups(const Layout* const w[NG], const qmv::BlockQ8K* x, const XMinSums* xm, std::int64_t nb,
                         float* const out[NG]) {
    ::dot_groups<NG>(w, x, xm, nb, out);
  }
};

}  // namespace
