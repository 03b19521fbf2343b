// The loop of the AVX2 kernels of Q8_0 weights in the row-interleaved layout
// (row_interleaved.h) x Q8_1 activations (q8_0_r8*_q8_1.cpp, a file per stream count
// and fused form; the batch kernel, q8_0_r8_batch_q8_1.cpp, has a loop of its own):
// eight rows per step. Signed x signed bytes have no vpmaddubsw form that is exact for
// every input: stored unsigned (q + 128) the quants overflow its int16 pairs, and the
// sign trick (|w| against x * sign(w)) wraps on a -128 activation.
//
// The int16 path (avx2_r8, avx2_r8x2, avx2_r8_up_gate) is exact for any input: a
// 32-byte chunk (four quants of each of the eight rows) widens to two registers, rows
// 0-3 and 4-7, and vpmaddwd against four activation quants (widened once per call,
// broadcast as one 64-bit pattern) leaves two int32 partial dots per row. One vphaddd
// per block folds the pairs, leaving the rows in the order 0 1 4 5 2 3 6 7, the order
// the repack stored their scales in; the outputs are put back in row order once per
// group.
//
// The sign-trick path (the four-stream avx2_r8x4 and avx2_r8x2_up_gate) takes half the
// instructions: per chunk one vpmaddubsw of |w| against x * sign(w) and one vpmaddwd
// against ones leave row r's four-weight dot in lane r. A call whose activation holds a -128 (which the Q8_1
// quantizers never emit, but the format allows) takes the int16 path instead. Its
// four weight streams per thread prefetch as the int16 path's, one line per chunk
// (prefetch_chunk_line): in huge pages the hardware prefetcher alone keeps too few
// misses in flight (results/intel-xeon-2c-isa-avx2-fma-f16c/r8x4-prefetch.csv; in
// 4 KiB pages it was enough, results/amd-zen3-2c/q8_0-r8-sign-trick.csv).
//
// Bounds: a vpmaddwd lane of the int16 path is at most 2 * 128 * 128 = 32768, eight
// chunks' sum 2^18; a vpmaddubsw pair of the sign path at most 2 * 128 * 127 =
// 32512 < 2^15, a block's dot 2^19: far inside int32 and exact in float.
// Included only by those kernels' files, built with -mavx2 -mfma -mf16c.
#pragma once

#include "r8.h"

#include <cstdint>
#include <cstring>

#include "kernel.h"
#include "kernels/cpu_tiling.h"
#include "kernels/cpu/row_interleaved.h"

namespace {

using qmv::interleave::BlockQ8_0x8;
using qmv::interleave::broadcast_quad;
using qmv::interleave::kGroupRows;

// A block of activation quants as int16, and its scale.
struct alignas(64) XBlock16 {
  std::int16_t q[qmv::kQ8_1Block];
  float d;
};

// How far ahead of the block being read each weight stream is prefetched, in
// interleaved blocks (272 bytes each).
constexpr int kPrefetchBlocks = 8;

inline __m256i broadcast_four(const std::int16_t* q) {
  std::int64_t v;
  std::memcpy(&v, q, sizeof(v));
  return _mm256_set1_epi64x(v);
}

template <int NG>
void dot_groups(const BlockQ8_0x8* const w[NG], const XBlock16* x, std::int64_t nb, float* const out[NG]) {
  __m256 acc[NG];
  for (int i = 0; i < NG; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const XBlock16& xb = x[b];
    const __m256 dx = _mm256_set1_ps(xb.d);
    for (int i = 0; i < NG; ++i) {
      const BlockQ8_0x8& wb = w[i][b];
      const std::uintptr_t ahead = reinterpret_cast<std::uintptr_t>(w[i] + b + kPrefetchBlocks);
      for (int line = 0; line < 5; ++line) qmv::x86::prefetch_line(ahead + 64 * line);
      __m256i rows03 = _mm256_setzero_si256(), rows47 = _mm256_setzero_si256();
      for (int c = 0; c < 8; ++c) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs[c]));
        const __m256i xq = broadcast_four(xb.q + 4 * c);
        rows03 = _mm256_add_epi32(rows03, _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(v)), xq));
        rows47 = _mm256_add_epi32(rows47, _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1)), xq));
      }
      const __m256i dot = _mm256_hadd_epi32(rows03, rows47);  // rows 0 1 4 5 | 2 3 6 7
      const __m256 d = _mm256_mul_ps(qmv::interleave::fp16x8(wb.d), dx);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), d, acc[i]);
    }
  }
  const __m256i to_row_order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
  for (int i = 0; i < NG; ++i) _mm256_storeu_ps(out[i], _mm256_permutevar8x32_ps(acc[i], to_row_order));
}

// The sign-trick path (no activation quant -128): NG groups into out[i][0..7], each
// activation quad broadcast once for all of them.
template <int NG>
void dot_groups_sign(const BlockQ8_0x8* const w[NG], const qmv::BlockQ8_1* x, std::int64_t nb, float* const out[NG]) {
  const __m256i ones = _mm256_set1_epi16(1);
  // The stored scales' order (kDOrder) back to row order; the permutation is its own
  // inverse.
  const __m256i from_d_order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
  __m256 acc[NG];
  for (int i = 0; i < NG; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const qmv::BlockQ8_1& xb = x[b];
    __m256i dot[NG];
    for (int i = 0; i < NG; ++i) dot[i] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const __m256i xq = broadcast_quad(xb.qs + 4 * c);
      for (int i = 0; i < NG; ++i) {
        qmv::interleave::prefetch_chunk_line<BlockQ8_0x8, 8, kPrefetchBlocks>(w[i] + b, c, dot[i]);
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i][b].qs[c]));
        const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(v), _mm256_sign_epi8(xq, v));
        dot[i] = _mm256_add_epi32(dot[i], _mm256_madd_epi16(pairs, ones));
      }
    }
    const __m256 dx = _mm256_set1_ps(_cvtsh_ss(xb.d));
    for (int i = 0; i < NG; ++i) {
      const __m256 d = _mm256_permutevar8x32_ps(
          qmv::interleave::fp16x8(w[i][b].d), from_d_order);
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[i]), _mm256_mul_ps(d, dx), acc[i]);
    }
  }
  for (int i = 0; i < NG; ++i) _mm256_storeu_ps(out[i], acc[i]);
}

// Whether any activation quant is -128 (the sign trick's one failing value).
inline bool has_minus_128(const qmv::BlockQ8_1* x, std::int64_t nb) {
  const __m256i m128 = _mm256_set1_epi8(-128);
  __m256i any = _mm256_setzero_si256();
  for (std::int64_t b = 0; b < nb; ++b)
    any = _mm256_or_si256(any, _mm256_cmpeq_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs)), m128));
  return !_mm256_testz_si256(any, any);
}

// `blocks` Q8_1 activation blocks widened to int16 (a batch call's n vectors back to
// back: n times the blocks of one), in per-thread scratch.
inline const XBlock16* widened_activation(const void* activation, std::int64_t blocks) {
  const auto* xq = static_cast<const qmv::BlockQ8_1*>(activation);
  auto* x = static_cast<XBlock16*>(qmv::thread_scratch(static_cast<std::size_t>(blocks) * sizeof(XBlock16)));
  for (std::int64_t b = 0; b < blocks; ++b) {
    for (int i = 0; i < qmv::kQ8_1Block; ++i) x[b].q[i] = xq[b].qs[i];
    x[b].d = _cvtsh_ss(xq[b].d);
  }
  return x;
}

template <int NG, bool SignTrick = false>
qmv::Status run(const qmv::MatVecArgs& a) {
  const auto* m = static_cast<const qmv::interleave::Q8_0x8Matrix*>(a.prepared);
  if (!m || !(m->shape == a.shape)) return qmv::interleave::not_prepared_for(a.shape);
  const std::int64_t nb = m->blocks;
  const auto* xq = static_cast<const qmv::BlockQ8_1*>(a.x);
  if (SignTrick && !has_minus_128(xq, nb)) {
    qmv::interleave::for_each_group<NG>(*m, a.y, a.threads,
                                        [&](auto count, const BlockQ8_0x8* const* w, float* const* out) {
                                          dot_groups_sign<decltype(count)::value>(w, xq, nb, out);
                                        });
    return qmv::Status::Ok();
  }
  const XBlock16* x = widened_activation(a.x, nb);
  qmv::interleave::for_each_group<NG>(*m, a.y, a.threads,
                                      [&](auto count, const BlockQ8_0x8* const* w, float* const* out) {
                                        dot_groups<decltype(count)::value>(w, x, nb, out);
                                      });
  return qmv::Status::Ok();
}

// Fused up+gate, NP groups of each matrix per step: the int16 path, or for four streams
// the sign-trick path as the matvec's (an activation holding -128 takes the int16 one).
template <int NP, bool SignTrick = false>
qmv::Status run_up_gate(const qmv::MatVecArgs& a) {
  const auto* p = static_cast<const qmv::interleave::RowGroupPair<BlockQ8_0x8>*>(a.prepared);
  if (!p || !(p->first.shape == a.shape)) return qmv::interleave::not_prepared_for(a.shape);
  const std::int64_t nb = p->first.blocks;
  const auto* xq = static_cast<const qmv::BlockQ8_1*>(a.x);
  if (SignTrick && !has_minus_128(xq, nb)) {
    qmv::interleave::for_each_group_pair<NP>(*p, a.y, a.y2, a.threads,
                                             [&](auto count, const BlockQ8_0x8* const* w, float* const* out) {
                                               dot_groups_sign<decltype(count)::value>(w, xq, nb, out);
                                             });
    return qmv::Status::Ok();
  }
  const XBlock16* x = widened_activation(a.x, nb);
  qmv::interleave::for_each_group_pair<NP>(*p, a.y, a.y2, a.threads,
                                           [&](auto count, const BlockQ8_0x8* const* w, float* const* out) {
                                             dot_groups<decltype(count)::value>(w, x, nb, out);
                                           });
  return qmv::Status::Ok();
}

template <int NG, bool SignTrick = false>
qmv::KernelRecord record(const char* name, const char* description) {
  return qmv::interleave::interleaved_record<BlockQ8_0x8>(qmv::OpKind::MatVec, name, qmv::WeightType::Q8_0,
                                                   qmv::ActFormat::Q8_1, run<NG, SignTrick>, description);
}

}  // namespace
