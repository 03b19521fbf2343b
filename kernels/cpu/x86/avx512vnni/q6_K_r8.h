// The loop of the batch kernels of Q6_K weights in the row-interleaved layout x 1 to 8
// Q8_K activations per call, AVX-512 VNNI on 256-bit registers (AVX512VL), one or two
// weight streams per thread (q6_K_r8*_ymm_batch_q8k.cpp), on the copy the AVX2 r8
// kernels read (x86/avx2/q6_K_r8.h): each triple of 32-byte loads unpacked once into
// its four chunks of 6-bit quants, then per vector one vpdpbusd per chunk against the
// vector's quad broadcast from memory, where the AVX2 loop takes a vpmaddubsw per chunk,
// an int16 add per two and a vpmaddwd per two. A sub-block's int32 sums are scaled
// once per quarter (vpmulld by the rows' int8 scales, sign-extended); the -32 offset is
// the AVX2 loop's, one vpmaddwd per two sub-blocks against the vector's block sums.
// Up to four vectors take a quarter in one pass, five to eight in two, the second
// unpacking its triples again from L1.
//
// Bounds: a chunk's lane sums four products of at most 63 * 128; a sub-block's eight
// chunks stay under 2^18, times a scale (<= 128) under 2^25, and sixteen of them, with
// the offset, inside int32 (the AVX2 loop's bounds).
// Included only by the files of this folder (built with -mavx512f/bw/vl/vnni).
#pragma once

#include <cstring>

#include "kernels/cpu/x86/avx2/q6_K_r8.h"  // unpack_triple, scale_pairs16, add_offset, the prefetch

namespace {

using qmv::BlockQ8K;
using qmv::interleave::BlockQ6_Kx8;
using qmv::interleave::XMinSums;

using qmv::interleave::broadcast_quad;

// Quarter g of block b of NG weight streams against M <= 4 vectors, added into
// isum[i][j]: triples 0-1 are sub-blocks 4g (low) and 4g+2 (high), triples 2-3 are 4g+1
// and 4g+3, each pair of triples summed in int32 and scaled once.
template <int NG, int M, qmv::x86::PrefetchTo kTo>
inline void quarter_streams(const BlockQ6_Kx8* const wb[NG], int g, const BlockQ8K* const x[M], std::int64_t b,
                            const std::uintptr_t ahead[NG], bool prefetch, __m256i (&isum)[NG][M]) {
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    __m256i lo[NG][M], hi[NG][M];
    for (int i = 0; i < NG; ++i)
      for (int j = 0; j < M; ++j) lo[i][j] = hi[i][j] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int v = 2 * h; v < 2 * h + 2; ++v) {
      TripleChunks c[NG];
      for (int i = 0; i < NG; ++i) c[i] = unpack_triple(wb[i]->quarter[g].t[v]);
      for (int j = 0; j < M; ++j) {
        const std::int8_t* xq = x[j][b].qs + 64 * g + 8 * v;
        const __m256i x0 = broadcast_quad(xq), x1 = broadcast_quad(xq + 4);
        const __m256i x2 = broadcast_quad(xq + 32), x3 = broadcast_quad(xq + 36);
        for (int i = 0; i < NG; ++i) {
          lo[i][j] = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(lo[i][j], c[i].q0, x0), c[i].q1, x1);
          hi[i][j] = _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(hi[i][j], c[i].q2, x2), c[i].q3, x3);
        }
      }
      if (prefetch)
        for (int i = 0; i < NG; ++i)
          for (int line = 2 * v; line < 2 * v + 2 && line < kLinesPerQuarter; ++line)
            qmv::x86::prefetch_line_after<kTo>(ahead[i] + 64 * (kLinesPerQuarter * g + line), lo[i][0]);
    }
    for (int i = 0; i < NG; ++i) {
      // Lane r: the int16 pair (scale of sub-block 2k, of 2k+1) of row r; h picks one.
      const __m256i pairs_low = scale_pairs16(*wb[i], g, 0), pairs_high = scale_pairs16(*wb[i], g, 1);
      const __m256i scale_lo = h ? _mm256_srai_epi32(pairs_low, 16) : _mm256_srai_epi32(_mm256_slli_epi32(pairs_low, 16), 16);
      const __m256i scale_hi =
          h ? _mm256_srai_epi32(pairs_high, 16) : _mm256_srai_epi32(_mm256_slli_epi32(pairs_high, 16), 16);
      for (int j = 0; j < M; ++j)
        isum[i][j] = _mm256_add_epi32(isum[i][j], _mm256_add_epi32(_mm256_mullo_epi32(lo[i][j], scale_lo),
                                                                     _mm256_mullo_epi32(hi[i][j], scale_hi)));
    }
  }
}

// NG groups (weight streams) against N vectors, into out[i][j][0..7], prefetching to kTo
// (x86.h, PrefetchTo) as far ahead as that level wants.
template <int NG, int N, qmv::x86::PrefetchTo kTo>
void dot_streams(const BlockQ6_Kx8* const w[NG], const BlockQ8K* const x[N], std::int64_t nb,
                 float* const (&out)[NG][N]) {
  constexpr int kFirst = N < 4 ? N : 4, kRest = N > 4 ? N - 4 : 1;
  constexpr int kAhead = qmv::x86::prefetch_ahead_bytes<kTo>(kPrefetchBytes);
  __m256 acc[NG][N];
  for (int i = 0; i < NG; ++i)
    for (int j = 0; j < N; ++j) acc[i][j] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const BlockQ6_Kx8* wb[NG];
    std::uintptr_t ahead[NG];
    for (int i = 0; i < NG; ++i) {
      wb[i] = &w[i][b];
      ahead[i] = reinterpret_cast<std::uintptr_t>(wb[i]) + kAhead;
    }
    __m256i first[NG][kFirst], rest[NG][kRest], offset[NG][N];
    for (int i = 0; i < NG; ++i) {
      for (int j = 0; j < kFirst; ++j) first[i][j] = _mm256_setzero_si256();
      for (int j = 0; j < kRest; ++j) rest[i][j] = _mm256_setzero_si256();
      for (int j = 0; j < N; ++j) offset[i][j] = _mm256_setzero_si256();
    }
#pragma GCC unroll 1
    for (int g = 0; g < 4; ++g) {
      quarter_streams<NG, kFirst, kTo>(wb, g, x, b, ahead, true, first);
      if constexpr (N > 4) quarter_streams<NG, N - 4, kTo>(wb, g, x + 4, b, ahead, false, rest);
      for (int i = 0; i < NG; ++i)
        {
        const __m256i pairs_low = scale_pairs16(*wb[i], g, 0), pairs_high = scale_pairs16(*wb[i], g, 1);
        for (int j = 0; j < N; ++j) offset[i][j] = add_offset(offset[i][j], pairs_low, pairs_high, x[j][b], g);
      }
    }
    for (int i = 0; i < NG; ++i) {
      const __m256 d = qmv::interleave::fp16x8(wb[i]->d);
      for (int j = 0; j < N; ++j) {
        const __m256i dot = _mm256_sub_epi32(j < 4 ? first[i][j] : rest[i][j - 4], _mm256_slli_epi32(offset[i][j], 5));
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(d, _mm256_set1_ps(x[j][b].d)), acc[i][j]);
      }
    }
  }
  for (int i = 0; i < NG; ++i)
    for (int j = 0; j < N; ++j) _mm256_storeu_ps(out[i][j], acc[i][j]);
}

// The batch op on NG weight streams per thread (for_each_group_streams_batch).
template <int NG, qmv::x86::PrefetchTo kTo>
qmv::Status run_streams(const qmv::MatVecArgs& a) {
  using Layout = BlockQ6_Kx8;
  const auto* m = static_cast<const qmv::interleave::RowGroups<Layout>*>(a.prepared);
  if (!m || !(m->shape == a.shape)) return qmv::interleave::not_prepared_for(a.shape);
  const std::int64_t nb = m->blocks;
  const auto* x = static_cast<const BlockQ8K*>(a.x);
  return qmv::interleave::with_vector_count(a.n, [&](auto count) {
    constexpr int N = decltype(count)::value;
    const BlockQ8K* xs[N];
    for (int j = 0; j < N; ++j) xs[j] = x + j * nb;
    qmv::interleave::for_each_group_streams_batch<NG, N>(
        *m, a.y, a.threads, [&](auto streams, const Layout* const* w, auto& out) {
          dot_streams<decltype(streams)::value, N, kTo>(w, xs, nb, out);
        });
    return qmv::Status::Ok();
  });
}

template <int NG, qmv::x86::PrefetchTo kTo = qmv::x86::PrefetchTo::L1>
constexpr qmv::KernelRecord ymm_batch_record(const char* name, const char* description) {
  qmv::KernelRecord r = qmv::interleave::interleaved_record<BlockQ6_Kx8>(
      qmv::OpKind::MatVecBatch, name, qmv::WeightType::Q6_K, qmv::ActFormat::Q8_K, run_streams<NG, kTo>, description,
      qmv::interleave::kAvx512VnniFeatures);
  r.max_n = qmv::interleave::kMaxBatchVectors;
  return r;
}

}  // namespace
