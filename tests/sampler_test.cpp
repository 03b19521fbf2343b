#include "model/sampler.h"
#include "tests/test_seed.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace qmv {
namespace {

std::vector<float> random_logits(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

using testing::fresh_seed;

int argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

TEST(Sampler, GreedyIsArgmax) {
  const auto logits = random_logits(1000, fresh_seed());
  Sampler s({});
  EXPECT_EQ(s.sample(logits), argmax(logits));
  Sampler top1({1.5f, 1, 1.0f, 7});  // top-k 1 is greedy at any temperature
  for (int i = 0; i < 50; ++i) EXPECT_EQ(top1.sample(logits), argmax(logits));
}

// Greedy over lengths the scan's lanes do not divide, with the largest value placed
// anywhere (the tail included) and repeated further on: the first index wins.
TEST(Sampler, GreedyTakesTheFirstOfTiedLargestLogitsAtAnyLength) {
  std::mt19937_64 g(fresh_seed());
  Sampler s({});
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t n = 1 + g() % 3000;
    auto logits = random_logits(n, g());
    const std::size_t at = g() % n;
    logits[at] = 100.0f + static_cast<float>(g() % 8);
    for (std::size_t later = at + 1 + g() % 40; later < n; later += 1 + g() % 500) logits[later] = logits[at];
    ASSERT_EQ(s.sample(logits), static_cast<int>(at)) << "n " << n;
  }
}

TEST(Sampler, SameSeedSameTokens) {
  const auto logits = random_logits(500, fresh_seed());
  Sampler a({0.8f, 40, 0.9f, 1234}), b({0.8f, 40, 0.9f, 1234}), c({0.8f, 40, 0.9f, 1235});
  int differ = 0;
  for (int i = 0; i < 200; ++i) {
    const int ta = a.sample(logits), tb = b.sample(logits), tc = c.sample(logits);
    EXPECT_EQ(ta, tb);
    differ += ta != tc;
  }
  EXPECT_GT(differ, 0);  // another seed gives another stream
}

TEST(Sampler, FrequenciesFollowTheSoftmax) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.0f, 3.0f, -1.0f};
  const float t = 0.7f;
  std::vector<double> p(logits.size());
  double z = 0;
  for (std::size_t i = 0; i < p.size(); ++i) z += p[i] = std::exp(logits[i] / t);
  Sampler s({t, 0, 1.0f, fresh_seed()});
  const int n = 200000;
  std::vector<int> count(logits.size());
  for (int i = 0; i < n; ++i) ++count[static_cast<std::size_t>(s.sample(logits))];
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double expect = p[i] / z, sd = std::sqrt(expect * (1 - expect) / n);
    EXPECT_NEAR(count[i] / double(n), expect, 6 * sd) << "token " << i;  // 6 sigma: never flaky
  }
}

TEST(Sampler, TopKAndTopPNeverLeaveTheirSet) {
  const auto logits = random_logits(300, fresh_seed());
  std::vector<int> order(logits.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  Sampler k5({2.0f, 5, 1.0f, 1});
  for (int i = 0; i < 2000; ++i) {
    const int tok = k5.sample(logits);
    EXPECT_NE(std::find(order.begin(), order.begin() + 5, tok), order.begin() + 5) << tok;
  }
  // Nucleus at temperature 1: the shortest prefix of `order` reaching p.
  const float top_p = 0.5f;
  double z = 0;
  for (float l : logits) z += std::exp(double(l));
  std::size_t nucleus = 0;
  for (double cum = 0; cum < top_p; ++nucleus) cum += std::exp(double(logits[order[nucleus]])) / z;
  Sampler np({1.0f, 0, top_p, 2});
  std::vector<bool> hit(logits.size());
  for (int i = 0; i < 5000; ++i) hit[static_cast<std::size_t>(np.sample(logits))] = true;
  for (std::size_t r = nucleus; r < order.size(); ++r) {
    EXPECT_FALSE(hit[static_cast<std::size_t>(order[r])]) << "rank " << r << " outside the nucleus";
  }
  EXPECT_TRUE(hit[static_cast<std::size_t>(order[0])]);
}

TEST(Sampler, BadSettingsAndLogitsAreRefused) {
  EXPECT_THROW(Sampler({-0.1f, 0, 1.0f, 0}), std::invalid_argument);
  EXPECT_THROW(Sampler({1.0f, -3, 1.0f, 0}), std::invalid_argument);
  EXPECT_THROW(Sampler({1.0f, 0, 0.0f, 0}), std::invalid_argument);
  EXPECT_THROW(Sampler({1.0f, 0, 1.5f, 0}), std::invalid_argument);
  Sampler s({1.0f, 0, 1.0f, 0});
  EXPECT_THROW(s.sample({}), std::invalid_argument);
  std::vector<float> nan = {0.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_THROW(s.sample(nan), std::invalid_argument);
}

// A NaN or an infinity anywhere, the tail included, is refused by both samplers, and
// the error names the first one.
TEST(Sampler, ANonFiniteLogitAnywhereIsNamed) {
  std::mt19937_64 g(fresh_seed());
  const float bad_values[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity()};
  for (int trial = 0; trial < 60; ++trial) {
    const std::size_t n = 1 + g() % 2000;
    auto logits = random_logits(n, g());
    const std::size_t at = g() % n;
    logits[at] = bad_values[trial % 3];
    if (at + 1 < n) logits[at + 1 + g() % (n - at - 1)] = bad_values[(trial + 1) % 3];
    for (const SamplerConfig& c : {SamplerConfig{}, SamplerConfig{0.8f, 0, 1.0f, 3}}) {
      Sampler s(c);
      try {
        s.sample(logits);
        ADD_FAILURE() << "a non-finite logit at " << at << " of " << n << " was taken";
      } catch (const std::invalid_argument& e) {
        EXPECT_EQ(std::string(e.what()), "sampler: logit " + std::to_string(at) + " is not finite");
      }
    }
  }
}

}  // namespace
}  // namespace qmv
