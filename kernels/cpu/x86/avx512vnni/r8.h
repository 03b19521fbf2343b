// The AVX-512 VNNI kernels of the row-interleaved layouts (row_interleaved.h): the very
// copies the AVX2 r8 kernels read, two 32-byte chunks per 512-bit register.
//
// A chunk holds four weights of each of the eight rows in its 32-bit lanes, so a 64-byte
// load of chunks c and c+1 holds row r's weights of chunk c in lane r and of chunk c+1
// in lane 8+r. One vpermd per chunk pair, shared by every weight stream, sets the
// activation quads of c in the lower eight lanes and of c+1 in the upper eight, and one
// vpdpbusd multiplies and accumulates the u8 weights against the s8 activations into
// int32: where the AVX2 loop takes, per chunk and half of its quants, a vpmaddubsw and
// an int16 add (and a vpmaddwd per block or sub-block), this takes half a vpdpbusd, and
// the nibble or 5-bit unpacking is done for two chunks at once. Lanes r and 8+r are folded once per
// block (Q4_0..Q8_0) or super-block (Q4_K, Q5_K, after each sub-block's scale is
// applied in int32), and from there the AVX2 kernels' 256-bit code scales the rows.
//
// Q8_0's signed quants go in with bit 7 flipped (q + 128, unsigned) and the block's
// dot starts at -128 * sum(q_x), exact for every input, -128 included, where the AVX2
// sign trick needs a second path. Q5's top bits are shifted by a different amount in
// each half (a masked shift). Q6_K has no form here: one with two of its triples per
// register computed 1.15-1.24x as fast as its AVX2 loop with cached weights, but read
// cold no faster than the plain avx512vnni_x4 kernel
// (results/intel-xeon-2c/q6_K-r8-avx512vnni-*.csv; the code is in git history).
//
// 32 vector registers hold four streams' accumulators where AVX2's 16 spilled.
//
// Bounds: a lane sums at most 16 products |q_w * q_x| <= 255 * 128 per block (legacy),
// or 16 of at most 31 * 128 per sub-block (K), far inside int32; the sub-blocks' dots
// times their 6-bit scales, over a super-block, stay under 2^26.
// Included only by the _r8_ files of this folder (built with -mavx512f/bw/vl/vnni).
#pragma once

#include "kernels/cpu/x86/avx2/kquant_r8.h"
#include "kernels/cpu/x86/avx2/legacy_r8.h"

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernel.h"
#include "kernels/cpu_tiling.h"
#include "kernels/cpu/row_interleaved.h"

namespace qmv::interleave::vnni {
namespace {

// Lanes 0-7 take dword 2q of the register permuted, lanes 8-15 dword 2q+1: the
// activation quads of two consecutive chunks.
inline __m512i pair_index(int q) {
  return _mm512_setr_epi32(2 * q, 2 * q, 2 * q, 2 * q, 2 * q, 2 * q, 2 * q, 2 * q, 2 * q + 1, 2 * q + 1, 2 * q + 1,
                           2 * q + 1, 2 * q + 1, 2 * q + 1, 2 * q + 1, 2 * q + 1);
}

// Row r's two partial sums, lanes r and 8 + r, added into lane r.
inline __m256i fold_halves(__m512i v) {
  return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

inline __m512i dpbusd(__m512i acc, __m512i u8, __m512i s8) { return _mm512_dpbusd_epi32(acc, u8, s8); }

// Chunks 2p and 2p+1 of a 5-bit layout of whole quants (BlockQ5_0x8, a quarter's half
// of BlockQ5_Kx8), v their 64 bytes, top2 the 32 bytes of top bits in both halves: the
// low and high quants as five_bit_quants (x86/avx2/r8.h) makes them for chunk
// k = 2p in the lower half and k = 2p + 1 in the upper. p is a constant once inlined.
inline void five_bit_quant_pair(__m512i v, __m512i top2, int p, __m512i& low, __m512i& high) {
  constexpr __mmask32 kUpper = 0xffff0000u;  // the 16-bit words of the upper half
  // Bits 2k and 2k+1 of top moved to bits 3 and 4: k = 0, 1 shift left by 3, 1; k = 2,
  // 3 right by 1, 3.
  const __m512i top_at_3 = p == 0 ? _mm512_mask_slli_epi16(_mm512_slli_epi16(top2, 3), kUpper, top2, 1)
                                  : _mm512_mask_srli_epi16(_mm512_srli_epi16(top2, 1), kUpper, top2, 3);
  low = _mm512_and_si512(v, _mm512_set1_epi8(0x1f));
  // Bits 3-4 from top_at_3 and the others from v >> 5 (0xd8: C ? B : A), then bits 0-4.
  const __m512i merged =
      _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 5), top_at_3, _mm512_set1_epi8(0x18), 0xd8);
  high = _mm512_and_si512(merged, _mm512_set1_epi8(0x1f));
}

// How far ahead of the block being read each weight stream is prefetched, in
// interleaved blocks, as by the AVX2 kernels (x86/avx2/legacy_r8.h).
constexpr int kLegacyPrefetchBlocks = 32;

template <class Layout>
inline constexpr bool kIsQ8_0 = std::is_same_v<Layout, BlockQ8_0x8>;

// The weights' offset in the u8 lanes vpdpbusd reads: Q8_0's quants are flipped to
// q + 128, the others are stored offset by kZero.
template <class Layout>
constexpr int stored_zero() {
  if constexpr (kIsQ8_0<Layout>)
    return 128;
  else
    return Layout::kZero;
}

// The eight rows' scales of block wb, row r in lane r (Q8_0 stores them in its AVX2
// loop's order, kDOrder, which is its own inverse).
template <class Layout>
inline __m256 row_scales(const Layout& wb) {
  if constexpr (kIsQ8_0<Layout>)
    return _mm256_permutevar8x32_ps(fp16x8(wb.d), _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7));
  else
    return fp16x8(wb.d);
}

// NG groups of eight rows of a legacy layout against the activation, into
// out[i][0..7], block by block: the block's activation pairs permuted once for all the
// streams, then each stream's block.
template <class Layout, int NG>
void legacy_dot_groups(const Layout* const w[NG], const BlockQ8_1* x, const XBlockInfo* xi, std::int64_t nb,
                       float* const out[NG]) {
  const __m512i m4 = _mm512_set1_epi8(0x0f), flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i index[4] = {pair_index(0), pair_index(1), pair_index(2), pair_index(3)};
  __m256 acc[NG];
  for (int i = 0; i < NG; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const __m512i xv = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs)));
    // Chunk pair q's quads: (4q'.., 4q'+4..) for q' = 2q, 2q+1 of the block's 32.
    __m512i xs[4];
    for (int q = 0; q < 4; ++q) xs[q] = _mm512_permutexvar_epi32(index[q], xv);
    const __m256i offset = _mm256_set1_epi32(xi[b].offset);
    const __m256 dx = _mm256_set1_ps(xi[b].d);
    for (int i = 0; i < NG; ++i) {
      const Layout& wb = w[i][b];
      const std::uintptr_t ahead = reinterpret_cast<std::uintptr_t>(&wb) + kLegacyPrefetchBlocks * sizeof(Layout);
      for (std::uintptr_t line = 0; line < sizeof(Layout); line += 64) x86::prefetch_line(ahead + line);
      __m512i dot = _mm512_setzero_si512();
      if constexpr (kIsQ8_0<Layout>) {
        // Chunks 2q, 2q+1 against quads 2q, 2q+1.
        for (int q = 0; q < 4; ++q) {
          const __m512i v = _mm512_loadu_si512(wb.qs[2 * q]);
          dot = dpbusd(dot, _mm512_xor_si512(v, flip), xs[q]);
        }
      } else {
        __m512i top2 = _mm512_setzero_si512();
        if constexpr (Layout::kFifthBits)
          top2 = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.top)));
        // Chunks 2p, 2p+1: low quants against quads 2p, 2p+1, high ones against 4+2p, 5+2p.
        for (int p = 0; p < 2; ++p) {
          const __m512i v = _mm512_loadu_si512(wb.qs[2 * p]);
          __m512i lo, hi;
          if constexpr (Layout::kFifthBits) {
            five_bit_quant_pair(v, top2, p, lo, hi);
          } else {
            lo = _mm512_and_si512(v, m4);
            hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
          }
          dot = dpbusd(dot, lo, xs[p]);
          dot = dpbusd(dot, hi, xs[2 + p]);
        }
      }
      const __m256i sum = _mm256_add_epi32(fold_halves(dot), offset);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(row_scales(wb), dx), acc[i]);
      if constexpr (!kIsQ8_0<Layout>) {
        if constexpr (Layout::kHasMin) acc[i] = _mm256_fmadd_ps(fp16x8(wb.m), _mm256_set1_ps(xi[b].d_sum), acc[i]);
      }
    }
  }
  for (int i = 0; i < NG; ++i) _mm256_storeu_ps(out[i], acc[i]);
}

// The matvec of a legacy layout with NG streams per thread, each prefetched, four as
// well as two (results/intel-xeon-2c/r8x4-prefetch.csv).
template <class Layout, int NG>
Status run_legacy(const MatVecArgs& a) {
  const auto* m = static_cast<const RowGroups<Layout>*>(a.prepared);
  if (!m || !(m->shape == a.shape)) return not_prepared_for(a.shape);
  const std::int64_t nb = m->blocks;
  const auto* x = static_cast<const BlockQ8_1*>(a.x);
  const XBlockInfo* xi = activation_info(x, nb, stored_zero<Layout>());
  for_each_group<NG>(*m, a.y, a.threads, [&](auto count, const Layout* const* w, float* const* out) {
    legacy_dot_groups<Layout, decltype(count)::value>(w, x, xi, nb, out);
  });
  return Status::Ok();
}

template <class Layout, int NG>
constexpr KernelRecord legacy_record(WeightType type, const char* name, const char* description) {
  return interleaved_record<Layout>(OpKind::MatVec, name, type, ActFormat::Q8_1, run_legacy<Layout, NG>, description,
                                    kAvx512VnniFeatures);
}

// The fused up+gate of a legacy layout: NP groups of each matrix per step.
template <class Layout, int NP>
Status run_legacy_pair(const MatVecArgs& a) {
  const auto* p = static_cast<const RowGroupPair<Layout>*>(a.prepared);
  if (!p || !(p->first.shape == a.shape)) return not_prepared_for(a.shape);
  const std::int64_t nb = p->first.blocks;
  const auto* x = static_cast<const BlockQ8_1*>(a.x);
  const XBlockInfo* xi = activation_info(x, nb, stored_zero<Layout>());
  for_each_group_pair<NP>(*p, a.y, a.y2, a.threads, [&](auto count, const Layout* const* w, float* const* out) {
    legacy_dot_groups<Layout, decltype(count)::value>(w, x, xi, nb, out);
  });
  return Status::Ok();
}

template <class Layout, int NP>
constexpr KernelRecord legacy_up_gate_record(WeightType type, const char* name, const char* description) {
  return interleaved_record<Layout>(OpKind::FusedUpGate, name, type, ActFormat::Q8_1, run_legacy_pair<Layout, NP>,
                                    description, kAvx512VnniFeatures);
}

// Sub-block j's 6-bit scales of the eight rows, row r in lanes r and 8 + r.
inline __m512i scales_twice(const std::uint8_t* eight) {
  std::int64_t v;
  std::memcpy(&v, eight, sizeof(v));
  return _mm512_cvtepu8_epi32(_mm_set1_epi64x(v));
}

// How far ahead the K-quant kernels prefetch each stream, in bytes, and how many lines
// each quarter of a super-block issues (at least a quarter of the block's lines).
constexpr int kKQuantPrefetchBytes = 2048;
template <class Layout>
inline constexpr int kLinesPerQuarter = static_cast<int>((sizeof(Layout) + 255) / 256);

// NG groups of eight rows of a Q4_K or Q5_K layout against the activation, into
// out[i][0..7]. Per quarter g (sub-blocks 2g and 2g+1) the activation's 64 quants are
// loaded once and each chunk pair's quads permuted once for all the streams; each
// stream's int32 sums of the two sub-blocks are scaled in int32 and folded once per
// super-block, whose min term and scales are the AVX2 kernels' (add_block_with_mins).
template <class Layout, int NG>
void kquant_dot_groups(const Layout* const w[NG], const BlockQ8K* x, const XMinSums* xm, std::int64_t nb,
                       float* const out[NG]) {
  constexpr bool kFive = std::is_same_v<Layout, BlockQ5_Kx8>;
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  __m256 acc[NG];
  for (int i = 0; i < NG; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const BlockQ8K& xb = x[b];
    const Layout* wb[NG];
    __m512i isum[NG];
    for (int i = 0; i < NG; ++i) {
      wb[i] = &w[i][b];
      isum[i] = _mm512_setzero_si512();
    }
#pragma GCC unroll 1
    for (int g = 0; g < 4; ++g) {
      const __m512i xv = _mm512_loadu_si512(xb.qs + 64 * g);
      __m512i lo[NG], hi[NG];
      for (int i = 0; i < NG; ++i) lo[i] = hi[i] = _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int p = 0; p < 4; ++p) {
        // Chunks 2p, 2p+1: low weights (sub-block 2g) against quads 2p, 2p+1, high
        // ones (2g+1) against 8+2p, 9+2p.
        const __m512i x_lo = _mm512_permutexvar_epi32(pair_index(p), xv);
        const __m512i x_hi = _mm512_permutexvar_epi32(pair_index(4 + p), xv);
        for (int i = 0; i < NG; ++i) {
          constexpr int kLines = kLinesPerQuarter<Layout>;
          const std::uintptr_t ahead = reinterpret_cast<std::uintptr_t>(wb[i]) + kKQuantPrefetchBytes;
          for (int j = 2 * p; j < 2 * p + 2 && j < kLines; ++j) x86::prefetch_line(ahead + 64 * (kLines * g + j));
          __m512i low, high;
          if constexpr (kFive) {
            const auto& quarter = wb[i]->quarter[g];
            const __m512i top2 = _mm512_broadcast_i64x4(
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(quarter.top[p / 2])));
            five_bit_quant_pair(_mm512_loadu_si512(quarter.qs[2 * p]), top2, p % 2, low, high);
          } else {
            const __m512i v = _mm512_loadu_si512(wb[i]->qs[g][2 * p]);
            low = _mm512_and_si512(v, m4);
            high = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
          }
          lo[i] = dpbusd(lo[i], low, x_lo);
          hi[i] = dpbusd(hi[i], high, x_hi);
        }
      }
      for (int i = 0; i < NG; ++i) {
        isum[i] = _mm512_add_epi32(isum[i], _mm512_mullo_epi32(lo[i], scales_twice(wb[i]->scales[2 * g])));
        isum[i] = _mm512_add_epi32(isum[i], _mm512_mullo_epi32(hi[i], scales_twice(wb[i]->scales[2 * g + 1])));
      }
    }
    const __m256 dx = _mm256_set1_ps(xb.d);
    for (int i = 0; i < NG; ++i) acc[i] = add_block_with_mins(acc[i], fold_halves(isum[i]), *wb[i], xm[b], dx);
  }
  for (int i = 0; i < NG; ++i) _mm256_storeu_ps(out[i], acc[i]);
}

// Quarter g of super-block wb against M activations (their block b) of the batch op,
// added into isum[j]: each chunk pair loaded and unpacked once, then one vpermd (its
// activation quarter read from memory) and one vpdpbusd per half and vector, each
// sub-block's scale applied in int32.
template <class Layout, int M>
inline void kquant_quarter_batch(const Layout& wb, int g, const BlockQ8K* const x[M], std::int64_t b,
                                 std::uintptr_t ahead, bool prefetch, __m512i isum[M]) {
  constexpr bool kFive = std::is_same_v<Layout, BlockQ5_Kx8>;
  constexpr int kLines = kLinesPerQuarter<Layout>;
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  __m512i lo[M], hi[M];
  for (int j = 0; j < M; ++j) lo[j] = hi[j] = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int p = 0; p < 4; ++p) {
    if (prefetch)
      for (int l = 2 * p; l < 2 * p + 2 && l < kLines; ++l) x86::prefetch_line(ahead + 64 * (kLines * g + l));
    __m512i low, high;
    if constexpr (kFive) {
      const auto& quarter = wb.quarter[g];
      const __m512i top2 =
          _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(quarter.top[p / 2])));
      five_bit_quant_pair(_mm512_loadu_si512(quarter.qs[2 * p]), top2, p % 2, low, high);
    } else {
      const __m512i v = _mm512_loadu_si512(wb.qs[g][2 * p]);
      low = _mm512_and_si512(v, m4);
      high = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    }
    for (int j = 0; j < M; ++j) {
      const __m512i xv = _mm512_loadu_si512(x[j][b].qs + 64 * g);
      lo[j] = dpbusd(lo[j], low, _mm512_permutexvar_epi32(pair_index(p), xv));
      hi[j] = dpbusd(hi[j], high, _mm512_permutexvar_epi32(pair_index(4 + p), xv));
    }
  }
  const __m512i scale_lo = scales_twice(wb.scales[2 * g]), scale_hi = scales_twice(wb.scales[2 * g + 1]);
  for (int j = 0; j < M; ++j) {
    isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(lo[j], scale_lo));
    isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(hi[j], scale_hi));
  }
}

// One group of eight rows of a Q4_K or Q5_K layout against N activations (the batch
// op), into out[j][0..7], a quarter at a time (kquant_quarter_batch). Up to four
// vectors' 2N sums share the 32 registers with the unpacked pair and the super-block's
// sums; five to eight take each quarter in two passes of at most four, the second
// reading its chunks again from L1 (in one pass, eight vectors spilled and took more
// than twice four's time).
template <class Layout, int N>
void kquant_dot_batch(const Layout* w, const BlockQ8K* const x[N], const XMinSums* const xm[N], std::int64_t nb,
                      float* const out[N]) {
  constexpr int kFirst = N < 4 ? N : 4;
  __m256 acc[N];
  for (int j = 0; j < N; ++j) acc[j] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const Layout& wb = w[b];
    const std::uintptr_t ahead = reinterpret_cast<std::uintptr_t>(&wb) + kKQuantPrefetchBytes;
    __m512i isum[N];
    for (int j = 0; j < N; ++j) isum[j] = _mm512_setzero_si512();
#pragma GCC unroll 1
    for (int g = 0; g < 4; ++g) {
      kquant_quarter_batch<Layout, kFirst>(wb, g, x, b, ahead, true, isum);
      if constexpr (N > 4) kquant_quarter_batch<Layout, N - 4>(wb, g, x + 4, b, ahead, false, isum + 4);
    }
    for (int j = 0; j < N; ++j)
      acc[j] = add_block_with_mins(acc[j], fold_halves(isum[j]), wb, xm[j][b], _mm256_set1_ps(x[j][b].d));
  }
  for (int j = 0; j < N; ++j) _mm256_storeu_ps(out[j], acc[j]);
}

// A K-quant family for run_kquant_rows and run_kquant_batch (x86/avx2/kquant_r8.h): the
// loops above, every stream prefetched, four as well as two
// (results/intel-xeon-2c/r8x4-prefetch.csv).
template <class L, WeightType Type>
struct KQuant {
  using Layout = L;
  static constexpr WeightType kType = Type;
  template <int NG>
  static void dot_groups(const Layout* const w[NG], const BlockQ8K* x, const XMinSums* xm, std::int64_t nb,
                         float* const out[NG]) {
    kquant_dot_groups<Layout, NG>(w, x, xm, nb, out);
  }
  template <int N>
  static void dot_batch(const Layout* w, const BlockQ8K* const x[N], const XMinSums* const xm[N], std::int64_t nb,
                        float* const out[N]) {
    kquant_dot_batch<Layout, N>(w, x, xm, nb, out);
  }
};

}  // namespace
}  // namespace qmv::interleave::vnni
