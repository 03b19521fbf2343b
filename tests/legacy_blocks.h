// Random legacy-quant blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) for the kernel tests: random
// bytes everywhere (every nibble, fifth bit and Q8_0 quant, -128 included), then finite
// fp16 scales, and offsets for the _1 types, in [-1, 1].
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/formats/formats.h"

namespace qmv::test {

inline bool legacy_has_offset(WeightType t) { return t == WeightType::Q4_1 || t == WeightType::Q5_1; }

template <class Rng>
std::vector<std::uint8_t> random_legacy_blocks(WeightType t, Shape s, Rng& rng) {
  std::vector<std::uint8_t> w(row_bytes(t, s.cols) * static_cast<std::size_t>(s.rows));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : w) b = static_cast<std::uint8_t>(byte(rng));
  std::uniform_real_distribution<float> scale(-1.0f, 1.0f);
  const std::size_t bb = block_bytes(t);
  for (std::size_t off = 0; off < w.size(); off += bb) {
    const fp16_bits d = fp32_to_fp16(scale(rng)), m = fp32_to_fp16(scale(rng));
    std::memcpy(&w[off], &d, sizeof(d));  // every legacy block starts with d
    if (legacy_has_offset(t)) std::memcpy(&w[off + 2], &m, sizeof(m));
  }
  return w;
}

}  // namespace qmv::test
