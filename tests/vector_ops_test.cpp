// The per-vector ops of a CPU decode step (model/vector_ops.h) against long double
// references on fresh random data, at lengths that do and do not fill their loops'
// strides, in place and not.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/activation_quantizers.h"
#include "model/vector_ops.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

using testing::fresh_seed;

std::vector<float> normal_values(std::mt19937& g, int n, float sigma) {
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = d(g);
  return v;
}

TEST(VectorOps, RmsNormMatchesALongDoubleReference) {
  std::mt19937 g(fresh_seed());
  for (const int n : {1, 7, 8, 9, 64, 2049, 4096, 11008}) {
    SCOPED_TRACE(n);
    // A large common scale: what the sum of squares must keep its digits through.
    const float sigma = std::uniform_real_distribution<float>(0.1f, 300.0f)(g);
    const std::vector<float> x = normal_values(g, n, sigma), weight = normal_values(g, n, 1.0f);
    const float eps = 1e-5f;
    long double ss = 0;
    for (const float v : x) ss += static_cast<long double>(v) * v;
    const long double scale = 1.0L / std::sqrt(ss / n + eps);
    std::vector<float> y(x.size(), std::nanf("")), in_place = x;
    rms_norm(x.data(), weight.data(), y.data(), n, eps);
    rms_norm(in_place.data(), weight.data(), in_place.data(), n, eps);
    for (int i = 0; i < n; ++i) {
      const long double want = static_cast<long double>(x[i]) * scale * weight[i];
      // Three float roundings (the scale and the two products) on top of the reference.
      const double tolerance = 4 * std::numeric_limits<float>::epsilon() * std::fabs(static_cast<double>(want)) + 1e-30;
      ASSERT_NEAR(y[i], static_cast<double>(want), tolerance) << "element " << i;
      ASSERT_EQ(in_place[i], y[i]) << "element " << i;
    }
  }
}

TEST(VectorOps, QuantizeToSharedWritesWhatTheQuantizerWrites) {
  std::mt19937 g(fresh_seed());
  std::vector<std::uint8_t> staging;  // reused, as the forward passes reuse theirs
  // Q8_K again after Q8_1: the staging buffer reused between formats and sizes.
  for (const ActFormat f : {ActFormat::Q8_K, ActFormat::Q8_1, ActFormat::Q8_K})
    for (const std::int64_t n : {256, 4096, 10752}) {
      SCOPED_TRACE(std::string(to_string(f)) + " n=" + std::to_string(n));
      const std::vector<float> x = normal_values(g, static_cast<int>(n), 3.0f);
      const std::size_t bytes = row_bytes(f, n);
      std::vector<std::uint8_t> want(bytes), shared(bytes + 64, 0xA5);
      quantize_activation(f, x.data(), want.data(), n);
      quantize_to_shared(f, x.data(), n, shared.data(), staging);
      EXPECT_EQ(std::memcmp(shared.data(), want.data(), bytes), 0);
      // Nothing past the vector's bytes is touched.
      for (std::size_t i = bytes; i < shared.size(); ++i) ASSERT_EQ(shared[i], 0xA5) << "byte " << i;
    }
}

}  // namespace
}  // namespace qmv
