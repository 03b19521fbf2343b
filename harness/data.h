// Random inputs for check and bench: Gaussian weights quantized by our quantizer,
// Gaussian activations, and activations with "massive activation" outlier channels.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/kernel.h"

namespace qmv {

// n Gaussian floats (mean 0, sd `sd`) from a generator seeded with `seed`.
std::vector<float> gaussian_vector(std::int64_t n, std::uint64_t seed, float sd = 1.0f);

// A rows x cols matrix of Gaussian weights (each row with its own scale, spread over
// two orders of magnitude as real layers have) quantized to `type`, row-major.
// Only `distinct_rows` rows are drawn; the rest repeat them (for timing, where the
// values do not matter but the bytes must be real blocks). 0 = all rows distinct.
std::vector<std::uint8_t> random_quantized_matrix(WeightType type, Shape shape, std::uint64_t seed,
                                                  std::int64_t distinct_rows = 0);

// Gaussian activations with `channels` entries replaced by +-(min_x..max_x) x rms,
// the outliers that break int8 activation paths in real LLMs.
std::vector<float> activation_with_outliers(std::int64_t n, std::uint64_t seed, int channels,
                                            float min_x, float max_x);

// Outliers at an exact size: gaussian_vector(n, seed) with `channels` distinct
// entries replaced by +-multiplier x the rms of that Gaussian vector (the rms of the
// typical channels, before the outliers raise it). Positions and signs come from
// `seed`, nested: the same seed with more channels keeps the earlier ones, so cases
// that differ only in channels or multiplier share every other value. Throws
// std::invalid_argument when channels is negative or above n.
std::vector<float> activation_with_exact_outliers(std::int64_t n, std::uint64_t seed, int channels,
                                                  float multiplier);

// NaN-fill, so an output element a kernel never writes cannot pass.
void poison(std::vector<float>& v);

}  // namespace qmv
