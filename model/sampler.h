// Picks the next token from logits: greedy, or temperature sampling restricted by
// top-k and top-p (nucleus), from a seeded generator so a run can be repeated.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace qmv {

struct SamplerConfig {
  float temperature = 0.0f;  // 0: greedy (argmax)
  int top_k = 0;             // keep the k most likely tokens; 0: all
  float top_p = 1.0f;        // keep the smallest set whose probability reaches p; 1: all
  std::uint64_t seed = 0;
};

// Throws std::invalid_argument naming the bad setting.
void validate(const SamplerConfig& c);

class Sampler {
 public:
  explicit Sampler(SamplerConfig config);
  // Index of the chosen token. Throws std::invalid_argument on empty or non-finite logits.
  int sample(std::span<const float> logits);
  const SamplerConfig& config() const { return config_; }

 private:
  SamplerConfig config_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int>> candidates_;  // reused across calls
};

}  // namespace qmv
