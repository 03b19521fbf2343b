// What the AVX2 kernels of the row-interleaved K-quant layouts (Q4_K, Q5_K, Q6_K in
// row_interleaved.h) x Q8_K share beyond r8.h: the eight rows' scales as
// int16 pairs, and the per-call activation sums their min term multiplies.
// Included only by files built with -mavx2 -mfma -mf16c; internal linkage.
#pragma once

#include "r8.h"

#include <cstdint>
#include <cstring>

#include "kernel.h"
#include "kernels/cpu_tiling.h"
#include "kernels/cpu/row_interleaved.h"

namespace qmv::interleave {
namespace {

// The vpshufb control for scale_pairs.
inline __m256i scale_pair_control() {
  return _mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1,  //
                          4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
}

// Eight rows' scale bytes as int16 pairs (s_r, s_r) in lane r: the eight bytes in both
// 128-bit halves, each half picking its four rows (control: scale_pair_control()).
inline __m256i scale_pairs(const std::uint8_t* eight, __m256i control) {
  std::int64_t v;
  std::memcpy(&v, eight, sizeof(v));
  return _mm256_shuffle_epi8(_mm256_set1_epi64x(v), control);
}

// Per super-block of the activation: the sums of sub-blocks 2p and 2p+1 as the int16
// pair of word p, for the min term's vpmaddwd against the layouts' min_pairs.
struct XMinSums {
  std::int32_t pair[4];
};

// The call's XMinSums, in per-thread scratch.
inline const XMinSums* min_sums(const BlockQ8K* x, std::int64_t nb) {
  auto* xm = static_cast<XMinSums*>(thread_scratch(static_cast<std::size_t>(nb) * sizeof(XMinSums)));
  for (std::int64_t b = 0; b < nb; ++b)
    for (int p = 0; p < 4; ++p) {
      const int lo = x[b].bsums[4 * p] + x[b].bsums[4 * p + 1], hi = x[b].bsums[4 * p + 2] + x[b].bsums[4 * p + 3];
      xm[b].pair[p] = static_cast<std::int32_t>(static_cast<std::uint32_t>(static_cast<std::uint16_t>(lo)) |
                                                (static_cast<std::uint32_t>(static_cast<std::uint16_t>(hi)) << 16));
    }
  return xm;
}

// The XMinSums of n activations back to back (vector j's at j * nb), in one per-thread
// scratch: a batch call's.
inline const XMinSums* min_sums_batch(const BlockQ8K* x, std::int64_t nb, int n) {
  const std::int64_t total = nb * n;
  auto* xm = static_cast<XMinSums*>(thread_scratch(static_cast<std::size_t>(total) * sizeof(XMinSums)));
  for (std::int64_t b = 0; b < total; ++b)
    for (int p = 0; p < 4; ++p) {
      const int lo = x[b].bsums[4 * p] + x[b].bsums[4 * p + 1], hi = x[b].bsums[4 * p + 2] + x[b].bsums[4 * p + 3];
      xm[b].pair[p] = static_cast<std::int32_t>(static_cast<std::uint32_t>(static_cast<std::uint16_t>(lo)) |
                                                (static_cast<std::uint32_t>(static_cast<std::uint16_t>(hi)) << 16));
    }
  return xm;
}

// The min term of one pair of sub-blocks of eight rows: the rows' two mins (widened
// to int16) against the activation's two sub-block sums, in int32 lane r.
inline __m256i min_term(const std::uint8_t* min_pairs16, std::int32_t x_pair) {
  const __m256i mins = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(min_pairs16)));
  return _mm256_madd_epi16(mins, _mm256_set1_epi32(x_pair));
}

// One pair of sub-blocks of eight rows (lo16: the int16 sums of sub-block 2g, hi16:
// of 2g+1) times the rows' scales of those sub-blocks, in int32 lane r.
inline __m256i scaled_pair(__m256i lo16, __m256i hi16, const std::uint8_t* scales_lo, const std::uint8_t* scales_hi,
                           __m256i control) {
  return _mm256_add_epi32(_mm256_madd_epi16(lo16, scale_pairs(scales_lo, control)),
                          _mm256_madd_epi16(hi16, scale_pairs(scales_hi, control)));
}

// One super-block of a layout with mins (d, dmin, min_pairs: Q4_K's and Q5_K's) added
// into the rows' accumulator: its scaled dot isum times d, less its min term against
// the activation's pair sums times dmin, both times the activation's scale dx.
template <class Layout>
inline __m256 add_block_with_mins(__m256 acc, __m256i isum, const Layout& wb, const XMinSums& x_pairs, __m256 dx) {
  const __m256i imin = _mm256_add_epi32(
      _mm256_add_epi32(min_term(wb.min_pairs[0], x_pairs.pair[0]), min_term(wb.min_pairs[1], x_pairs.pair[1])),
      _mm256_add_epi32(min_term(wb.min_pairs[2], x_pairs.pair[2]), min_term(wb.min_pairs[3], x_pairs.pair[3])));
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(fp16x8(wb.d), dx), acc);
  return _mm256_fnmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_mul_ps(fp16x8(wb.dmin), dx), acc);
}

// A K-quant R8 kernel family K: K::Layout, K::kType and K::dot_groups<NG>(w, x, xm, nb,
// out) computing NG groups into out[i][0..7]. Its matvec (NG weight streams per
// thread) and fused up+gate (NP groups of each matrix, 2 * NP streams) runs check the
// prepared matrix or pair against the call's shape and make the activation's min sums
// once per call for a layout with mins (else xm is null).
template <class K, int NG>
Status run_kquant_rows(const MatVecArgs& a) {
  using Layout = typename K::Layout;
  const auto* m = static_cast<const RowGroups<Layout>*>(a.prepared);
  if (!m || !(m->shape == a.shape)) return not_prepared_for(a.shape);
  const std::int64_t nb = m->blocks;
  const auto* x = static_cast<const BlockQ8K*>(a.x);
  const XMinSums* xm = Layout::kMinPairs ? min_sums(x, nb) : nullptr;
  for_each_group<NG>(*m, a.y, a.threads, [&](auto count, const Layout* const* w, float* const* out) {
    K::template dot_groups<decltype(count)::value>(w, x, xm, nb, out);
  });
  return Status::Ok();
}

template <class K, int NP>
Status run_kquant_row_pair(const MatVecArgs& a) {
  using Layout = typename K::Layout;
  const auto* p = static_cast<const RowGroupPair<Layout>*>(a.prepared);
  if (!p || !(p->first.shape == a.shape)) return not_prepared_for(a.shape);
  const std::int64_t nb = p->first.blocks;
  const auto* x = static_cast<const BlockQ8K*>(a.x);
  const XMinSums* xm = Layout::kMinPairs ? min_sums(x, nb) : nullptr;
  for_each_group_pair<NP>(*p, a.y, a.y2, a.threads, [&](auto count, const Layout* const* w, float* const* out) {
    K::template dot_groups<decltype(count)::value>(w, x, xm, nb, out);
  });
  return Status::Ok();
}

// The batch op of a family K with K::dot_batch<N>(w, x, xm, nb, out): one group of
// eight rows against the N vectors (x[j], xm[j]) into out[j][0..7], each weight loaded
// once for all of them; the activations' min sums made once per call.
template <class K>
Status run_kquant_batch(const MatVecArgs& a) {
  using Layout = typename K::Layout;
  const auto* m = static_cast<const RowGroups<Layout>*>(a.prepared);
  if (!m || !(m->shape == a.shape)) return not_prepared_for(a.shape);
  const std::int64_t nb = m->blocks;
  const auto* x = static_cast<const BlockQ8K*>(a.x);
  const XMinSums* xm = Layout::kMinPairs ? min_sums_batch(x, nb, a.n) : nullptr;
  return with_vector_count(a.n, [&](auto count) {
    constexpr int N = decltype(count)::value;
    const BlockQ8K* xs[N];
    const XMinSums* xms[N];
    for (int j = 0; j < N; ++j) {
      xs[j] = x + j * nb;
      xms[j] = xm ? xm + j * nb : nullptr;
    }
    for_each_group_batch<N>(*m, a.y, a.threads,
                            [&](const Layout* w, float* const* out) { K::template dot_batch<N>(w, xs, xms, nb, out); });
    return Status::Ok();
  });
}

// The registry records of family K: a matvec with NG streams per thread (needing
// `features`: the AVX2 loops' or, for K's AVX-512 VNNI loops, theirs), or the fused
// up+gate kernel on a repacked pair reading NP groups of each matrix per step.
template <class K, int NG>
constexpr KernelRecord kquant_r8_record(const char* name, const char* description,
                                        std::uint32_t features = kAvx2Features) {
  return interleaved_record<typename K::Layout>(OpKind::MatVec, name, K::kType, ActFormat::Q8_K,
                                                run_kquant_rows<K, NG>, description, features);
}

// The batch kernel of family K: 1 to kMaxBatchVectors vectors per call.
template <class K>
constexpr KernelRecord kquant_r8_batch_record(const char* name, const char* description,
                                              std::uint32_t features = kAvx2Features) {
  KernelRecord r = interleaved_record<typename K::Layout>(OpKind::MatVecBatch, name, K::kType, ActFormat::Q8_K,
                                                          run_kquant_batch<K>, description, features);
  r.max_n = kMaxBatchVectors;
  return r;
}

template <class K, int NP>
constexpr KernelRecord kquant_r8_up_gate_record(const char* name, const char* description,
                                                std::uint32_t features = kAvx2Features) {
  return interleaved_record<typename K::Layout>(OpKind::FusedUpGate, name, K::kType, ActFormat::Q8_K,
                                                run_kquant_row_pair<K, NP>, description, features);
}

}  // namespace
}  // namespace qmv::interleave
