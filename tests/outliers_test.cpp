// The outlier criterion (kernels/outliers.h): max |x| > k * rms(x). Its edge cases,
// and that the float fast path never disagrees with the double-precision reference.
#include "kernels/outliers.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "harness/data.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

using testing::fresh_seed;

// Every way of asking: the public decision, the reference, and each fast pass when it
// decides. All must agree with `expected`.
void expect_verdict(const std::vector<float>& x, double k, bool expected, const std::string& what) {
  const auto n = static_cast<std::int64_t>(x.size());
  EXPECT_EQ(has_massive_activation_reference(x.data(), n, k), expected) << what;
  EXPECT_EQ(has_massive_activation(x.data(), n, k), expected) << what;
  for (bool portable : {false, true})
    if (const auto v = massive_activation_fast_verdict(x.data(), n, k, portable)) {
      EXPECT_EQ(*v, expected) << what << (portable ? " (portable pass)" : " (fast pass)");
    }
}

TEST(Outliers, EmptyAndAllZeroVectorsNeverTrip) {
  std::mt19937_64 rng(fresh_seed());
  expect_verdict({}, 8, false, "empty");
  expect_verdict({}, 0, false, "empty, k = 0");
  for (int trial = 0; trial < 20; ++trial) {
    const std::size_t n = std::uniform_int_distribution<std::size_t>(1, 5000)(rng);
    std::vector<float> zeros(n, 0.0f);
    if (trial % 2) zeros[n / 2] = -0.0f;
    expect_verdict(zeros, 8, false, "zeros, n = " + std::to_string(n));
    expect_verdict(zeros, 0, false, "zeros, k = 0, n = " + std::to_string(n));
    EXPECT_EQ(peak_to_rms(zeros.data(), static_cast<std::int64_t>(n)), 0.0);
  }
}

TEST(Outliers, NanOrInfinityAlwaysTrips) {
  std::mt19937_64 rng(fresh_seed());
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity()};
  for (float special : specials) {
    for (int trial = 0; trial < 10; ++trial) {
      const std::int64_t n = std::uniform_int_distribution<std::int64_t>(1, 9000)(rng);
      std::vector<float> x = gaussian_vector(n, rng());
      x[std::uniform_int_distribution<std::size_t>(0, x.size() - 1)(rng)] = special;
      const std::string what = std::to_string(special) + " among " + std::to_string(n) + " values";
      expect_verdict(x, 8, true, what);
      // Even a threshold no finite vector can reach.
      expect_verdict(x, 1e6, true, what + ", k = 1e6");
      EXPECT_FALSE(massive_activation_fast_verdict(x.data(), n, 8).has_value()) << what;
      EXPECT_TRUE(std::isnan(peak_to_rms(x.data(), n))) << what;
    }
  }
}

TEST(Outliers, OneValueTripsOnlyBelowKEqualOne) {
  std::mt19937_64 rng(fresh_seed());
  for (int trial = 0; trial < 50; ++trial) {
    // max |x| = rms(x) for a single value: exactly at the threshold for k = 1.
    const float v = std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng),
                               std::uniform_int_distribution<int>(-60, 60)(rng));
    if (v == 0) continue;
    const std::vector<float> x{v};
    expect_verdict(x, 1.0, false, "n = 1 at k = 1");
    expect_verdict(x, 8.0, false, "n = 1 at k = 8");
    expect_verdict(x, 0.999, true, "n = 1 at k = 0.999");
    expect_verdict(x, 0.0, true, "n = 1 at k = 0");
    EXPECT_DOUBLE_EQ(peak_to_rms(x.data(), 1), 1.0);
  }
  expect_verdict({0.0f}, 0.0, false, "a single zero");
}

// Vectors built exactly at the threshold, with integer squares so that the definition
// is decided by exact arithmetic: one value a and n - 1 values b with
// a^2 n = k^2 (a^2 + (n - 1) b^2). k = 8: n = 65 and a = 64 b; n = 85 and a = 16 b;
// and the one-hot vector of n = k^2 values.
struct AtThreshold {
  std::int64_t n;
  float a_over_b;
  double k;
};

TEST(Outliers, ExactlyAtTheThresholdDoesNotTripAndOneUlpAboveDoes) {
  std::mt19937_64 rng(fresh_seed());
  const AtThreshold cases[] = {{65, 64, 8}, {85, 16, 8}, {5, 4, 2}, {64, 0, 8}, {16, 0, 4}};
  for (const AtThreshold& c : cases) {
    for (int trial = 0; trial < 20; ++trial) {
      // A power of two scales every square by an exact factor; random signs and position.
      const float b = std::ldexp(1.0f, std::uniform_int_distribution<int>(-40, 40)(rng));
      std::vector<float> x(static_cast<std::size_t>(c.n), c.a_over_b == 0 ? 0.0f : b);
      for (float& v : x)
        if (std::bernoulli_distribution(0.5)(rng)) v = -v;
      const std::size_t at = std::uniform_int_distribution<std::size_t>(0, x.size() - 1)(rng);
      const float a = c.a_over_b == 0 ? b : c.a_over_b * b;
      x[at] = std::bernoulli_distribution(0.5)(rng) ? a : -a;
      const std::string what = "n = " + std::to_string(c.n) + ", k = " + std::to_string(c.k);
      expect_verdict(x, c.k, false, "exactly at the threshold, " + what);
      // The fast pass cannot tell equality from a hair's breadth: it must defer.
      EXPECT_FALSE(massive_activation_fast_verdict(x.data(), c.n, c.k).has_value()) << what;
      if (c.a_over_b == 0) continue;  // a one-hot vector's max/rms is sqrt(n) whatever its value
      std::vector<float> up = x, down = x;
      up[at] = std::nextafter(x[at], x[at] > 0 ? INFINITY : -INFINITY);
      down[at] = std::nextafter(x[at], 0.0f);
      expect_verdict(up, c.k, true, "one ulp above the threshold, " + what);
      expect_verdict(down, c.k, false, "one ulp below the threshold, " + what);
    }
  }
  // A one-hot vector reaches max/rms = sqrt(n): k = 8 needs more than 64 values.
  std::vector<float> one_hot(65, 0.0f);
  one_hot[17] = 3.0f;
  expect_verdict(one_hot, 8, true, "one-hot, n = 65");
  one_hot.pop_back();
  expect_verdict(one_hot, 8, false, "one-hot, n = 64");
  one_hot.resize(63);
  expect_verdict(one_hot, 8, false, "one-hot, n = 63");
}

// A Gaussian vector with one channel set so that max|x| / rms(x) = k (1 + rel),
// the rms counting the channel itself: a^2 n = k^2 t (S + a^2), t = (1 + rel)^2.
std::vector<float> near_threshold(std::int64_t n, std::uint64_t seed, double k, double rel, float scale) {
  std::vector<float> x = gaussian_vector(n, seed, scale);
  double rest = 0;
  for (std::size_t i = 1; i < x.size(); ++i) rest += double(x[i]) * x[i];
  const double t = (1 + rel) * (1 + rel);
  x[0] = static_cast<float>(std::sqrt(k * k * t * rest / (double(n) - k * k * t)));
  return x;
}

TEST(Outliers, FastPathAgreesWithTheReferenceEverywhere) {
  std::mt19937_64 rng(fresh_seed());
  int decided_far = 0, far = 0, deferred_near = 0;
  const float scales[] = {1.0f, 1e-3f, 1e-19f, 1e-21f, 1e-42f, 1e15f, 1e19f, 3e19f};
  for (int trial = 0; trial < 600; ++trial) {
    const std::int64_t n = std::uniform_int_distribution<std::int64_t>(100, 20000)(rng);
    const double k = std::uniform_real_distribution<double>(2.0, 9.0)(rng);
    const double rels[] = {0, 1e-9, -1e-9, 1e-7, -1e-7, 1e-5, -1e-5, 1e-3, -1e-3, 0.1, -0.1, 0.5, -0.5};
    const double rel = rels[trial % std::size(rels)];
    if (double(n) <= k * k * (1 + rel) * (1 + rel) * 1.05) continue;
    const float scale = scales[std::uniform_int_distribution<std::size_t>(0, std::size(scales) - 1)(rng)];
    const std::vector<float> x = near_threshold(n, rng(), k, rel, scale);
    const bool truth = has_massive_activation_reference(x.data(), n, k);
    const std::string what = "n = " + std::to_string(n) + ", k = " + std::to_string(k) +
                             ", rel = " + fmt::format("{:g}", rel) + ", scale = " + fmt::format("{:g}", scale);
    ASSERT_EQ(has_massive_activation(x.data(), n, k), truth) << what;
    for (bool portable : {false, true}) {
      const auto v = massive_activation_fast_verdict(x.data(), n, k, portable);
      if (v) {
        ASSERT_EQ(*v, truth) << what << (portable ? " (portable)" : "");
      }
      // Well inside float range, 10% from the threshold is far beyond the float error.
      // Measured, not intended: with a small k the Gaussian's own peak can outgrow the
      // planted one and put the vector at the threshold after all.
      const double actual_rel = peak_to_rms(x.data(), n) / k - 1.0;
      if (std::abs(actual_rel) >= 0.1 && scale >= 1e-3f && scale <= 1e15f) {
        ++far;
        decided_far += v.has_value();
      }
      if (rel == 0 || std::abs(rel) == 1e-9) deferred_near += !v.has_value();
    }
  }
  EXPECT_EQ(decided_far, far) << "the fast path must decide vectors far from the threshold";
  EXPECT_GT(far, 50);
  EXPECT_GT(deferred_near, 0) << "vectors at the threshold must reach the reference";
}

TEST(Outliers, GaussianVectorsDoNotTripAtTheDefaultAndOutliersDo) {
  std::mt19937_64 rng(fresh_seed());
  for (std::int64_t n : {2048, 4096, 5632, 11008, 14336}) {
    for (int trial = 0; trial < 20; ++trial) {
      const std::uint64_t seed = rng();
      const std::vector<float> g = gaussian_vector(n, seed);
      // The fast path decides these on its own (max/rms ~ 4 against 8).
      const auto v = massive_activation_fast_verdict(g.data(), n, kDefaultOutlierK);
      ASSERT_TRUE(v.has_value()) << n;
      EXPECT_FALSE(*v) << n;
      for (int channels = 1; channels <= 4; ++channels) {
        const std::vector<float> x = activation_with_exact_outliers(n, seed, channels, 10.0f);
        EXPECT_TRUE(has_massive_activation(x.data(), n)) << n << " values, " << channels << " channels at 10x";
        EXPECT_GT(peak_to_rms(x.data(), n), kDefaultOutlierK);
      }
    }
  }
}

TEST(Outliers, ExactOutlierGeneratorSetsDistinctChannelsAtTheMultiple) {
  std::mt19937_64 rng(fresh_seed());
  for (int trial = 0; trial < 20; ++trial) {
    const std::int64_t n = std::uniform_int_distribution<std::int64_t>(4, 6000)(rng);
    const std::uint64_t seed = rng();
    const float multiplier = std::uniform_real_distribution<float>(5, 60)(rng);
    const std::vector<float> g = gaussian_vector(n, seed);
    double sum_sq = 0;
    for (float v : g) sum_sq += double(v) * v;
    const double rms = std::sqrt(sum_sq / double(n));
    std::vector<float> previous = g;
    for (int channels = 1; channels <= 4; ++channels) {
      const std::vector<float> x = activation_with_exact_outliers(n, seed, channels, multiplier);
      int changed = 0, changed_from_previous = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        if (x[i] != g[i]) {
          ++changed;
          EXPECT_NEAR(std::abs(x[i]), multiplier * rms, 1e-5 * multiplier * rms);
        }
        changed_from_previous += x[i] != previous[i];
      }
      // Distinct positions, and more channels keep the earlier ones.
      EXPECT_EQ(changed, channels);
      EXPECT_EQ(changed_from_previous, 1);
      previous = x;
    }
  }
  EXPECT_THROW(activation_with_exact_outliers(3, 1, 4, 10.0f), std::invalid_argument);
  EXPECT_THROW(activation_with_exact_outliers(3, 1, -1, 10.0f), std::invalid_argument);
}

}  // namespace
}  // namespace qmv
