#include "harness/data.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>

namespace qmv {

std::vector<float> gaussian_vector(std::int64_t n, std::uint64_t seed, float sd) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, sd);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = normal(gen);
  return v;
}

std::vector<std::uint8_t> random_quantized_matrix(WeightType type, Shape shape, std::uint64_t seed,
                                                  std::int64_t distinct_rows) {
  const std::size_t rb = row_bytes(type, shape.cols);
  const std::int64_t distinct =
      distinct_rows <= 0 ? shape.rows : std::min(distinct_rows, shape.rows);
  std::vector<std::uint8_t> out(rb * static_cast<std::size_t>(shape.rows));
#pragma omp parallel
  {
    std::vector<float> row(static_cast<std::size_t>(shape.cols));
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < distinct; ++r) {
      // One generator per row keeps the matrix independent of the thread count.
      std::mt19937_64 gen(seed ^ (0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(r + 1)));
      const float row_scale = std::exp(std::uniform_real_distribution<float>(-2.3f, 2.3f)(gen));
      std::normal_distribution<float> normal(0.0f, row_scale);
      for (auto& w : row) w = normal(gen);
      quantize_row(type, row.data(), out.data() + rb * static_cast<std::size_t>(r), shape.cols);
    }
  }
  for (std::int64_t r = distinct; r < shape.rows; ++r)
    std::copy_n(out.data() + rb * static_cast<std::size_t>(r % distinct), rb,
                out.data() + rb * static_cast<std::size_t>(r));
  return out;
}

std::vector<float> activation_with_outliers(std::int64_t n, std::uint64_t seed, int channels,
                                            float min_x, float max_x) {
  std::vector<float> x = gaussian_vector(n, seed);
  double sum_sq = 0;
  for (float v : x) sum_sq += double(v) * v;
  const float rms = static_cast<float>(std::sqrt(sum_sq / static_cast<double>(n)));
  std::mt19937_64 gen(seed + 1);
  std::uniform_int_distribution<std::int64_t> pick(0, n - 1);
  std::uniform_real_distribution<float> size(min_x, max_x);
  std::bernoulli_distribution sign(0.5);
  for (int i = 0; i < channels; ++i) x[static_cast<std::size_t>(pick(gen))] =
      (sign(gen) ? 1.0f : -1.0f) * size(gen) * rms;
  return x;
}

std::vector<float> activation_with_exact_outliers(std::int64_t n, std::uint64_t seed, int channels,
                                                  float multiplier) {
  if (channels < 0 || channels > n)
    throw std::invalid_argument("activation_with_exact_outliers: " + std::to_string(channels) +
                                " outlier channels in a vector of " + std::to_string(n));
  std::vector<float> x = gaussian_vector(n, seed);
  double sum_sq = 0;
  for (float v : x) sum_sq += double(v) * v;
  const double rms = std::sqrt(sum_sq / static_cast<double>(n));
  // A partial Fisher-Yates shuffle: its first c picks do not depend on how many follow.
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  std::mt19937_64 gen(seed + 1);
  for (int c = 0; c < channels; ++c) {
    const std::int64_t j = std::uniform_int_distribution<std::int64_t>(c, n - 1)(gen);
    std::swap(order[static_cast<std::size_t>(c)], order[static_cast<std::size_t>(j)]);
    const float sign = std::bernoulli_distribution(0.5)(gen) ? 1.0f : -1.0f;
    x[static_cast<std::size_t>(order[static_cast<std::size_t>(c)])] = static_cast<float>(sign * multiplier * rms);
  }
  return x;
}

void poison(std::vector<float>& v) {
  std::fill(v.begin(), v.end(), std::numeric_limits<float>::quiet_NaN());
}

}  // namespace qmv
