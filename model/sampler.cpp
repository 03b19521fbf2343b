#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

namespace qmv {

void validate(const SamplerConfig& c) {
  if (!(c.temperature >= 0.0f) || !std::isfinite(c.temperature))
    throw std::invalid_argument("temperature must be >= 0 (0 is greedy), got " + std::to_string(c.temperature));
  if (c.top_k < 0) throw std::invalid_argument("top-k must be >= 0 (0 keeps all), got " + std::to_string(c.top_k));
  if (!(c.top_p > 0.0f && c.top_p <= 1.0f))
    throw std::invalid_argument("top-p must be in (0, 1], got " + std::to_string(c.top_p));
}

Sampler::Sampler(SamplerConfig config) : config_(config), rng_(config.seed) { validate(config_); }

namespace {

// The first index of the largest logit. Every greedy token pays for this scan over the
// vocabulary, so it runs in independent lanes the compiler vectorizes (the largest
// value and a not-finite flag in one pass, then the value's first index) rather than
// branching on each logit against the best so far.
int first_largest(std::span<const float> logits) {
  constexpr std::size_t kLanes = 16;
  constexpr float kLargest = std::numeric_limits<float>::max();
  const std::size_t n = logits.size();
  float lane_max[kLanes];
  std::fill(std::begin(lane_max), std::end(lane_max), -std::numeric_limits<float>::infinity());
  bool not_finite = false;
  std::size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (std::size_t j = 0; j < kLanes; ++j) {
      const float v = logits[i + j];
      not_finite |= !(std::fabs(v) <= kLargest);  // NaN fails the comparison too
      lane_max[j] = v > lane_max[j] ? v : lane_max[j];
    }
  float largest = *std::max_element(std::begin(lane_max), std::end(lane_max));
  for (; i < n; ++i) {
    not_finite |= !(std::fabs(logits[i]) <= kLargest);
    largest = logits[i] > largest ? logits[i] : largest;
  }
  if (not_finite) {
    const auto bad = std::find_if(logits.begin(), logits.end(), [](float v) { return !std::isfinite(v); });
    throw std::invalid_argument("sampler: logit " + std::to_string(bad - logits.begin()) + " is not finite");
  }
  return static_cast<int>(std::find(logits.begin(), logits.end(), largest) - logits.begin());
}

}  // namespace

int Sampler::sample(std::span<const float> logits) {
  if (logits.empty()) throw std::invalid_argument("sampler: no logits");
  const int best = first_largest(logits);
  if (config_.temperature == 0.0f || config_.top_k == 1) return best;

  // Candidates in decreasing probability; only as many as top-k keeps get sorted.
  candidates_.clear();
  for (std::size_t i = 0; i < logits.size(); ++i) candidates_.emplace_back(logits[i], static_cast<int>(i));
  const std::size_t k = config_.top_k > 0 ? std::min<std::size_t>(config_.top_k, candidates_.size())
                                          : candidates_.size();
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(k), candidates_.end(), by_logit);
  candidates_.resize(k);

  // Softmax at the temperature, in double, relative to the largest logit.
  const double max_logit = candidates_.front().first;
  std::vector<double> p(k);
  double total = 0;
  for (std::size_t i = 0; i < k; ++i) {
    p[i] = std::exp((candidates_[i].first - max_logit) / config_.temperature);
    total += p[i];
  }
  // Nucleus: the shortest prefix whose probability reaches top_p.
  std::size_t keep = k;
  if (config_.top_p < 1.0f) {
    double cum = 0;
    for (std::size_t i = 0; i < k; ++i) {
      cum += p[i] / total;
      if (cum >= config_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = 0;
  for (std::size_t i = 0; i < keep; ++i) kept += p[i];
  double r = std::uniform_real_distribution<double>(0.0, kept)(rng_);
  for (std::size_t i = 0; i < keep; ++i) {
    r -= p[i];
    if (r < 0) return candidates_[i].second;
  }
  return candidates_[keep - 1].second;  // r landed on the rounding edge
}

}  // namespace qmv
