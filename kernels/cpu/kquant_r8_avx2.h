// What the AVX2 kernels of the row-interleaved K-quant layouts (Q4_K, Q5_K, Q6_K in
// row_interleaved.h) x Q8_K share: the activation broadcasts, the eight rows' scales
// as int16 pairs, and the per-call activation sums their min term multiplies.
// Included only by files built with -mavx2 -mfma -mf16c; internal linkage.
#pragma once

#include "x86_common.h"

#include <cstdint>
#include <cstring>

#include "kernel.h"
#include "kernels/cpu_tiling.h"
#include "row_interleaved.h"

namespace qmv::interleave {
namespace {

// Four activation quants in every 32-bit lane.
inline __m256i broadcast_quad(const std::int8_t* q) {
  std::int32_t v;
  std::memcpy(&v, q, sizeof(v));
  return _mm256_set1_epi32(v);
}

// The eight rows' fp16 values as eight floats, row r in lane r.
inline __m256 fp16x8(const fp16_bits* h) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
}

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

// The min term of one pair of sub-blocks of eight rows: the rows' two mins (widened
// to int16) against the activation's two sub-block sums, in int32 lane r.
inline __m256i min_term(const std::uint8_t* min_pairs16, std::int32_t x_pair) {
  const __m256i mins = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(min_pairs16)));
  return _mm256_madd_epi16(mins, _mm256_set1_epi32(x_pair));
}

// The matvec (NG weight streams per thread) and fused up+gate runs of a K-quant
// layout: the prepared matrix or pair checked against the call's shape, the
// activation's min sums made once per call for a layout with mins (else xm is null),
// then dot(count, w, x, xm, nb, out) for
// each step's `count` groups.
template <int NG, class Layout, class Dot>
Status run_kquant_rows(const MatVecArgs& a, Dot&& dot) {
  const auto* m = static_cast<const RowGroups<Layout>*>(a.prepared);
  if (!m || !(m->shape == a.shape)) return not_prepared_for(a.shape);
  const std::int64_t nb = m->blocks;
  const auto* x = static_cast<const BlockQ8K*>(a.x);
  const XMinSums* xm = Layout::kMinPairs ? min_sums(x, nb) : nullptr;
  for_each_group<NG>(*m, a.y, a.threads,
                     [&](auto count, const Layout* const* w, float* const* out) { dot(count, w, x, xm, nb, out); });
  return Status::Ok();
}

template <class Layout, class Dot>
Status run_kquant_row_pair(const MatVecArgs& a, Dot&& dot) {
  const auto* p = static_cast<const RowGroupPair<Layout>*>(a.prepared);
  if (!p || !(p->first.shape == a.shape)) return not_prepared_for(a.shape);
  const std::int64_t nb = p->first.blocks;
  const auto* x = static_cast<const BlockQ8K*>(a.x);
  const XMinSums* xm = Layout::kMinPairs ? min_sums(x, nb) : nullptr;
  for_each_group_pair(*p, a.y, a.y2, a.threads,
                      [&](auto count, const Layout* const* w, float* const* out) { dot(count, w, x, xm, nb, out); });
  return Status::Ok();
}

}  // namespace
}  // namespace qmv::interleave
