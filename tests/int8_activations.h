// Random int8 activation blocks for the CPU kernel tests: a quarter of the quants at the
// extremes -128 and 127 (which quantizers rarely or never emit, but the formats allow),
// the rest uniform, random positive scales; Q8_1's s and Q8_K's block sums as the
// quants imply. quantizer_range_q8_1 keeps to [-127, 127].
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/formats/formats.h"

namespace qmv::test {

inline std::int8_t extreme_quant(std::mt19937& rng) {
  std::uniform_int_distribution<int> q(-128, 127), pick(0, 7);
  const int p = pick(rng);
  return static_cast<std::int8_t>(p == 0 ? -128 : p == 1 ? 127 : q(rng));
}

inline std::vector<BlockQ8_1> extreme_q8_1(std::int64_t cols, std::mt19937& rng) {
  std::vector<BlockQ8_1> x(static_cast<std::size_t>(cols / kQ8_1Block));
  std::uniform_real_distribution<float> d(0.001f, 0.1f);
  for (auto& b : x) {
    b.d = fp32_to_fp16(d(rng));
    int sum = 0;
    for (auto& v : b.qs) sum += v = extreme_quant(rng);
    b.s = fp32_to_fp16(fp16_to_fp32(b.d) * static_cast<float>(sum));
  }
  return x;
}

// As extreme_q8_1 with -127 in place of every -128: the range the Q8_1 quantizers
// emit, which the kernels with a faster path for it take.
inline std::vector<BlockQ8_1> quantizer_range_q8_1(std::int64_t cols, std::mt19937& rng) {
  std::vector<BlockQ8_1> x = extreme_q8_1(cols, rng);
  for (auto& b : x) {
    int sum = 0;
    for (auto& v : b.qs) sum += v = static_cast<std::int8_t>(v == -128 ? -127 : v);
    b.s = fp32_to_fp16(fp16_to_fp32(b.d) * static_cast<float>(sum));
  }
  return x;
}

inline std::vector<BlockQ8K> extreme_q8_K(std::int64_t cols, std::mt19937& rng) {
  std::vector<BlockQ8K> x(static_cast<std::size_t>(cols / kSuperBlock));
  std::uniform_real_distribution<float> d(0.001f, 0.1f);
  for (auto& b : x) {
    b.d = d(rng);
    for (auto& v : b.qs) v = extreme_quant(rng);
    for (int g = 0; g < kSuperBlock / 16; ++g) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += b.qs[16 * g + i];
      b.bsums[g] = static_cast<std::int16_t>(s);
    }
  }
  return x;
}

}  // namespace qmv::test
