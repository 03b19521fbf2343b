// The loop of the AVX2 kernels of Q4_K weights in the row-interleaved layout
// (row_interleaved.h) x Q8_K activations (q4_K_r8*_q8k.cpp, a file per stream count and
// fused form): eight rows per step, one 32-bit lane per row. Per pair of sub-blocks, eight
// 32-byte loads hold four weights of each of the eight rows per lane: low nibbles
// (sub-block 2g) meet a broadcast of the four matching activation quants in
// vpmaddubsw, high nibbles (sub-block 2g+1) the four quants 32 further on. Each
// sub-block's eight int16 pair sums add up in int16, and one vpmaddwd against the
// eight rows' 6-bit scales, each repeated in both int16 halves of its lane by one
// vpshufb, gives the scaled sub-block dots in int32. The min term takes one vpmaddwd
// per two sub-blocks: the rows' mins, stored in pairs by the repack and widened to
// int16, against the two sub-blocks' activation sums (made once per call from the
// Q8_K block sums). The rows' d and dmin convert in one vcvtph2ps each.
//
// Bounds: a vpmaddubsw pair is at most 2 * 15 * 128 = 3840 in size and eight of them
// at most 30720 < 2^15; a sub-block dot (<= 61440) times a scale (<= 63), over eight
// sub-blocks, is far inside int32; a sub-block's activation sum is at most
// 32 * 128 = 4096 in size (int16), times a min (<= 63) over eight sub-blocks likewise.
// The float conversion loses nothing that matters next to the Q8_K rounding.
#pragma once

#include "kquant_r8.h"

namespace {

using qmv::interleave::BlockQ4_Kx8;
using qmv::interleave::XMinSums;

// How far ahead of the super-block being read each weight stream is prefetched, in
// bytes (the hardware prefetcher alone leaves a single stream short of the peak):
// 2048 beat 1024 and 4096 (results/intel-xeon-2c/r8-prefetch-chunked-pages.csv).
constexpr int kPrefetchBytes = 2048;
// Each quarter of the 1184-byte super-block prefetches five lines kPrefetchBytes
// ahead, one after each of its first five chunks: the block's lines spread through
// it rather than one burst of misses (see prefetch_line_after).
constexpr int kLinesPerQuarter = 5;

// NG groups of eight rows against the activation, into out[i][0..7]: each group a
// weight stream of its own, each activation quad broadcast once for all of them.
// The chunks are unrolled and the int16 sums pinned in registers (keep_in_register);
// the min term is taken once per block. Written as plain loops, the compiler spilled
// the chunk products to the stack, and with the weights in cache the kernels computed
// 1.1-2x slower (results/amd-zen3-2c/q4_K-r8-inner-loop.csv). The quarters stay a
// loop: unrolled, with cached weights two streams computed 1.14x and four 1.23x slower
// (results/amd-zen3-2c/kquant-r8-compute.csv). Two unrolled streams spilled their sums;
// four touch the stack about as often either way, so the likely cause there is the
// unrolled loop's size (about 3x the rolled one's), not measured. Every stream
// prefetches, four as well as one or two: four streams left to the hardware prefetcher
// read short of the peak in huge pages (results/intel-xeon-2c/r8x4-prefetch.csv).
// kPrefetch: the distance in bytes, or 0 for none (the hardware prefetcher alone).
template <int NG, int kPrefetch>
void dot_groups(const BlockQ4_Kx8* const w[NG], const qmv::BlockQ8K* x, const XMinSums* xm, std::int64_t nb,
                float* const out[NG]) {
  using qmv::interleave::broadcast_quad;
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i pick = qmv::interleave::scale_pair_control();
  __m256 acc[NG];
  for (int i = 0; i < NG; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const qmv::BlockQ8K& xb = x[b];
    const BlockQ4_Kx8* wb[NG];
    std::uintptr_t ahead[NG];
    __m256i isum[NG];
    for (int i = 0; i < NG; ++i) {
      wb[i] = &w[i][b];
      ahead[i] = reinterpret_cast<std::uintptr_t>(wb[i]) + kPrefetch;
      isum[i] = _mm256_setzero_si256();
    }
#pragma GCC unroll 1
    for (int g = 0; g < 4; ++g) {
      __m256i lo16[NG], hi16[NG];
      for (int i = 0; i < NG; ++i) lo16[i] = hi16[i] = _mm256_setzero_si256();
      const std::int8_t* xq = xb.qs + 64 * g;
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const __m256i x_lo = broadcast_quad(xq + 4 * c), x_hi = broadcast_quad(xq + 32 + 4 * c);
        for (int i = 0; i < NG; ++i) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb[i]->qs[g][c]));
          lo16[i] = _mm256_add_epi16(lo16[i], _mm256_maddubs_epi16(_mm256_and_si256(v, m4), x_lo));
          hi16[i] =
              _mm256_add_epi16(hi16[i], _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), x_hi));
          qmv::x86::keep_in_register(lo16[i]);
          qmv::x86::keep_in_register(hi16[i]);
          if (kPrefetch > 0 && c < kLinesPerQuarter)
            qmv::x86::prefetch_line_after(ahead[i] + 64 * (kLinesPerQuarter * g + c), lo16[i]);
        }
      }
      for (int i = 0; i < NG; ++i)
        isum[i] = _mm256_add_epi32(isum[i], qmv::interleave::scaled_pair(lo16[i], hi16[i], wb[i]->scales[2 * g],
                                                                         wb[i]->scales[2 * g + 1], pick));
    }
    const __m256 dx = _mm256_set1_ps(xb.d);
    for (int i = 0; i < NG; ++i) acc[i] = qmv::interleave::add_block_with_mins(acc[i], isum[i], *wb[i], xm[b], dx);
  }
  for (int i = 0; i < NG; ++i) _mm256_storeu_ps(out[i], acc[i]);
}

// One group of eight rows against N activations (the batch op), into out[j][0..7]:
// each 32-byte chunk is loaded and its nibbles unpacked once, then met by every
// vector's broadcast quads, so the weights cost what they cost one vector and each more
// vector two vpmaddubsw and two adds per chunk. Up to four vectors take both halves of
// a quarter in one pass (2N int16 sums, the unpacked chunk and the mask fit the 16
// registers); more take the low nibbles, then the high ones from the chunks again, now
// in L1, holding N sums. Each sub-block's scales are widened once for all vectors.
template <int N, qmv::x86::PrefetchTo kTo>
void dot_batch(const BlockQ4_Kx8* w, const qmv::BlockQ8K* const x[N], const XMinSums* const xm[N], std::int64_t nb,
               float* const out[N]) {
  constexpr int kAhead = qmv::x86::prefetch_ahead_bytes<kTo>(kPrefetchBytes);
  using qmv::interleave::broadcast_quad;
  constexpr bool kBothHalves = N <= 4;
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i pick = qmv::interleave::scale_pair_control();
  __m256 acc[N];
  for (int j = 0; j < N; ++j) acc[j] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const BlockQ4_Kx8& wb = w[b];
    const std::uintptr_t ahead = reinterpret_cast<std::uintptr_t>(&wb) + kAhead;
    __m256i isum[N];
    for (int j = 0; j < N; ++j) isum[j] = _mm256_setzero_si256();
#pragma GCC unroll 1
    for (int g = 0; g < 4; ++g) {
      const __m256i scale_lo = qmv::interleave::scale_pairs(wb.scales[2 * g], pick);
      const __m256i scale_hi = qmv::interleave::scale_pairs(wb.scales[2 * g + 1], pick);
      if constexpr (kBothHalves) {
        __m256i lo16[N], hi16[N];
        for (int j = 0; j < N; ++j) lo16[j] = hi16[j] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs[g][c]));
          const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
          for (int j = 0; j < N; ++j) {
            const std::int8_t* xq = x[j][b].qs + 64 * g + 4 * c;
            lo16[j] = _mm256_add_epi16(lo16[j], _mm256_maddubs_epi16(lo, broadcast_quad(xq)));
            hi16[j] = _mm256_add_epi16(hi16[j], _mm256_maddubs_epi16(hi, broadcast_quad(xq + 32)));
            qmv::x86::keep_in_register(lo16[j]);
            qmv::x86::keep_in_register(hi16[j]);
          }
          if (c < kLinesPerQuarter)
            qmv::x86::prefetch_line_after<kTo>(ahead + 64 * (kLinesPerQuarter * g + c), lo16[0]);
        }
        for (int j = 0; j < N; ++j)
          isum[j] = _mm256_add_epi32(isum[j], _mm256_add_epi32(_mm256_madd_epi16(lo16[j], scale_lo),
                                                               _mm256_madd_epi16(hi16[j], scale_hi)));
      } else {
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          __m256i sum16[N];
          for (int j = 0; j < N; ++j) sum16[j] = _mm256_setzero_si256();
#pragma GCC unroll 8
          for (int c = 0; c < 8; ++c) {
            const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs[g][c]));
            const __m256i q = _mm256_and_si256(h ? _mm256_srli_epi16(v, 4) : v, m4);
            for (int j = 0; j < N; ++j) {
              sum16[j] = _mm256_add_epi16(
                  sum16[j], _mm256_maddubs_epi16(q, broadcast_quad(x[j][b].qs + 64 * g + 32 * h + 4 * c)));
              qmv::x86::keep_in_register(sum16[j]);
            }
            if (h == 0 && c < kLinesPerQuarter)
              qmv::x86::prefetch_line_after<kTo>(ahead + 64 * (kLinesPerQuarter * g + c), sum16[0]);
          }
          const __m256i scale = h ? scale_hi : scale_lo;
          for (int j = 0; j < N; ++j) isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(sum16[j], scale));
        }
      }
    }
    for (int j = 0; j < N; ++j)
      acc[j] = qmv::interleave::add_block_with_mins(acc[j], isum[j], wb, xm[j][b], _mm256_set1_ps(x[j][b].d));
  }
  for (int j = 0; j < N; ++j) _mm256_storeu_ps(out[j], acc[j]);
}

// The family's entry for the runs and records of kquant_r8.h, with its matvec loop's
// software prefetch distance (0: none) and where its batch loop prefetches to.
template <int kPrefetch, qmv::x86::PrefetchTo kBatchTo = qmv::x86::PrefetchTo::L1>
struct Q4KWithPrefetch {
  using Layout = BlockQ4_Kx8;
  static constexpr qmv::WeightType kType = qmv::WeightType::Q4_K;
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
using Q4K = Q4KWithPrefetch<kPrefetchBytes>;
// The loop without software prefetch (the _nopf kernels): where the hardware prefetcher
// alone keeps the read at the machine's peak, the prefetches cost more than they bring.
// Which is faster is a property of the machine, so both are kernels and `auto` times
// them there (results/amd-zen4-2c/nopf-q4_K-q6_K.csv).
using Q4KNoPrefetch = Q4KWithPrefetch<0>;
// The batch loop prefetching to L2 (the _l2pf kernels; x86.h, PrefetchTo).
using Q4KBatchL2 = Q4KWithPrefetch<kPrefetchBytes, qmv::x86::PrefetchTo::L2>;

}  // namespace
