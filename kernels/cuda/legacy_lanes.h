// Per-lane arithmetic of the simple GPU matvecs for the legacy quants (Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0) and the float weights (F16, BF16, F32), with f32 activations:
// host+device functions, so the CPU test replays every lane of the launch.
//
// Geometry: one warp per row, kLegacyWarpsPerCta rows per CTA. For the block types,
// 8 lanes share a block of 32 weights and a warp works on 4 consecutive blocks at a
// time (a contiguous 72..136-byte stretch of the row per step): lane `lane` takes
// part lane % 8 of blocks lane / 8, lane / 8 + 4, ... Part p is the four weights
// 2p, 2p+1, 2p+16, 2p+17: qs bytes 2p and 2p+1, whose low nibbles are weights 2p, 2p+1
// and high nibbles 2p+16, 2p+17 (for Q8_0, the four bytes of those weights). For float
// weights lane `lane` takes columns lane, lane + 32, ... (coalesced, any cols).
#pragma once

#include <cstdint>

#include "kernels/cuda/dequantize_value.h"
#include "kernels/cuda/lane_math.h"
#include "kernels/formats/formats.h"

namespace qmv::cuda {

inline constexpr int kLegacyWarpsPerCta = 4;
inline constexpr int kLegacyLanesPerBlock = 8;
inline constexpr int kLegacyBlocksPerStep = 32 / kLegacyLanesPerBlock;
inline constexpr int kLegacyValuesPerPart = kLegacyBlock / kLegacyLanesPerBlock;

// CTAs for a matrix of `rows` rows.
QMV_HD std::int64_t legacy_ctas(std::int64_t rows) { return (rows + kLegacyWarpsPerCta - 1) / kLegacyWarpsPerCta; }
// The row warp `warp` of CTA `cta` computes (>= rows: the warp has nothing to do).
QMV_HD std::int64_t legacy_row(std::int64_t cta, int warp) { return cta * kLegacyWarpsPerCta + warp; }

// Weight index (0..31 in the block) of value k (0..3) of part `part` (0..7).
QMV_HD int legacy_part_value(int part, int k) { return 2 * part + (k & 1) + 16 * (k >> 1); }

// Calls fn(block, part) for every block of a row of n_blocks that lane `lane` takes.
template <class Fn>
QMV_HD void for_each_lane_block(std::int64_t n_blocks, int lane, Fn&& fn) {
  const int part = lane % kLegacyLanesPerBlock;
  for (std::int64_t b = lane / kLegacyLanesPerBlock; b < n_blocks; b += kLegacyBlocksPerStep) fn(b, part);
}

// The dot of one part of a block with the block's 32 activations xb.
// Symmetric types: d * sum((q - offset) * x). The _1 types: d * sum(q*x) + m * sum(x).
QMV_HD float legacy_part_dot(const BlockQ4_0& b, const float* xb, int part) {
  float qx = 0.0f;
  for (int k = 0; k < kLegacyValuesPerPart; ++k) {
    const int v = legacy_part_value(part, k);
    qx += static_cast<float>(legacy_nibble(b.qs, v) - 8) * xb[v];
  }
  return half_bits_to_float(b.d) * qx;
}

QMV_HD float legacy_part_dot(const BlockQ4_1& b, const float* xb, int part) {
  float qx = 0.0f, xs = 0.0f;
  for (int k = 0; k < kLegacyValuesPerPart; ++k) {
    const int v = legacy_part_value(part, k);
    qx += static_cast<float>(legacy_nibble(b.qs, v)) * xb[v];
    xs += xb[v];
  }
  return half_bits_to_float(b.d) * qx + half_bits_to_float(b.m) * xs;
}

QMV_HD float legacy_part_dot(const BlockQ5_0& b, const float* xb, int part) {
  float qx = 0.0f;
  for (int k = 0; k < kLegacyValuesPerPart; ++k) {
    const int v = legacy_part_value(part, k);
    const int q = legacy_nibble(b.qs, v) | (legacy_fifth_bit(b.qh, v) << 4);
    qx += static_cast<float>(q - 16) * xb[v];
  }
  return half_bits_to_float(b.d) * qx;
}

QMV_HD float legacy_part_dot(const BlockQ5_1& b, const float* xb, int part) {
  float qx = 0.0f, xs = 0.0f;
  for (int k = 0; k < kLegacyValuesPerPart; ++k) {
    const int v = legacy_part_value(part, k);
    const int q = legacy_nibble(b.qs, v) | (legacy_fifth_bit(b.qh, v) << 4);
    qx += static_cast<float>(q) * xb[v];
    xs += xb[v];
  }
  return half_bits_to_float(b.d) * qx + half_bits_to_float(b.m) * xs;
}

QMV_HD float legacy_part_dot(const BlockQ8_0& b, const float* xb, int part) {
  float qx = 0.0f;
  for (int k = 0; k < kLegacyValuesPerPart; ++k) {
    const int v = legacy_part_value(part, k);
    qx += static_cast<float>(b.qs[v]) * xb[v];
  }
  return half_bits_to_float(b.d) * qx;
}

// Lane `lane`'s share of the dot of one row (n_blocks blocks) with x.
template <class Block>
QMV_HD float legacy_lane_sum(const Block* row, const float* x, std::int64_t n_blocks, int lane) {
  float sum = 0.0f;
  for_each_lane_block(n_blocks, lane, [&](std::int64_t b, int part) {
    sum += legacy_part_dot(row[b], x + b * kLegacyBlock, part);
  });
  return sum;
}

// Float weights: one value per "block".
QMV_HD float float_weight(std::uint16_t h, WeightType type) {
  return type == WeightType::BF16 ? bf16_bits_to_float(h) : half_bits_to_float(h);
}
QMV_HD float float_weight(float f, WeightType) { return f; }

// Calls fn(col) for every column of a row of `cols` that lane `lane` takes.
template <class Fn>
QMV_HD void for_each_lane_col(std::int64_t cols, int lane, Fn&& fn) {
  for (std::int64_t c = lane; c < cols; c += 32) fn(c);
}

template <class Value>
QMV_HD float float_lane_sum(const Value* row, WeightType type, const float* x, std::int64_t cols, int lane) {
  float sum = 0.0f;
  for_each_lane_col(cols, lane, [&](std::int64_t c) { sum += float_weight(row[c], type) * x[c]; });
  return sum;
}

}  // namespace qmv::cuda
