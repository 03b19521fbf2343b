// The loop of the batch kernels of Q4_K weights in the row-interleaved layout x 1 to 8
// Q8_K activations per call, AVX-512 VNNI on 256-bit registers (AVX512VL), one or two
// weight streams per thread (q4_K_r8*_ymm_batch_q8k.cpp): the copy the AVX2 r8 kernels
// read, each 32-byte chunk loaded and its nibbles unpacked once, then one vpdpbusd per
// half and vector against the vector's activation quad broadcast from memory.
//
// Where the 512-bit batch kernel (q4_K_r8_batch_q8k.cpp) holds two chunks per register
// and must permute each vector's quads to match them, a chunk here is one register of
// eight rows x four weights, so its quad is a plain 32-bit broadcast, a load with no
// shuffle; per chunk and vector that leaves two vpdpbusd, where the AVX2 loop takes two
// vpmaddubsw and two int16 adds. Two streams share each broadcast between two chunks,
// half the activation loads per vpdpbusd (results/amd-zen4-2c/bench-batch-ymm-q4_K.csv
// has both against the AVX2 batch kernel). Up to four vectors take a quarter in one
// pass, their 2 x 2 x 4 int32 sums in the 32 registers AVX512VL gives; five to eight
// take two passes, the second reading its chunks again from L1.
// Included only by the files of this folder (built with -mavx512f/bw/vl/vnni).
#pragma once

#include "kernels/cpu/x86/avx2/kquant_r8.h"

namespace {

using qmv::BlockQ8K;
using qmv::interleave::BlockQ4_Kx8;
using qmv::interleave::XMinSums;

// As the AVX2 r8 kernels (x86/avx2/q4_K_r8.h): each quarter of a super-block prefetches
// five lines 2048 bytes ahead into L1, one after each of its first five chunks (the
// _l2pf kernels: into L2, x86.h prefetch_ahead_bytes ahead).
constexpr int kPrefetchBytes = 2048;
constexpr int kLinesPerQuarter = 5;

// Eight rows' 6-bit sub-block scales as int32 lanes.
inline __m256i scales_int32(const std::uint8_t* eight) {
  std::int64_t v;
  std::memcpy(&v, eight, sizeof(v));
  return _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(v));
}

using qmv::interleave::broadcast_quad;

// Quarter g of block b of NG weight streams (groups w[i]) against M <= 4 vectors,
// added into isum[i][j]: each broadcast quad meets the chunks of every stream.
template <int NG, int M, qmv::x86::PrefetchTo kTo>
inline void quarter_streams(const BlockQ4_Kx8* const wb[NG], int g, const BlockQ8K* const x[M], std::int64_t b,
                            const std::uintptr_t ahead[NG], bool prefetch, __m256i (&isum)[NG][M]) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  __m256i lo[NG][M], hi[NG][M];
  for (int i = 0; i < NG; ++i)
    for (int j = 0; j < M; ++j) lo[i][j] = hi[i][j] = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) {
    __m256i low[NG], high[NG];
    for (int i = 0; i < NG; ++i) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb[i]->qs[g][c]));
      low[i] = _mm256_and_si256(v, m4);
      high[i] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
    for (int j = 0; j < M; ++j) {
      const std::int8_t* xq = x[j][b].qs + 64 * g + 4 * c;
      const __m256i x_lo = broadcast_quad(xq), x_hi = broadcast_quad(xq + 32);
      for (int i = 0; i < NG; ++i) {
        lo[i][j] = _mm256_dpbusd_epi32(lo[i][j], low[i], x_lo);
        hi[i][j] = _mm256_dpbusd_epi32(hi[i][j], high[i], x_hi);
      }
    }
    if (prefetch && c < kLinesPerQuarter)
      for (int i = 0; i < NG; ++i)
        qmv::x86::prefetch_line_after<kTo>(ahead[i] + 64 * (kLinesPerQuarter * g + c), lo[i][0]);
  }
  for (int i = 0; i < NG; ++i) {
    const __m256i scale_lo = scales_int32(wb[i]->scales[2 * g]), scale_hi = scales_int32(wb[i]->scales[2 * g + 1]);
    for (int j = 0; j < M; ++j)
      isum[i][j] = _mm256_add_epi32(isum[i][j], _mm256_add_epi32(_mm256_mullo_epi32(lo[i][j], scale_lo),
                                                                   _mm256_mullo_epi32(hi[i][j], scale_hi)));
  }
}

// NG groups (weight streams) against N vectors, into out[i][j][0..7]; five to eight
// vectors take each quarter in two passes, the second reading its chunks from L1. The
// prefetches go to kTo (x86.h, PrefetchTo), as far ahead as that level wants.
template <int NG, int N, qmv::x86::PrefetchTo kTo>
void dot_streams(const BlockQ4_Kx8* const w[NG], const BlockQ8K* const x[N], const XMinSums* const xm[N],
                 std::int64_t nb, float* const (&out)[NG][N]) {
  constexpr int kFirst = N < 4 ? N : 4;
  constexpr int kAhead = qmv::x86::prefetch_ahead_bytes<kTo>(kPrefetchBytes);
  __m256 acc[NG][N];
  for (int i = 0; i < NG; ++i)
    for (int j = 0; j < N; ++j) acc[i][j] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const BlockQ4_Kx8* wb[NG];
    std::uintptr_t ahead[NG];
    for (int i = 0; i < NG; ++i) {
      wb[i] = &w[i][b];
      ahead[i] = reinterpret_cast<std::uintptr_t>(wb[i]) + kAhead;
    }
    __m256i first[NG][kFirst];
    __m256i rest[NG][N > 4 ? N - 4 : 1];
    for (int i = 0; i < NG; ++i) {
      for (int j = 0; j < kFirst; ++j) first[i][j] = _mm256_setzero_si256();
      for (int j = 0; j < (N > 4 ? N - 4 : 1); ++j) rest[i][j] = _mm256_setzero_si256();
    }
#pragma GCC unroll 1
    for (int g = 0; g < 4; ++g) {
      quarter_streams<NG, kFirst, kTo>(wb, g, x, b, ahead, true, first);
      if constexpr (N > 4) quarter_streams<NG, N - 4, kTo>(wb, g, x + 4, b, ahead, false, rest);
    }
    for (int i = 0; i < NG; ++i)
      for (int j = 0; j < N; ++j)
        acc[i][j] = qmv::interleave::add_block_with_mins(acc[i][j], j < 4 ? first[i][j] : rest[i][j - 4], *wb[i],
                                                         xm[j][b], _mm256_set1_ps(x[j][b].d));
  }
  for (int i = 0; i < NG; ++i)
    for (int j = 0; j < N; ++j) _mm256_storeu_ps(out[i][j], acc[i][j]);
}

// The batch op on NG weight streams per thread (for_each_group_streams_batch).
template <int NG, qmv::x86::PrefetchTo kTo>
qmv::Status run_streams(const qmv::MatVecArgs& a) {
  using Layout = BlockQ4_Kx8;
  const auto* m = static_cast<const qmv::interleave::RowGroups<Layout>*>(a.prepared);
  if (!m || !(m->shape == a.shape)) return qmv::interleave::not_prepared_for(a.shape);
  const std::int64_t nb = m->blocks;
  const auto* x = static_cast<const BlockQ8K*>(a.x);
  const XMinSums* xm = qmv::interleave::min_sums_batch(x, nb, a.n);
  return qmv::interleave::with_vector_count(a.n, [&](auto count) {
    constexpr int N = decltype(count)::value;
    const BlockQ8K* xs[N];
    const XMinSums* xms[N];
    for (int j = 0; j < N; ++j) xs[j] = x + j * nb, xms[j] = xm + j * nb;
    qmv::interleave::for_each_group_streams_batch<NG, N>(
        *m, a.y, a.threads, [&](auto streams, const Layout* const* w, auto& out) {
          dot_streams<decltype(streams)::value, N, kTo>(w, xs, xms, nb, out);
        });
    return qmv::Status::Ok();
  });
}

template <int NG, qmv::x86::PrefetchTo kTo = qmv::x86::PrefetchTo::L1>
constexpr qmv::KernelRecord ymm_batch_record(const char* name, const char* description) {
  qmv::KernelRecord r = qmv::interleave::interleaved_record<BlockQ4_Kx8>(
      qmv::OpKind::MatVecBatch, name, qmv::WeightType::Q4_K, qmv::ActFormat::Q8_K, run_streams<NG, kTo>, description,
      qmv::interleave::kAvx512VnniFeatures);
  r.max_n = qmv::interleave::kMaxBatchVectors;
  return r;
}

}  // namespace
