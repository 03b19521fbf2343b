// Per-lane arithmetic of the legacy-quant GPU matvecs with Q8_1 activations
// (q4_0/q4_1/q5_0/q5_1/q8_0 .cuda.warp_dp4a_q8_1): host+device functions, so a CPU
// test replays every lane of the launch.
//
// Geometry: one warp per row, kLegacyWarpsPerCta rows per CTA (legacy_lanes.h). A weight
// block of 32 pairs with the Q8_1 block of the same 32 columns. Four lanes share a block,
// a warp works on 8 consecutive blocks at a time: lane `lane` takes part lane % 4 of
// blocks lane / 4, lane / 4 + 8, ... (the loop of the lanes of a row may end at
// different blocks: no shuffle happens before the warp sum). Part p of a 4/5-bit block is qs word p: its low
// nibbles are weights 4p..4p+3, its high nibbles 16+4p..16+4p+3, dotted by __dp4a with
// Q8_1 quant words p and p + 4. Part p of a Q8_0 block is qs words 2p and 2p+1 against
// quant words 2p and 2p+1. Per block:
//   Q4_0  d * (dx * sum(q * xq) - 8 * s)     Q4_1  d * dx * sum(q * xq) + m * s
//   Q5_0  d * (dx * sum(q * xq) - 16 * s)    Q5_1  d * dx * sum(q * xq) + m * s
//   Q8_0  d * dx * sum(q * xq)
// with s = dx * sum(xq) the Q8_1 block's stored fp16 sum, as ggml's int8 path takes it;
// part 0 adds the block's offset term, the other parts none.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/cuda/global_loads.h"
#include "kernels/cuda/lane_math.h"
#include "kernels/cuda/legacy_lanes.h"
#include "kernels/formats/formats.h"

namespace qmv::cuda {

inline constexpr int kLegacyDp4aLanesPerBlock = 4;
inline constexpr int kLegacyDp4aBlocksPerStep = 32 / kLegacyDp4aLanesPerBlock;

// The loads go through the K-quant families' layer (global_loads.h): the read-only
// path on the device, a copy on the host where the replay runs the lanes.

// A 32-bit little-endian word at a 2-aligned address (blocks of 18, 22 and 34 bytes
// leave their quants only 2-aligned): two 16-bit loads.
QMV_HD std::uint32_t word_at_2aligned(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(load_nc<std::uint16_t>(p)) |
         (static_cast<std::uint32_t>(load_nc<std::uint16_t>(p + 2)) << 16);
}

// Quant word i of a Q8_1 block (4-aligned: the blocks are 36 bytes, the quants at +4).
QMV_HD int q8_1_word(const BlockQ8_1& x, int i) {
  return static_cast<int>(load_nc<std::uint32_t>(x.qs + 4 * i));
}

QMV_HD std::uint16_t half_at(const fp16_bits* p) { return load_nc<std::uint16_t>(p); }

// Bits first..first+3 of a Q5 block's qh word, each moved to bit 4 of its own byte:
// the fifth bits of four consecutive weights, ready to OR onto their nibbles.
QMV_HD std::uint32_t spread_fifth_bits(std::uint32_t qh, int first) {
  const std::uint32_t t = (qh >> first) & 0xFu;
  return ((t & 1u) << 4) | ((t & 2u) << 11) | ((t & 4u) << 18) | ((t & 8u) << 25);
}

inline constexpr std::uint32_t kNibbles = 0x0F0F0F0Fu;

// sum(q * xq) of part p of a 4/5-bit block whose weights' low/high words are lo, hi.
QMV_HD int nibble_part_sum(std::uint32_t lo, std::uint32_t hi, const BlockQ8_1& x, int p) {
  return dp4a(static_cast<int>(hi), q8_1_word(x, p + 4), dp4a(static_cast<int>(lo), q8_1_word(x, p), 0));
}

QMV_HD float legacy_dp4a_part(const BlockQ4_0& b, const BlockQ8_1& x, int p) {
  const std::uint32_t q = word_at_2aligned(b.qs + 4 * p);
  const int sum = nibble_part_sum(q & kNibbles, (q >> 4) & kNibbles, x, p);
  const float dx = half_bits_to_float(half_at(&x.d)), s = half_bits_to_float(half_at(&x.s));
  return half_bits_to_float(half_at(&b.d)) * (dx * static_cast<float>(sum) - (p == 0 ? 8.0f * s : 0.0f));
}

QMV_HD float legacy_dp4a_part(const BlockQ4_1& b, const BlockQ8_1& x, int p) {
  const std::uint32_t q = word_at_2aligned(b.qs + 4 * p);
  const int sum = nibble_part_sum(q & kNibbles, (q >> 4) & kNibbles, x, p);
  const float dx = half_bits_to_float(half_at(&x.d)), s = half_bits_to_float(half_at(&x.s));
  const float offset = p == 0 ? half_bits_to_float(half_at(&b.m)) * s : 0.0f;
  return half_bits_to_float(half_at(&b.d)) * dx * static_cast<float>(sum) + offset;
}

QMV_HD float legacy_dp4a_part(const BlockQ5_0& b, const BlockQ8_1& x, int p) {
  const std::uint32_t q = word_at_2aligned(b.qs + 4 * p), qh = word_at_2aligned(b.qh);
  const int sum = nibble_part_sum((q & kNibbles) | spread_fifth_bits(qh, 4 * p),
                                  ((q >> 4) & kNibbles) | spread_fifth_bits(qh, 16 + 4 * p), x, p);
  const float dx = half_bits_to_float(half_at(&x.d)), s = half_bits_to_float(half_at(&x.s));
  return half_bits_to_float(half_at(&b.d)) * (dx * static_cast<float>(sum) - (p == 0 ? 16.0f * s : 0.0f));
}

QMV_HD float legacy_dp4a_part(const BlockQ5_1& b, const BlockQ8_1& x, int p) {
  const std::uint32_t q = word_at_2aligned(b.qs + 4 * p), qh = word_at_2aligned(b.qh);
  const int sum = nibble_part_sum((q & kNibbles) | spread_fifth_bits(qh, 4 * p),
                                  ((q >> 4) & kNibbles) | spread_fifth_bits(qh, 16 + 4 * p), x, p);
  const float dx = half_bits_to_float(half_at(&x.d)), s = half_bits_to_float(half_at(&x.s));
  const float offset = p == 0 ? half_bits_to_float(half_at(&b.m)) * s : 0.0f;
  return half_bits_to_float(half_at(&b.d)) * dx * static_cast<float>(sum) + offset;
}

QMV_HD float legacy_dp4a_part(const BlockQ8_0& b, const BlockQ8_1& x, int p) {
  const auto* qs = reinterpret_cast<const std::uint8_t*>(b.qs);
  const int sum = dp4a(static_cast<int>(word_at_2aligned(qs + 8 * p + 4)), q8_1_word(x, 2 * p + 1),
                       dp4a(static_cast<int>(word_at_2aligned(qs + 8 * p)), q8_1_word(x, 2 * p), 0));
  const float dx = half_bits_to_float(half_at(&x.d));
  return half_bits_to_float(half_at(&b.d)) * dx * static_cast<float>(sum);
}

// Lane `lane`'s share of the dot of one row (n_blocks blocks) with the Q8_1 vector xq
// (legacy_lanes.h's legacy_lane_sum with Q8_1 activations).
// Four steps at a time, their loads independent of each other's sums, so the warp has
// 32 blocks of loads in flight.
inline constexpr int kLegacyDp4aUnroll = 4;

template <class Block>
QMV_HD float legacy_lane_sum(const Block* row, const BlockQ8_1* xq, std::int64_t n_blocks, int lane) {
  constexpr std::int64_t kStep = kLegacyDp4aBlocksPerStep;
  const int part = lane % kLegacyDp4aLanesPerBlock;
  float sum = 0.0f;
  std::int64_t b = lane / kLegacyDp4aLanesPerBlock;
  for (; b + (kLegacyDp4aUnroll - 1) * kStep < n_blocks; b += kLegacyDp4aUnroll * kStep) {
    float parts[kLegacyDp4aUnroll];
    for (int u = 0; u < kLegacyDp4aUnroll; ++u)
      parts[u] = legacy_dp4a_part(row[b + u * kStep], xq[b + u * kStep], part);
    for (int u = 0; u < kLegacyDp4aUnroll; ++u) sum += parts[u];
  }
  for (; b < n_blocks; b += kStep) sum += legacy_dp4a_part(row[b], xq[b], part);
  return sum;
}

}  // namespace qmv::cuda
