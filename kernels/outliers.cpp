#include "outliers.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cmath>
#include <limits>

namespace qmv {

namespace {

// Both paths compare exactly these two doubles, so they can differ only in the sum.
// peak^2 is exact in double (a float has 24 significant bits).
double peak_side(float peak, std::int64_t n) {
  return double(peak) * double(peak) * double(n);
}
double sum_side(double k, double sum_sq) { return k * k * sum_sq; }

// The float pass: max |x| and sum x^2 over n values, in whatever order is fastest
// (the error bound below holds for any order). NaN handling does not matter here: a
// NaN makes the sum NaN, and the caller then defers to the reference.
struct FloatPass {
  float sum = 0;
  float peak = 0;
};

FloatPass float_pass_portable(const float* x, std::int64_t n) {
  // Independent lanes, so the loop carries no single dependency chain.
  constexpr int kLanes = 8;
  float sums[kLanes] = {}, peaks[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const float v = x[i + j];
      sums[j] += v * v;
      const float a = v < 0 ? -v : v;
      peaks[j] = peaks[j] < a ? a : peaks[j];
    }
  for (int j = 0; i < n; ++i, ++j) {
    const float v = x[i];
    sums[j] += v * v;
    const float a = v < 0 ? -v : v;
    peaks[j] = peaks[j] < a ? a : peaks[j];
  }
  FloatPass r;
  for (int j = 0; j < kLanes; ++j) {
    r.sum += sums[j];
    r.peak = r.peak < peaks[j] ? peaks[j] : r.peak;
  }
  return r;
}

#if defined(__x86_64__)
// AVX2: four independent sums and maxima of eight lanes, a masked load for the tail
// (its zeros change neither). Only intrinsics inside, no library code.
__attribute__((target("avx2"))) FloatPass float_pass_avx2(const float* x, std::int64_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, m0 = s0, m1 = s0, m2 = s0, m3 = s0;
  std::int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    const __m256 c = _mm256_loadu_ps(x + i + 16), d = _mm256_loadu_ps(x + i + 24);
    s0 = _mm256_add_ps(s0, _mm256_mul_ps(a, a));
    s1 = _mm256_add_ps(s1, _mm256_mul_ps(b, b));
    s2 = _mm256_add_ps(s2, _mm256_mul_ps(c, c));
    s3 = _mm256_add_ps(s3, _mm256_mul_ps(d, d));
    m0 = _mm256_max_ps(m0, _mm256_and_ps(a, abs_mask));
    m1 = _mm256_max_ps(m1, _mm256_and_ps(b, abs_mask));
    m2 = _mm256_max_ps(m2, _mm256_and_ps(c, abs_mask));
    m3 = _mm256_max_ps(m3, _mm256_and_ps(d, abs_mask));
  }
  for (; i < n; i += 8) {
    const std::int64_t left = n - i;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(left < 8 ? left : 8)), lane);
    const __m256 a = _mm256_maskload_ps(x + i, mask);
    s0 = _mm256_add_ps(s0, _mm256_mul_ps(a, a));
    m0 = _mm256_max_ps(m0, _mm256_and_ps(a, abs_mask));
  }
  const __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
  const __m256 m = _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  const __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  const __m128 s2x = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  const __m128 m2x = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  FloatPass r;
  r.sum = _mm_cvtss_f32(_mm_add_ss(s2x, _mm_shuffle_ps(s2x, s2x, 1)));
  r.peak = _mm_cvtss_f32(_mm_max_ss(m2x, _mm_shuffle_ps(m2x, m2x, 1)));
  return r;
}

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#endif

FloatPass float_pass(const float* x, std::int64_t n, bool portable) {
#if defined(__x86_64__)
  if (!portable && has_avx2()) return float_pass_avx2(x, n);
#endif
  return float_pass_portable(x, n);
}

}  // namespace

bool has_massive_activation_reference(const float* x, std::int64_t n, double k) {
  if (n <= 0) return false;
  double sum_sq = 0;
  float peak = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return true;
    sum_sq += double(x[i]) * double(x[i]);
    peak = std::fmax(peak, std::fabs(x[i]));
  }
  if (peak == 0) return false;
  return peak_side(peak, n) > sum_side(k, sum_sq);
}

std::optional<bool> massive_activation_fast_verdict(const float* x, std::int64_t n, double k, bool portable) {
  if (n <= 0) return false;
  // u = (n + 2) 2^-24 bounds the relative error of n float squares summed in any
  // order; the bound below assumes u well below 1.
  const double u = double(n + 2) * 0x1p-24;
  if (u > 0.01) return std::nullopt;
  const FloatPass pass = float_pass(x, n, portable);
  const float sum = pass.sum, peak = pass.peak;
  // A NaN or inf in x, or squares past FLT_MAX: the float pass cannot say.
  if (!std::isfinite(sum)) return std::nullopt;
  if (peak == 0) return false;  // all zeros, exactly
  // The exact sum lies in [lo, hi]: relative error gamma = u / (1 - u), plus up to
  // FLT_MIN for each square that underflowed (rounded to a subnormal, or flushed to
  // zero where a caller set FTZ). Doubling gamma leaves room for the reference's own
  // double roundings (~n 2^-53), so a verdict outside the band is the reference's.
  const double gamma = 2.0 * u / (1.0 - u);
  const double underflow = double(n) * 0x1p-126;
  const double hi = (double(sum) + underflow) * (1.0 + gamma);
  const double lo = (double(sum) - underflow) * (1.0 - gamma);
  const double lhs = peak_side(peak, n);
  if (lhs > sum_side(k, hi)) return true;
  if (lo > 0 && lhs < sum_side(k, lo)) return false;
  return std::nullopt;
}

bool has_massive_activation(const float* x, std::int64_t n, double k) {
  if (const std::optional<bool> verdict = massive_activation_fast_verdict(x, n, k)) return *verdict;
  return has_massive_activation_reference(x, n, k);
}

double peak_to_rms(const float* x, std::int64_t n) {
  if (n <= 0) return 0;
  double sum_sq = 0, peak = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    sum_sq += double(x[i]) * double(x[i]);
    peak = std::fmax(peak, std::fabs(double(x[i])));
  }
  if (!std::isfinite(sum_sq)) return std::numeric_limits<double>::quiet_NaN();
  if (peak == 0) return 0;
  return peak / std::sqrt(sum_sq / double(n));
}

}  // namespace qmv
