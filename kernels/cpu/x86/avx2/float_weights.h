// The row loops shared by the x86 kernels of the float weight types (f16, bf16, f32
// files of this folder): the weights are widened to f32 eight at a time in registers and FMA'd
// into independent accumulators (enough to cover the FMA latency), with one horizontal
// sum per row; a tail of fewer than eight columns is done one value at a time. One row
// at a time (dot_row), or four rows of far-apart parts of a tile at once (dot_rows).
// Everything has internal linkage, so files built with different ISA flags never share
// (or pick up) one another's copy.
#pragma once

#include "kernels/cpu/x86/x86.h"

#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace qmv::float_x86 {
namespace {

// How far ahead the weight stream is prefetched, in bytes (one prefetch per cache
// line): the hardware prefetchers alone leave one stream below the read peak. Of 256 to
// 4096, 512 was best or within noise of it for all three types, and 2048 and 4096 lost
// (results/amd-zen3-2c/float-prefetch.csv); the read peak's own winning loops prefetch
// 512 bytes ahead too.
inline constexpr std::uintptr_t kPrefetchBytes = 512;

// Load8: eight weights from w as floats. Load1: one.
template <class Weight, __m256 (*Load8)(const Weight*), float (*Load1)(const Weight*)>
float dot_row(const Weight* w, const float* x, std::int64_t cols) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
  std::int64_t i = 0;
  for (; i + 32 <= cols; i += 32) {
    for (std::uintptr_t line = 0; line < 32 * sizeof(Weight); line += 64)
      x86::prefetch_line(reinterpret_cast<std::uintptr_t>(w + i) + kPrefetchBytes + line);
    acc0 = _mm256_fmadd_ps(Load8(w + i), _mm256_loadu_ps(x + i), acc0);
    acc1 = _mm256_fmadd_ps(Load8(w + i + 8), _mm256_loadu_ps(x + i + 8), acc1);
    acc2 = _mm256_fmadd_ps(Load8(w + i + 16), _mm256_loadu_ps(x + i + 16), acc2);
    acc3 = _mm256_fmadd_ps(Load8(w + i + 24), _mm256_loadu_ps(x + i + 24), acc3);
  }
  for (; i + 8 <= cols; i += 8) acc0 = _mm256_fmadd_ps(Load8(w + i), _mm256_loadu_ps(x + i), acc0);
  float sum = x86::hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  for (; i < cols; ++i) sum += Load1(w + i) * x[i];
  return sum;
}

template <class Weight, __m256 (*Load8)(const Weight*), float (*Load1)(const Weight*)>
Status run(const MatVecArgs& a) {
  const auto* w = static_cast<const Weight*>(a.w);
  const auto* x = static_cast<const float*>(a.x);
  const std::int64_t cols = a.shape.cols;
  parallel_row_tiles(a.shape.rows, a.threads, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) a.y[r] = dot_row<Weight, Load8, Load1>(w + r * cols, x, cols);
  });
  return Status::Ok();
}

// NR rows at once, one from each part of a row tile (for_rows_in_parts): each load of x
// serves NR rows, and NR weight streams, each prefetched, keep more misses in flight
// than one row's stream does. Two accumulators per row; the tail as in dot_row.
template <int NR, class Weight, __m256 (*Load8)(const Weight*), float (*Load1)(const Weight*)>
void dot_rows(const Weight* const w[NR], const float* x, std::int64_t cols, float* const y[NR]) {
  __m256 acc0[NR], acc1[NR];
  for (int r = 0; r < NR; ++r) acc0[r] = acc1[r] = _mm256_setzero_ps();
  std::int64_t i = 0;
  for (; i + 16 <= cols; i += 16) {
    const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
    // One prefetch per cache line of each stream (16 weights are 32 or 64 bytes).
    const bool line_start = (i * sizeof(Weight)) % 64 == 0;
    for (int r = 0; r < NR; ++r) {
      if (line_start) x86::prefetch_line(reinterpret_cast<std::uintptr_t>(w[r] + i) + kPrefetchBytes);
      acc0[r] = _mm256_fmadd_ps(Load8(w[r] + i), x0, acc0[r]);
      acc1[r] = _mm256_fmadd_ps(Load8(w[r] + i + 8), x1, acc1[r]);
    }
  }
  for (; i + 8 <= cols; i += 8) {
    const __m256 x0 = _mm256_loadu_ps(x + i);
    for (int r = 0; r < NR; ++r) acc0[r] = _mm256_fmadd_ps(Load8(w[r] + i), x0, acc0[r]);
  }
  for (int r = 0; r < NR; ++r) {
    float sum = x86::hsum(_mm256_add_ps(acc0[r], acc1[r]));
    for (std::int64_t j = i; j < cols; ++j) sum += Load1(w[r] + j) * x[j];
    *y[r] = sum;
  }
}

// The kernel of NR rows at once over row tiles; each tile's leftover rows one at a time.
template <int NR, class Weight, __m256 (*Load8)(const Weight*), float (*Load1)(const Weight*)>
Status run_rows_in_parts(const MatVecArgs& a) {
  const auto* w = static_cast<const Weight*>(a.w);
  const auto* x = static_cast<const float*>(a.x);
  const std::int64_t cols = a.shape.cols;
  parallel_row_tiles(a.shape.rows, a.threads, [&](std::int64_t r0, std::int64_t r1) {
    for_rows_in_parts<NR>(
        r0, r1,
        [&](const std::int64_t* rows) {
          const Weight* wr[NR];
          float* yr[NR];
          for (int i = 0; i < NR; ++i) {
            wr[i] = w + rows[i] * cols;
            yr[i] = a.y + rows[i];
          }
          dot_rows<NR, Weight, Load8, Load1>(wr, x, cols, yr);
        },
        [&](std::int64_t r) { a.y[r] = dot_row<Weight, Load8, Load1>(w + r * cols, x, cols); });
  });
  return Status::Ok();
}

}  // namespace
}  // namespace qmv::float_x86
