// The loop of the batch kernels of the legacy types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) in
// the row-interleaved layouts x 1 to 8 Q8_1 activations per call, AVX-512 VNNI on
// 256-bit registers (AVX512VL), one or two weight streams per thread
// (<type>_r8*_ymm_batch_q8_1.cpp), on the copies the AVX2 r8 kernels read
// (x86/avx2/legacy_r8.h): each 32-byte chunk loaded and unpacked once (nibbles; Q5's
// whole quants with the block's top bits; Q8_0's signed quants flipped to q + 128),
// then one vpdpbusd per chunk half and vector against the vector's quad broadcast from
// memory, into an int32 block dot that starts at the activation's offset term
// (-zero * sum(q_x), -128 * sum(q_x) for Q8_0: exact for every input). Up to four
// vectors take a block in one pass, five to eight in two, the second reading the
// block's chunks again from L1.
//
// Bounds: a block dot sums 32 products of at most 255 * 128 per lane, far inside int32,
// and its offset is at most 32 * 128 * 128.
// Included only by the files of this folder (built with -mavx512f/bw/vl/vnni).
#pragma once

#include <cstring>

#include "r8.h"  // the 512-bit kernels' stored_zero and row_scales, and x86/avx2/legacy_r8.h

namespace {

using qmv::BlockQ8_1;
using qmv::interleave::XBlockInfo;

// As the 512-bit kernels: each stream prefetches the block this many blocks ahead.
using qmv::interleave::vnni::kLegacyPrefetchBlocks;
using qmv::interleave::broadcast_quad;
using qmv::interleave::vnni::kIsQ8_0;
using qmv::interleave::vnni::row_scales;
using qmv::interleave::vnni::stored_zero;

// Block b of NG streams against M <= 4 vectors, added into acc[i][j].
template <class Layout, int NG, int M>
inline void block_streams(const Layout* const wb[NG], const BlockQ8_1* const x[M], const XBlockInfo* const xi[M],
                          std::int64_t b, __m256 (&acc)[NG][M]) {
  __m256i dot[NG][M];
  for (int j = 0; j < M; ++j) {
    const __m256i offset = _mm256_set1_epi32(xi[j][b].offset);
    for (int i = 0; i < NG; ++i) dot[i][j] = offset;
  }
  if constexpr (kIsQ8_0<Layout>) {
    const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      __m256i q[NG];
      for (int i = 0; i < NG; ++i)
        q[i] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb[i]->qs[c])), flip);
      for (int j = 0; j < M; ++j) {
        const __m256i xq = broadcast_quad(x[j][b].qs + 4 * c);
        for (int i = 0; i < NG; ++i) dot[i][j] = _mm256_dpbusd_epi32(dot[i][j], q[i], xq);
      }
    }
  } else {
    __m256i top[NG];
    for (int i = 0; i < NG; ++i) {
      top[i] = _mm256_setzero_si256();
      if constexpr (Layout::kFifthBits) top[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb[i]->top));
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      __m256i lo[NG], hi[NG];
      for (int i = 0; i < NG; ++i) qmv::interleave::chunk_quants(*wb[i], c, top[i], lo[i], hi[i]);
      for (int j = 0; j < M; ++j) {
        const __m256i x_lo = broadcast_quad(x[j][b].qs + 4 * c), x_hi = broadcast_quad(x[j][b].qs + 16 + 4 * c);
        for (int i = 0; i < NG; ++i)
          dot[i][j] = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(dot[i][j], lo[i], x_lo), hi[i], x_hi);
      }
    }
  }
  for (int i = 0; i < NG; ++i) {
    const __m256 d = row_scales(*wb[i]);
    for (int j = 0; j < M; ++j) {
      acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[i][j]), _mm256_mul_ps(d, _mm256_set1_ps(xi[j][b].d)),
                                  acc[i][j]);
      if constexpr (!kIsQ8_0<Layout>) {
        if constexpr (Layout::kHasMin)
          acc[i][j] = _mm256_fmadd_ps(qmv::interleave::fp16x8(wb[i]->m), _mm256_set1_ps(xi[j][b].d_sum), acc[i][j]);
      }
    }
  }
}

// NG groups (weight streams) against N vectors, into out[i][j][0..7].
template <class Layout, int NG, int N, qmv::x86::PrefetchTo kTo>
void dot_streams(const Layout* const w[NG], const BlockQ8_1* const x[N], const XBlockInfo* const xi[N],
                 std::int64_t nb, float* const (&out)[NG][N]) {
  constexpr int kFirst = N < 4 ? N : 4, kRest = N > 4 ? N - 4 : 1;
  __m256 first[NG][kFirst], rest[NG][kRest];
  for (int i = 0; i < NG; ++i) {
    for (int j = 0; j < kFirst; ++j) first[i][j] = _mm256_setzero_ps();
    for (int j = 0; j < kRest; ++j) rest[i][j] = _mm256_setzero_ps();
  }
  for (std::int64_t b = 0; b < nb; ++b) {
    const Layout* wb[NG];
    for (int i = 0; i < NG; ++i) {
      wb[i] = &w[i][b];
      const auto ahead = reinterpret_cast<std::uintptr_t>(wb[i] + kLegacyPrefetchBlocks);
      for (std::uintptr_t line = 0; line < sizeof(Layout); line += 64) qmv::x86::prefetch_line<kTo>(ahead + line);
    }
    block_streams<Layout, NG, kFirst>(wb, x, xi, b, first);
    if constexpr (N > 4) block_streams<Layout, NG, N - 4>(wb, x + 4, xi + 4, b, rest);
  }
  for (int i = 0; i < NG; ++i)
    for (int j = 0; j < N; ++j) _mm256_storeu_ps(out[i][j], j < 4 ? first[i][j] : rest[i][j - 4]);
}

// The batch op on NG weight streams per thread (for_each_group_streams_batch).
template <class Layout, int NG, qmv::x86::PrefetchTo kTo>
qmv::Status run_streams(const qmv::MatVecArgs& a) {
  const auto* m = static_cast<const qmv::interleave::RowGroups<Layout>*>(a.prepared);
  if (!m || !(m->shape == a.shape)) return qmv::interleave::not_prepared_for(a.shape);
  const std::int64_t nb = m->blocks;
  const auto* x = static_cast<const BlockQ8_1*>(a.x);
  const XBlockInfo* xi = qmv::interleave::activation_info_batch(x, nb, a.n, stored_zero<Layout>());
  return qmv::interleave::with_vector_count(a.n, [&](auto count) {
    constexpr int N = decltype(count)::value;
    const BlockQ8_1* xs[N];
    const XBlockInfo* xis[N];
    for (int j = 0; j < N; ++j) xs[j] = x + j * nb, xis[j] = xi + j * nb;
    qmv::interleave::for_each_group_streams_batch<NG, N>(
        *m, a.y, a.threads, [&](auto streams, const Layout* const* w, auto& out) {
          dot_streams<Layout, decltype(streams)::value, N, kTo>(w, xs, xis, nb, out);
        });
    return qmv::Status::Ok();
  });
}

template <class Layout, int NG, qmv::x86::PrefetchTo kTo = qmv::x86::PrefetchTo::L1>
constexpr qmv::KernelRecord ymm_batch_record(qmv::WeightType type, const char* name, const char* description) {
  qmv::KernelRecord r = qmv::interleave::interleaved_record<Layout>(
      qmv::OpKind::MatVecBatch, name, type, qmv::ActFormat::Q8_1, run_streams<Layout, NG, kTo>, description,
      qmv::interleave::kAvx512VnniFeatures);
  r.max_n = qmv::interleave::kMaxBatchVectors;
  return r;
}

}  // namespace
