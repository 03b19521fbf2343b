#include "model/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

// glibc's vector math library (libmvec): expf on 8 lanes, the AVX2 variant of the
// x86-64 vector function ABI, within 4 ulp of expf.
extern "C" __attribute__((target("avx2"))) __m256 _ZGVdN8v_expf(__m256 x);

namespace qmv {

void attend_head(const HeadAttention& a) {
  const int hd = a.head_dim;
  float max_s = -INFINITY;
  for (int t = 0; t < a.positions; ++t) {
    const float* k = a.keys + static_cast<std::size_t>(t) * a.stride;
    float dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int i = 0; i < hd; ++i) dot += a.q[i] * k[i];
    a.scores[t] = dot * a.scale;
    max_s = std::max(max_s, a.scores[t]);
  }
  float sum = 0;
  for (int t = 0; t < a.positions; ++t) {
    a.scores[t] = std::exp(a.scores[t] - max_s);
    sum += a.scores[t];
  }
  std::fill(a.out, a.out + hd, 0.0f);
  for (int t = 0; t < a.positions; ++t) {
    const float p = a.scores[t] / sum;
    const float* v = a.values + static_cast<std::size_t>(t) * a.stride;
#pragma omp simd
    for (int i = 0; i < hd; ++i) a.out[i] += p * v[i];
  }
}

__attribute__((target("avx2"))) float exp_shifted_avx2(float* s, int n, float max_s) {
  const __m256 shift = _mm256_set1_ps(max_s);
  __m256 acc = _mm256_setzero_ps();
  int t = 0;
  for (; t + 8 <= n; t += 8) {
    const __m256 e = _ZGVdN8v_expf(_mm256_sub_ps(_mm256_loadu_ps(s + t), shift));
    _mm256_storeu_ps(s + t, e);
    acc = _mm256_add_ps(acc, e);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  float sum = 0;
  for (float v : lanes) sum += v;
  for (; t < n; ++t) {
    s[t] = std::exp(s[t] - max_s);
    sum += s[t];
  }
  return sum;
}

namespace {

__attribute__((target("avx2"))) float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// How far ahead the AVX2 loops fetch the cached keys and values: the weights streamed
// since the last token have evicted them.
constexpr int kPrefetchPositions = 16;

// Lane p of the result: the sum of the eight lanes of acc[p].
__attribute__((target("avx2"))) inline __m256 sum_lanes_of_each(const __m256 (&acc)[8]) {
  // Each hadd halves the sums left per vector; the last two steps join the halves of
  // the 128-bit lanes, which hadd keeps apart.
  const __m256 s01 = _mm256_hadd_ps(acc[0], acc[1]), s23 = _mm256_hadd_ps(acc[2], acc[3]);
  const __m256 s45 = _mm256_hadd_ps(acc[4], acc[5]), s67 = _mm256_hadd_ps(acc[6], acc[7]);
  const __m256 s0123 = _mm256_hadd_ps(s01, s23), s4567 = _mm256_hadd_ps(s45, s67);
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20), _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

__attribute__((target("avx2"))) inline float max_of_lanes(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Fetches the keys and values of positions [t, end) ahead of their use
// (kPrefetchPositions); the values into L2, for the weighted sum's passes over them.
__attribute__((target("avx2"))) inline void prefetch_positions(const GroupAttention& a, int t, int end) {
  for (; t < end; ++t) {
    const float* k = a.keys + static_cast<std::size_t>(t) * a.stride;
    const float* v = a.values + static_cast<std::size_t>(t) * a.stride;
    for (int i = 0; i < a.head_dim; i += 16) {
      _mm_prefetch(reinterpret_cast<const char*>(k + i), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(v + i), _MM_HINT_T1);
    }
  }
}

// The scores of H query heads against the keys of [first, end); each head's largest
// score into max_s. Eight positions at a time per head, one sum per position, so eight
// independent chains of multiply-adds run side by side and one horizontal step sums all
// eight (a sum per position and head costs more than the products). The positions left
// over go one at a time, each key read once for all H, two sums per head.
template <int H>
__attribute__((target("avx2,fma"))) void scores_avx2(const GroupAttention& a, float* max_s) {
  const int hd = a.head_dim, chunks = hd / 8;
  const float scale = a.scale;
  float top[H];
  __m256 top8[H];
  for (int h = 0; h < H; ++h) top8[h] = _mm256_set1_ps(-INFINITY);
  int t = a.first;
  for (; t + 8 <= a.end; t += 8) {
    prefetch_positions(a, std::min(t + kPrefetchPositions, a.end), std::min(t + kPrefetchPositions + 8, a.end));
    const float* k = a.keys + static_cast<std::size_t>(t) * a.stride;
    for (int h = 0; h < H; ++h) {
      const float* q = a.q + h * hd;
      __m256 acc[8];
#pragma GCC unroll 8
      for (int p = 0; p < 8; ++p) acc[p] = _mm256_setzero_ps();
      for (int c = 0; c < chunks; ++c) {
        const __m256 qc = _mm256_loadu_ps(q + 8 * c);
#pragma GCC unroll 8
        for (int p = 0; p < 8; ++p) acc[p] = _mm256_fmadd_ps(qc, _mm256_loadu_ps(k + p * a.stride + 8 * c), acc[p]);
      }
      const __m256 s = _mm256_mul_ps(sum_lanes_of_each(acc), _mm256_set1_ps(scale));
      _mm256_storeu_ps(a.scores + h * a.scores_stride + t, s);
      top8[h] = _mm256_max_ps(top8[h], s);
    }
  }
  for (int h = 0; h < H; ++h) top[h] = max_of_lanes(top8[h]);
  for (; t < a.end; ++t) {
    const float* k = a.keys + static_cast<std::size_t>(t) * a.stride;
    __m256 acc0[H], acc1[H];
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) acc0[h] = acc1[h] = _mm256_setzero_ps();
    int c = 0;
    for (; c + 2 <= chunks; c += 2) {
      const __m256 k0 = _mm256_loadu_ps(k + 8 * c), k1 = _mm256_loadu_ps(k + 8 * c + 8);
#pragma GCC unroll 4
      for (int h = 0; h < H; ++h) {
        acc0[h] = _mm256_fmadd_ps(_mm256_loadu_ps(a.q + h * hd + 8 * c), k0, acc0[h]);
        acc1[h] = _mm256_fmadd_ps(_mm256_loadu_ps(a.q + h * hd + 8 * c + 8), k1, acc1[h]);
      }
    }
    if (c < chunks) {
      const __m256 k0 = _mm256_loadu_ps(k + 8 * c);
#pragma GCC unroll 4
      for (int h = 0; h < H; ++h) acc0[h] = _mm256_fmadd_ps(_mm256_loadu_ps(a.q + h * hd + 8 * c), k0, acc0[h]);
    }
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) {
      const float s = horizontal_sum(_mm256_add_ps(acc0[h], acc1[h])) * scale;
      a.scores[h * a.scores_stride + t] = s;
      top[h] = std::max(top[h], s);
    }
  }
  for (int h = 0; h < H; ++h) max_s[h] = top[h];
}

// out[h][d, d + 8 * Y) = sum over t of p_h[t] * values[t][d, d + 8 * Y) for H heads, each
// value read once for all H. H and Y are constants so the H * Y sums stay in registers
// across the positions.
template <int H, int Y>
__attribute__((target("avx2,fma"))) void weighted_sum_avx2(const GroupAttention& a, int d) {
  __m256 acc[H][Y];
  for (int h = 0; h < H; ++h)
    for (int y = 0; y < Y; ++y) acc[h][y] = _mm256_setzero_ps();
  const std::size_t ahead = kPrefetchPositions * a.stride;
  for (int t = a.first; t < a.end; ++t) {
    const float* v = a.values + static_cast<std::size_t>(t) * a.stride + d;
    if (t + kPrefetchPositions < a.end)
      for (int y = 0; y < Y; y += 2) _mm_prefetch(reinterpret_cast<const char*>(v + ahead + 8 * y), _MM_HINT_T0);
    __m256 vy[Y];
#pragma GCC unroll 4
    for (int y = 0; y < Y; ++y) vy[y] = _mm256_loadu_ps(v + 8 * y);
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) {
      const __m256 p = _mm256_broadcast_ss(a.scores + h * a.scores_stride + t);
#pragma GCC unroll 4
      for (int y = 0; y < Y; ++y) acc[h][y] = _mm256_fmadd_ps(p, vy[y], acc[h][y]);
    }
  }
  for (int h = 0; h < H; ++h)
    for (int y = 0; y < Y; ++y) _mm256_storeu_ps(a.out + h * a.head_dim + d + 8 * y, acc[h][y]);
}

template <int H>
__attribute__((target("avx2,fma"))) void attend_heads_avx2(const GroupAttention& a) {
  scores_avx2<H>(a, a.max);
  for (int h = 0; h < H; ++h)
    a.sum[h] = exp_shifted_avx2(a.scores + h * a.scores_stride + a.first, a.end - a.first, a.max[h]);
  // Eight accumulators at most: 32 dimensions at a time for one or two heads, 16 for more.
  constexpr int Y = H <= 2 ? 4 : 2;
  int d = 0;
  for (; d + 8 * Y <= a.head_dim; d += 8 * Y) weighted_sum_avx2<H, Y>(a, d);
  for (; d < a.head_dim; d += 8) weighted_sum_avx2<H, 1>(a, d);
}

}  // namespace

void attend_group_avx2(const GroupAttention& a) {
  switch (a.heads) {
    case 1: return attend_heads_avx2<1>(a);
    case 2: return attend_heads_avx2<2>(a);
    case 3: return attend_heads_avx2<3>(a);
    case 4: return attend_heads_avx2<4>(a);
    default: throw std::invalid_argument("attend_group_avx2: 1 to kGroupHeads heads");
  }
}

void merge_partials(const float* out, std::size_t out_stride, const float* max, const float* sum,
                    std::size_t stat_stride, int ranges, int head_dim, float* result) {
  float top = -INFINITY;
  for (int r = 0; r < ranges; ++r) top = std::max(top, max[r * stat_stride]);
  float total = 0;
  std::fill(result, result + head_dim, 0.0f);
  for (int r = 0; r < ranges; ++r) {
    const float w = std::exp(max[r * stat_stride] - top);
    total += w * sum[r * stat_stride];
    const float* o = out + r * out_stride;
    for (int i = 0; i < head_dim; ++i) result[i] += w * o[i];
  }
  const float inv = 1.0f / total;
  for (int i = 0; i < head_dim; ++i) result[i] *= inv;
}

}  // namespace qmv
