// Activation vectors for testing a Q8_1 quantizer against the host one: fresh random
// blocks of every kind that makes quantizers differ (exact rounding ties, zero and
// negative-zero blocks, scales that underflow fp16 or saturate it, NaN and inf
// entries, lone outliers), shuffled so neighbouring blocks differ.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "kernels/formats/formats.h"

namespace qmv::test {

struct Q8_1Cases {
  std::vector<float> x;  // a multiple of 32 values
  std::int64_t ties = 0;        // values exactly halfway between two quants of their block
  std::int64_t zero_blocks = 0;  // blocks whose scale is 0
  std::int64_t saturated_blocks = 0;
};

// `blocks` blocks (at least 16 of each kind in a vector of 256 blocks or more).
inline Q8_1Cases q8_1_cases(std::mt19937_64& rng, std::int64_t blocks) {
  Q8_1Cases c;
  c.x.resize(static_cast<std::size_t>(blocks) * kQ8_1Block);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::uniform_int_distribution<int> kind_of(0, 7), exponent(-14, 15), mantissa(0, 1023), quant(-127, 126),
      lane(0, kQ8_1Block - 1);
  std::uniform_real_distribution<float> log_scale(-4.0f, 4.0f);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (std::int64_t b = 0; b < blocks; ++b) {
    float* x = c.x.data() + b * kQ8_1Block;
    const int kind = kind_of(rng);
    const float scale = std::pow(10.0f, log_scale(rng));
    for (int i = 0; i < kQ8_1Block; ++i) x[i] = scale * gauss(rng);
    switch (kind) {
      case 0:  // plain Gaussian of a random scale
        break;
      case 1: {
        // Ties: d a normal fp16 value, one element 127 d (so amax / 127 is d exactly),
        // the others (k + 1/2) d, exact in float, so x / d is exactly halfway.
        const float d = std::ldexp(1.0f + mantissa(rng) / 1024.0f, exponent(rng));
        for (int i = 0; i < kQ8_1Block; ++i) x[i] = (quant(rng) + 0.5f) * d;
        x[lane(rng)] = (rng() & 1 ? 127.0f : -127.0f) * d;
        for (int i = 0; i < kQ8_1Block; ++i) c.ties += std::fabs(x[i]) != 127.0f * d;
        break;
      }
      case 2:  // all zeros, or all negative zeros
        for (int i = 0; i < kQ8_1Block; ++i) x[i] = rng() & 1 ? 0.0f : -0.0f;
        ++c.zero_blocks;
        break;
      case 3:  // a scale fp16 cannot hold: float subnormals, or values whose amax/127 rounds to fp16 0
        for (int i = 0; i < kQ8_1Block; ++i) x[i] = (rng() & 1 ? 1e-41f : 1e-9f) * gauss(rng);
        ++c.zero_blocks;
        break;
      case 4:  // fp16-subnormal scales
        for (int i = 0; i < kQ8_1Block; ++i) x[i] = 1e-4f * gauss(rng);
        break;
      case 5:  // beyond fp16: the scale saturates at 65504, the sum may become inf
        for (int i = 0; i < kQ8_1Block; ++i) x[i] = 1e8f * gauss(rng);
        ++c.saturated_blocks;
        break;
      case 6:  // NaN and infinities among ordinary values
        x[lane(rng)] = nan;
        x[lane(rng)] = rng() & 1 ? inf : -inf;
        x[lane(rng)] = nan;
        break;
      case 7:  // one outlier a thousand times the rest
        x[lane(rng)] = 1000.0f * scale * (rng() & 1 ? 1.0f : -1.0f);
        break;
    }
  }
  return c;
}

}  // namespace qmv::test
