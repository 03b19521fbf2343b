// Q8_0 weights in the row-interleaved layout x 1 to 8 Q8_1 activations per call (the
// batch op), AVX2: the copy avx2_r8_q8_1 reads, one weight stream per thread, on its
// int16 path (q8_0_r8_q8_1.cpp), exact for every input. A chunk widens once to two
// registers (rows 0-3 and 4-7) and each vector's four quants, widened once per call,
// meet them in two vpmaddwd: per vector as many operations as the sign trick's
// vpsignb, vpmaddubsw, vpmaddwd and add, without its -128 exception. Two int32 sums per
// vector fit the 16 registers for four vectors; five to eight take the block in two
// passes of at most four, the second reading the chunks again from L1.
#include "q8_0_r8.h"

namespace {

// Block wb against the M vectors x[j] (their block b), added into acc[j]; the rows in
// the order 0 1 4 5 2 3 6 7 that vphaddd leaves and the scales are stored in.
template <int M>
inline void block_dots(const BlockQ8_0x8& wb, const XBlock16* const x[M], std::int64_t b, __m256 d, __m256 acc[M]) {
  __m256i rows03[M], rows47[M];
  for (int j = 0; j < M; ++j) rows03[j] = rows47[j] = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs[c]));
    const __m256i w03 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v));
    const __m256i w47 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1));
    for (int j = 0; j < M; ++j) {
      const __m256i xq = broadcast_four(x[j][b].q + 4 * c);
      rows03[j] = _mm256_add_epi32(rows03[j], _mm256_madd_epi16(w03, xq));
      rows47[j] = _mm256_add_epi32(rows47[j], _mm256_madd_epi16(w47, xq));
    }
  }
  for (int j = 0; j < M; ++j) {
    const __m256i dot = _mm256_hadd_epi32(rows03[j], rows47[j]);
    acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(d, _mm256_set1_ps(x[j][b].d)), acc[j]);
  }
}

template <int N>
void dot_batch(const BlockQ8_0x8* w, const XBlock16* const x[N], std::int64_t nb, float* const out[N]) {
  constexpr int kFirst = N < 4 ? N : 4;
  __m256 acc[N];
  for (int j = 0; j < N; ++j) acc[j] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const BlockQ8_0x8& wb = w[b];
    const std::uintptr_t ahead = reinterpret_cast<std::uintptr_t>(w + b + kPrefetchBlocks);
    for (int line = 0; line < 5; ++line) qmv::x86::prefetch_line(ahead + 64 * line);
    const __m256 d = qmv::interleave::fp16x8(wb.d);
    block_dots<kFirst>(wb, x, b, d, acc);
    if constexpr (N > 4) block_dots<N - 4>(wb, x + 4, b, d, acc + 4);
  }
  const __m256i to_row_order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
  for (int j = 0; j < N; ++j) _mm256_storeu_ps(out[j], _mm256_permutevar8x32_ps(acc[j], to_row_order));
}

qmv::Status run_batch(const qmv::MatVecArgs& a) {
  const auto* m = static_cast<const qmv::interleave::Q8_0x8Matrix*>(a.prepared);
  if (!m || !(m->shape == a.shape)) return qmv::interleave::not_prepared_for(a.shape);
  const std::int64_t nb = m->blocks;
  // Every vector's quants widened to int16 once per call.
  const XBlock16* x16 = widened_activation(a.x, nb * a.n);
  return qmv::interleave::with_vector_count(a.n, [&](auto count) {
    constexpr int N = decltype(count)::value;
    const XBlock16* xs[N];
    for (int j = 0; j < N; ++j) xs[j] = x16 + j * nb;
    qmv::interleave::for_each_group_batch<N>(
        *m, a.y, a.threads, [&](const BlockQ8_0x8* w, float* const* out) { dot_batch<N>(w, xs, nb, out); });
    return qmv::Status::Ok();
  });
}

// Built at compile time, as the AVX-512 folder's records: nothing of this file runs
// before main on a CPU without AVX2.
constexpr qmv::KernelRecord batch_record() {
  qmv::KernelRecord r = qmv::interleave::interleaved_record<BlockQ8_0x8>(
      qmv::OpKind::MatVecBatch, "q8_0.cpu.avx2_r8_batch_q8_1", qmv::WeightType::Q8_0, qmv::ActFormat::Q8_1,
      run_batch,
      "Q8_0 x 1-8 Q8_1 vectors (batch), AVX2, eight-row interleaved blocks as avx2_r8_q8_1: each chunk "
      "widened to int16 once, then two vpmaddwd per vector");
  r.max_n = qmv::interleave::kMaxBatchVectors;
  return r;
}

}  // namespace

namespace {
constexpr qmv::KernelRecord kBatch = batch_record();
}  // namespace

QMV_REGISTER_KERNEL(kBatch);
