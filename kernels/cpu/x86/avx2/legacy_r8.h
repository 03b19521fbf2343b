// The AVX2 kernels of the row-interleaved legacy layouts (row_interleaved.h) x Q8_1
// activations, Q4_0, Q4_1, Q5_0 and Q5_1: eight rows per step, one float lane per row. Per 32
// columns, four 32-byte loads hold four weights of each of the eight rows in every
// 32-bit lane; their low nibbles meet a broadcast of the matching four activation
// quants in vpmaddubsw (u8 x s8), their high nibbles the four quants 16 further on.
// The eight int16 pair sums of a block add up in int16 and one vpmaddwd against ones
// leaves row r's block dot in lane r. Q5's repack puts a whole 5-bit quant and three
// bits of another in each byte (BlockQ5_0x8): six vector operations per chunk form its
// two registers of quants, where nibbles with the fifth bits OR'd in took nine
// (results/amd-zen3-2c/q5-r8-whole-low.csv).
// The _0 types' offset (8, 16) is -offset*sum(q_x) per block, an exact integer made
// once per call; the _1 types' m term is m_w times d_x*sum(q_x), one more FMA per
// block for eight rows. The eight rows' fp16 scales convert in one vcvtph2ps.
//
// Next to the plain-layout kernels this saves the per-row work that makes them
// compute-bound on AVX2: no per-block scale conversion per row, no horizontal sums,
// no gather of nibbles into 256-bit registers. One sequential stream per thread
// (avx2_r8) still leaves the read short of the peak; two streams per thread, the two
// halves of the thread's rows (avx2_r8x2), keep enough misses in flight
// (results/intel-xeon-2c/default.csv).
//
// Four streams (avx2_r8x4) go chunk by chunk: each activation quad broadcast once, then
// the same chunk of all four streams, as the Q8_0 kernel's sign path. Block by block,
// four streams' accumulators and the block's broadcasts took more than the 16
// registers; chunk by chunk, with the int16 sums pinned, the Q4 loops hold everything
// in registers and compute about 1.2x as fast with cached weights. Cold, in two
// interleaved runs on one and two threads, they read 1-18 points of the peak more than
// block by block (Q4_0, Q4_1) and than two streams (Q5_0, Q5_1)
// (results/amd-zen3-2c/legacy-r8x4-chunk-major.csv). Each stream prefetches one line
// of the block kPrefetchBlocks ahead per chunk: the hardware prefetcher alone leaves
// four streams short of the peak where the copies sit in huge pages
// (results/intel-xeon-2c/r8x4-prefetch.csv; in 4 KiB pages the two were level,
// results/amd-zen3-2c/r8x4-no-prefetch.csv).
//
// Bounds: a vpmaddubsw pair is at most 2 * 15 * 128 = 3840 in size (Q4), and eight
// of them sum to at most 30720 < 2^15; Q5's pairs reach 7936, so its int16 sums are
// widened every four pairs. The int32 block dot plus 16 * 32 * 128 is far inside
// int32 and exact in float.
// Included only by the avx2_r8 kernels' files, built with -mavx2 -mfma -mf16c.
#pragma once

#include "r8.h"

#include <cstdint>
#include <cstring>

#include "kernel.h"
#include "kernels/cpu_tiling.h"
#include "kernels/cpu/row_interleaved.h"

namespace qmv::interleave {
namespace {

// Per activation block: its scale, minus the weights' offset times the sum of its
// quants (Q4_0), and its scale times that sum (Q4_1's m term).
struct XBlockInfo {
  float d;
  std::int32_t offset;
  float d_sum;
};

// How far ahead of the block being read each weight stream is prefetched, in
// interleaved blocks (eight rows' blocks: 144 bytes of Q4_0, 272 of Q8_0). With the
// prepared copies wholly in huge pages, 32 beat 8 and 16
// (results/intel-xeon-2c/r8-prefetch-chunked-pages.csv).
constexpr int kPrefetchBlocks = 32;

// Chunk c's quants of the eight rows, lo against activation quants 4c..4c+3 and hi
// against 16+4c..16+4c+3: nibbles for the 4-bit layouts; for the 5-bit ones
// (BlockQ5_0x8), five_bit_quants with top, the block's 32-byte top array.
template <class Layout>
inline void chunk_quants(const Layout& wb, int c, [[maybe_unused]] __m256i top, __m256i& lo, __m256i& hi) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs[c]));
  if constexpr (Layout::kFifthBits) {
    five_bit_quants(v, top, c, lo, hi);
  } else {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    lo = _mm256_and_si256(v, m4);
    hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
  }
}

// NG groups of eight rows against the activation, into out[i][0..7]: each group a
// weight stream of its own, each activation block loaded once for all of them.
template <class Layout, int NG>
void dot_groups(const Layout* const w[NG], const BlockQ8_1* x, const XBlockInfo* xi, std::int64_t nb,
                float* const out[NG]) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[NG], acc_m[NG];
  for (int i = 0; i < NG; ++i) acc[i] = acc_m[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::int8_t* xq = x[b].qs;
    const __m256i offset = _mm256_set1_epi32(xi[b].offset);
    const __m256 dx = _mm256_set1_ps(xi[b].d);
    const __m256 d_sum = _mm256_set1_ps(xi[b].d_sum);
    for (int i = 0; i < NG; ++i) {
      const std::uintptr_t ahead = reinterpret_cast<std::uintptr_t>(w[i] + b + kPrefetchBlocks);
      x86::prefetch_line(ahead);
      x86::prefetch_line(ahead + 64);
      x86::prefetch_line(ahead + 128);
      const Layout& wb = w[i][b];
      __m256i sum16 = _mm256_setzero_si256(), dot = offset;
      __m256i top = _mm256_setzero_si256();
      if constexpr (Layout::kFifthBits) top = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.top));
      for (int c = 0; c < 4; ++c) {
        __m256i lo, hi;
        chunk_quants(wb, c, top, lo, hi);
        sum16 = _mm256_add_epi16(sum16, _mm256_maddubs_epi16(lo, broadcast_quad(xq + 4 * c)));
        sum16 = _mm256_add_epi16(sum16, _mm256_maddubs_epi16(hi, broadcast_quad(xq + 16 + 4 * c)));
        // Five-bit quants: a pair is up to 2 * 31 * 128 = 7936, so int16 holds four pairs.
        if (Layout::kFifthBits && c % 2 == 1) {
          dot = _mm256_add_epi32(dot, _mm256_madd_epi16(sum16, ones));
          sum16 = _mm256_setzero_si256();
        }
      }
      if constexpr (!Layout::kFifthBits) dot = _mm256_add_epi32(dot, _mm256_madd_epi16(sum16, ones));
      const __m256 d = _mm256_mul_ps(fp16x8(wb.d), dx);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), d, acc[i]);
      if constexpr (Layout::kHasMin)
        acc_m[i] = _mm256_fmadd_ps(fp16x8(wb.m), d_sum,
                                   acc_m[i]);
    }
  }
  for (int i = 0; i < NG; ++i) _mm256_storeu_ps(out[i], Layout::kHasMin ? _mm256_add_ps(acc[i], acc_m[i]) : acc[i]);
}

// The call's per-block activation info (XBlockInfo) for weights stored offset by `zero`,
// in per-thread scratch.
inline const XBlockInfo* activation_info(const BlockQ8_1* x, std::int64_t nb, int zero) {
  auto* xi = static_cast<XBlockInfo*>(thread_scratch(static_cast<std::size_t>(nb) * sizeof(XBlockInfo)));
  for (std::int64_t b = 0; b < nb; ++b) {
    std::int32_t sum = 0;
    for (int i = 0; i < kQ8_1Block; ++i) sum += x[b].qs[i];
    const float d = _cvtsh_ss(x[b].d);
    // d * sum is exact in float: 11 + 13 significant bits.
    xi[b] = {d, -zero * sum, d * static_cast<float>(sum)};
  }
  return xi;
}

// NG groups of eight rows against the activation chunk by chunk (avx2_r8x4): each
// activation quad broadcast once, then that chunk of every stream, which prefetches a
// line of its block kPrefetchBlocks ahead; each stream keeps one int accumulator per
// block and one float accumulator, the _1 types' m term folded in. Q5's int16 sums are
// widened to int32 every chunk (two pairs each; the bound allows four).
template <class Layout, int NG>
void dot_groups_chunk_major(const Layout* const w[NG], const BlockQ8_1* x, const XBlockInfo* xi, std::int64_t nb,
                            float* const out[NG]) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[NG];
  for (int i = 0; i < NG; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::int8_t* xq = x[b].qs;
    __m256i sum[NG];  // int16 pair sums (Q4), int32 (Q5)
    for (int i = 0; i < NG; ++i) sum[i] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const __m256i x_lo = broadcast_quad(xq + 4 * c), x_hi = broadcast_quad(xq + 16 + 4 * c);
      for (int i = 0; i < NG; ++i) {
        const Layout& wb = w[i][b];
        prefetch_chunk_line<Layout, 4, kPrefetchBlocks>(&wb, c, sum[i]);
        __m256i lo, hi;
        if constexpr (Layout::kFifthBits) {
          // Loaded again per chunk (from L1): four streams' top bits held across the
          // block would not fit in the registers.
          chunk_quants(wb, c, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.top)), lo, hi);
          const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(lo, x_lo), _mm256_maddubs_epi16(hi, x_hi));
          sum[i] = _mm256_add_epi32(sum[i], _mm256_madd_epi16(pairs, ones));
        } else {
          chunk_quants(wb, c, _mm256_setzero_si256(), lo, hi);
          sum[i] = _mm256_add_epi16(sum[i], _mm256_maddubs_epi16(lo, x_lo));
          sum[i] = _mm256_add_epi16(sum[i], _mm256_maddubs_epi16(hi, x_hi));
        }
        x86::keep_in_register(sum[i]);
      }
    }
    const __m256i offset = _mm256_set1_epi32(xi[b].offset);
    const __m256 dx = _mm256_set1_ps(xi[b].d), d_sum = _mm256_set1_ps(xi[b].d_sum);
    for (int i = 0; i < NG; ++i) {
      const Layout& wb = w[i][b];
      const __m256i dot = _mm256_add_epi32(Layout::kFifthBits ? sum[i] : _mm256_madd_epi16(sum[i], ones), offset);
      const __m256 d = _mm256_mul_ps(fp16x8(wb.d), dx);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), d, acc[i]);
      if constexpr (Layout::kHasMin)
        acc[i] =
            _mm256_fmadd_ps(fp16x8(wb.m), d_sum, acc[i]);
    }
  }
  for (int i = 0; i < NG; ++i) _mm256_storeu_ps(out[i], acc[i]);
}

template <class Layout, int NG>
Status run(const MatVecArgs& a) {
  const auto* m = static_cast<const RowGroups<Layout>*>(a.prepared);
  if (!m || !(m->shape == a.shape)) return not_prepared_for(a.shape);
  const std::int64_t nb = m->blocks;
  const auto* x = static_cast<const BlockQ8_1*>(a.x);
  const XBlockInfo* xi = activation_info(x, nb, Layout::kZero);
  for_each_group<NG>(*m, a.y, a.threads, [&](auto count, const Layout* const* w, float* const* out) {
    if constexpr (NG == 4)
      dot_groups_chunk_major<Layout, decltype(count)::value>(w, x, xi, nb, out);
    else
      dot_groups<Layout, decltype(count)::value>(w, x, xi, nb, out);
  });
  return Status::Ok();
}

// Fused up+gate: group g of NP parts of both matrices per step, 2 * NP streams sharing
// the activation (four chunk-major, as the matvec's four).
template <class Layout, int NP>
Status run_up_gate(const MatVecArgs& a) {
  const auto* p = static_cast<const RowGroupPair<Layout>*>(a.prepared);
  if (!p || !(p->first.shape == a.shape)) return not_prepared_for(a.shape);
  const std::int64_t nb = p->first.blocks;
  const auto* x = static_cast<const BlockQ8_1*>(a.x);
  const XBlockInfo* xi = activation_info(x, nb, Layout::kZero);
  for_each_group_pair<NP>(*p, a.y, a.y2, a.threads, [&](auto count, const Layout* const* w, float* const* out) {
    if constexpr (decltype(count)::value == 4)
      dot_groups_chunk_major<Layout, 4>(w, x, xi, nb, out);
    else
      dot_groups<Layout, decltype(count)::value>(w, x, xi, nb, out);
  });
  return Status::Ok();
}

// The XBlockInfo of n activations back to back (vector j's at j * nb), in one
// per-thread scratch: a batch call's.
inline const XBlockInfo* activation_info_batch(const BlockQ8_1* x, std::int64_t nb, int n, int zero) {
  const std::int64_t total = nb * n;
  auto* xi = static_cast<XBlockInfo*>(thread_scratch(static_cast<std::size_t>(total) * sizeof(XBlockInfo)));
  for (std::int64_t b = 0; b < total; ++b) {
    std::int32_t sum = 0;
    for (int i = 0; i < kQ8_1Block; ++i) sum += x[b].qs[i];
    const float d = _cvtsh_ss(x[b].d);
    xi[b] = {d, -zero * sum, d * static_cast<float>(sum)};
  }
  return xi;
}

// One group of eight rows against N activations (the batch op), into out[j][0..7]:
// each chunk loaded and unpacked once (Q5's top bits once per block), then met by every
// vector's broadcast quads; the rows' scales converted once per block for all vectors.
// Q4's pair sums stay int16 over the block (at most 30720), Q5's are widened every
// chunk, as the chunk-major loop does.
template <class Layout, int N>
void dot_batch(const Layout* w, const BlockQ8_1* const x[N], const XBlockInfo* const xi[N], std::int64_t nb,
               float* const out[N]) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[N];
  for (int j = 0; j < N; ++j) acc[j] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const Layout& wb = w[b];
    const std::uintptr_t ahead = reinterpret_cast<std::uintptr_t>(w + b + kPrefetchBlocks);
    for (std::uintptr_t line = 0; line < sizeof(Layout); line += 64) x86::prefetch_line(ahead + line);
    __m256i sum[N];  // int16 pair sums (Q4), int32 (Q5)
    for (int j = 0; j < N; ++j) sum[j] = _mm256_setzero_si256();
    __m256i top = _mm256_setzero_si256();
    if constexpr (Layout::kFifthBits) top = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.top));
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      __m256i lo, hi;
      chunk_quants(wb, c, top, lo, hi);
      for (int j = 0; j < N; ++j) {
        const std::int8_t* xq = x[j][b].qs;
        const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(lo, broadcast_quad(xq + 4 * c)),
                                               _mm256_maddubs_epi16(hi, broadcast_quad(xq + 16 + 4 * c)));
        sum[j] = Layout::kFifthBits ? _mm256_add_epi32(sum[j], _mm256_madd_epi16(pairs, ones))
                                    : _mm256_add_epi16(sum[j], pairs);
        x86::keep_in_register(sum[j]);
      }
    }
    const __m256 d = fp16x8(wb.d);
    [[maybe_unused]] __m256 m = _mm256_setzero_ps();
    if constexpr (Layout::kHasMin) m = fp16x8(wb.m);
    for (int j = 0; j < N; ++j) {
      const XBlockInfo& info = xi[j][b];
      const __m256i dot = _mm256_add_epi32(Layout::kFifthBits ? sum[j] : _mm256_madd_epi16(sum[j], ones),
                                           _mm256_set1_epi32(info.offset));
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(d, _mm256_set1_ps(info.d)), acc[j]);
      if constexpr (Layout::kHasMin) acc[j] = _mm256_fmadd_ps(m, _mm256_set1_ps(info.d_sum), acc[j]);
    }
  }
  for (int j = 0; j < N; ++j) _mm256_storeu_ps(out[j], acc[j]);
}

// The batch op of a legacy layout: one weight stream per thread, 1 to
// kMaxBatchVectors vectors per call.
template <class Layout>
Status run_batch(const MatVecArgs& a) {
  const auto* m = static_cast<const RowGroups<Layout>*>(a.prepared);
  if (!m || !(m->shape == a.shape)) return not_prepared_for(a.shape);
  const std::int64_t nb = m->blocks;
  const auto* x = static_cast<const BlockQ8_1*>(a.x);
  const XBlockInfo* xi = activation_info_batch(x, nb, a.n, Layout::kZero);
  return with_vector_count(a.n, [&](auto count) {
    constexpr int N = decltype(count)::value;
    const BlockQ8_1* xs[N];
    const XBlockInfo* xis[N];
    for (int j = 0; j < N; ++j) {
      xs[j] = x + j * nb;
      xis[j] = xi + j * nb;
    }
    for_each_group_batch<N>(*m, a.y, a.threads,
                            [&](const Layout* w, float* const* out) { dot_batch<Layout, N>(w, xs, xis, nb, out); });
    return Status::Ok();
  });
}

// The registry records of a layout's kernels: NG weight streams per thread (1: avx2_r8,
// 2: avx2_r8x2, 4: avx2_r8x4, chunk-major), and the fused up+gate ones (NP groups of
// each matrix per step).
template <class Layout, int NG>
KernelRecord r8_record(WeightType type, const char* name, const char* description) {
  return interleaved_record<Layout>(OpKind::MatVec, name, type, ActFormat::Q8_1, run<Layout, NG>, description);
}

template <class Layout>
constexpr KernelRecord r8_batch_record(WeightType type, const char* name, const char* description) {
  KernelRecord r = interleaved_record<Layout>(OpKind::MatVecBatch, name, type, ActFormat::Q8_1, run_batch<Layout>,
                                              description);
  r.max_n = kMaxBatchVectors;
  return r;
}

template <class Layout, int NP>
KernelRecord r8_up_gate_record(WeightType type, const char* name, const char* description) {
  return interleaved_record<Layout>(OpKind::FusedUpGate, name, type, ActFormat::Q8_1, run_up_gate<Layout, NP>,
                                    description);
}

}  // namespace
}  // namespace qmv::interleave
