#include "model/sampler.h"

#include <algorithm>
#include <cmath>

namespace qmv {

void validate(const SamplerConfig& c) {
  if (!(c.temperature >= 0.0f) || !std::isfinite(c.temperature))
    throw std::invalid_argument("temperature must be >= 0 (0 is greedy), got " + std::to_string(c.temperature));
  if (c.top_k < 0) throw std::invalid_argument("top-k must be >= 0 (0 keeps all), got " + std::to_string(c.top_k));
  if (!(c.top_p > 0.0f && c.top_p <= 1.0f))
    throw std::invalid_argument("top-p must be in (0, 1], got " + std::to_string(c.top_p));
}

Sampler::Sampler(SamplerConfig config) : config_(config), rng_(config.seed) { validate(config_); }

int Sampler::sample(std::span<const float> logits) {
  if (logits.empty()) throw std::invalid_argument("sampler: no logits");
  int best = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (!std::isfinite(logits[i]))
      throw std::invalid_argument("sampler: logit " + std::to_string(i) + " is not finite");
    if (logits[i] > logits[static_cast<std::size_t>(best)]) best = static_cast<int>(i);
  }
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
