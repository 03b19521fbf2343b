#include "model/vector_ops.h"

#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "kernels/activation_quantizers.h"

// glibc's vector math library (libmvec): expf on 8 lanes, the AVX2 variant of the
// x86-64 vector function ABI, within 4 ulp of expf.
extern "C" __attribute__((target("avx2"))) __m256 _ZGVdN8v_expf(__m256 x);

namespace qmv {

void rms_norm(const float* x, const float* weight, float* y, int n, float eps) {
  // Eight partial sums: one running sum is a chain of dependent double adds, which
  // made the norm take longer than the quantization after it.
  constexpr int kPartials = 8;
  double partial[kPartials] = {};
  int i = 0;
  for (; i + kPartials <= n; i += kPartials)
    for (int j = 0; j < kPartials; ++j) partial[j] += double(x[i + j]) * x[i + j];
  double ss = 0;
  for (; i < n; ++i) ss += double(x[i]) * x[i];
  for (const double p : partial) ss += p;
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
  for (int i = 0; i < n; ++i) y[i] = x[i] * scale * weight[i];
}

void quantize_to_shared(ActFormat f, const float* x, std::int64_t n, std::uint8_t* shared,
                        std::vector<std::uint8_t>& staging) {
  const std::size_t bytes = row_bytes(f, n);
  if (staging.size() < bytes) staging.resize(bytes);
  quantize_activation(f, x, staging.data(), n);
  std::memcpy(shared, staging.data(), bytes);
}

void rope_table(const ModelConfig& c, int pos, float* cos, float* sin) {
  for (int i = 0; i < c.rope_dim / 2; ++i) {
    const double theta = pos * std::pow(double(c.rope_freq_base), -2.0 * i / c.rope_dim);
    cos[i] = static_cast<float>(std::cos(theta));
    sin[i] = static_cast<float>(std::sin(theta));
  }
}

void apply_rope(const ModelConfig& c, float* v, int n_heads, const float* cos, const float* sin) {
  const int hd = c.head_dim, half = c.rope_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* head = v + h * hd;
    for (int i = 0; i < half; ++i) {
      const int a = c.rope == RopeStyle::Interleaved ? 2 * i : i;
      const int b = c.rope == RopeStyle::Interleaved ? 2 * i + 1 : i + half;
      const float x0 = head[a], x1 = head[b];
      head[a] = x0 * cos[i] - x1 * sin[i];
      head[b] = x0 * sin[i] + x1 * cos[i];
    }
  }
}

namespace {

__attribute__((target("avx2"))) void swiglu_avx2(float* gate, const float* up, int n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = _ZGVdN8v_expf(_mm256_sub_ps(_mm256_setzero_ps(), g));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace

void swiglu(float* gate, const float* up, int n, bool avx2) {
  if (avx2) return swiglu_avx2(gate, up, n);
  for (int i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace qmv
