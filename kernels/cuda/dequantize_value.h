// One weight of one block, for every weight type a GGUF model here may hold: the
// arithmetic of the GPU row dequantizer (dequantize_row.cu), marked host+device so the
// CPU tests replay it value by value against dequantize_row in kernels/formats.
//
// Each function computes exactly what dequantize_row computes for that value, in the
// same order of float operations. The multiply and add are written with mul_rn /
// add_rn, which on the device are the round-to-nearest intrinsics: nvcc would
// otherwise contract `scale * q - offset` into one fused multiply-add and round once
// instead of twice, and the GPU's embeddings would no longer be the CPU's bit for bit.
#pragma once

#include <cstdint>

#include "kernels/cuda/lane_math.h"
#include "kernels/formats/formats.h"

namespace qmv::cuda {

QMV_HD float bf16_bits_to_float(std::uint16_t h) { return float_from_bits(static_cast<std::uint32_t>(h) << 16); }

// The 4-bit quant of value i (0..31) of a legacy block: low nibbles hold values 0..15,
// high nibbles 16..31.
QMV_HD int legacy_nibble(const std::uint8_t* qs, int i) { return i < 16 ? (qs[i] & 0x0f) : (qs[i - 16] >> 4); }

// The fifth bit of value i (0..31) of a Q5_0 / Q5_1 block: bit i of the little-endian
// 32-bit word qh, read byte by byte (the word is only 2-aligned in the block).
QMV_HD int legacy_fifth_bit(const std::uint8_t* qh, int i) { return (qh[i / 8] >> (i % 8)) & 1; }

QMV_HD float dequantize_value(const BlockQ4K& b, int i) {
  const int j = i / 32, l = i % 32, chunk = j / 2, shift = 4 * (j % 2);
  int sc, m;
  k_scale_min(j, b.scales, sc, m);
  const float scale = mul_rn(half_bits_to_float(b.d), static_cast<float>(sc));
  const float offset = mul_rn(half_bits_to_float(b.dmin), static_cast<float>(m));
  const int q = (b.qs[32 * chunk + l] >> shift) & 0x0f;
  return add_rn(mul_rn(scale, static_cast<float>(q)), -offset);
}

QMV_HD float dequantize_value(const BlockQ5K& b, int i) {
  const int j = i / 32, l = i % 32, chunk = j / 2, shift = 4 * (j % 2);
  int sc, m;
  k_scale_min(j, b.scales, sc, m);
  const float scale = mul_rn(half_bits_to_float(b.d), static_cast<float>(sc));
  const float offset = mul_rn(half_bits_to_float(b.dmin), static_cast<float>(m));
  const int low = (b.qs[32 * chunk + l] >> shift) & 0x0f;
  const int high = (b.qh[l] >> j) & 1;
  return add_rn(mul_rn(scale, static_cast<float>(low | (high << 4))), -offset);
}

// Q6_K: half h = i / 128; within it k = (i % 128) / 32 picks the ql byte (k & 1), its
// nibble (k >> 1) and the two bits 2k of qh; l = i % 32 is the byte within the run.
QMV_HD float dequantize_value(const BlockQ6K& b, int i) {
  const int h = i / 128, k = (i % 128) / 32, l = i % 32;
  const int low = (b.ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 0x0f;
  const int high = (b.qh[32 * h + l] >> (2 * k)) & 0x03;
  const int q = (low | (high << 4)) - 32;
  const float scale = mul_rn(half_bits_to_float(b.d), static_cast<float>(b.scales[i / 16]));
  return mul_rn(scale, static_cast<float>(q));
}

QMV_HD float dequantize_value(const BlockQ4_0& b, int i) {
  return mul_rn(half_bits_to_float(b.d), static_cast<float>(legacy_nibble(b.qs, i) - 8));
}

QMV_HD float dequantize_value(const BlockQ4_1& b, int i) {
  return add_rn(mul_rn(half_bits_to_float(b.d), static_cast<float>(legacy_nibble(b.qs, i))),
                half_bits_to_float(b.m));
}

QMV_HD float dequantize_value(const BlockQ5_0& b, int i) {
  const int q = legacy_nibble(b.qs, i) | (legacy_fifth_bit(b.qh, i) << 4);
  return mul_rn(half_bits_to_float(b.d), static_cast<float>(q - 16));
}

QMV_HD float dequantize_value(const BlockQ5_1& b, int i) {
  const int q = legacy_nibble(b.qs, i) | (legacy_fifth_bit(b.qh, i) << 4);
  return add_rn(mul_rn(half_bits_to_float(b.d), static_cast<float>(q)), half_bits_to_float(b.m));
}

QMV_HD float dequantize_value(const BlockQ8_0& b, int i) {
  return mul_rn(half_bits_to_float(b.d), static_cast<float>(b.qs[i]));
}

// Value `i` of a row of `type` that starts at `row` (2-byte aligned; 4-byte for F32).
// One switch per value: the type is the same for every thread of a launch.
QMV_HD float dequantize_row_value(WeightType type, const std::uint8_t* row, std::int64_t i) {
  switch (type) {
    case WeightType::Q4_K:
      return dequantize_value(reinterpret_cast<const BlockQ4K*>(row)[i / kSuperBlock], static_cast<int>(i % kSuperBlock));
    case WeightType::Q5_K:
      return dequantize_value(reinterpret_cast<const BlockQ5K*>(row)[i / kSuperBlock], static_cast<int>(i % kSuperBlock));
    case WeightType::Q6_K:
      return dequantize_value(reinterpret_cast<const BlockQ6K*>(row)[i / kSuperBlock], static_cast<int>(i % kSuperBlock));
    case WeightType::Q4_0:
      return dequantize_value(reinterpret_cast<const BlockQ4_0*>(row)[i / kLegacyBlock], static_cast<int>(i % kLegacyBlock));
    case WeightType::Q4_1:
      return dequantize_value(reinterpret_cast<const BlockQ4_1*>(row)[i / kLegacyBlock], static_cast<int>(i % kLegacyBlock));
    case WeightType::Q5_0:
      return dequantize_value(reinterpret_cast<const BlockQ5_0*>(row)[i / kLegacyBlock], static_cast<int>(i % kLegacyBlock));
    case WeightType::Q5_1:
      return dequantize_value(reinterpret_cast<const BlockQ5_1*>(row)[i / kLegacyBlock], static_cast<int>(i % kLegacyBlock));
    case WeightType::Q8_0:
      return dequantize_value(reinterpret_cast<const BlockQ8_0*>(row)[i / kLegacyBlock], static_cast<int>(i % kLegacyBlock));
    case WeightType::F16:
      return half_bits_to_float(reinterpret_cast<const std::uint16_t*>(row)[i]);
    case WeightType::BF16:
      return bf16_bits_to_float(reinterpret_cast<const std::uint16_t*>(row)[i]);
    case WeightType::F32:
      return reinterpret_cast<const float*>(row)[i];
  }
  return 0.0f;
}

// The launch of the row dequantizer: one thread per value, in CTAs of
// kDequantizeThreads; n values need dequantize_ctas(n) CTAs (an embedding row is at most
// a few ten thousand values, far below any grid limit).
inline constexpr int kDequantizeThreads = 256;
QMV_HD std::int64_t dequantize_ctas(std::int64_t n) { return (n + kDequantizeThreads - 1) / kDequantizeThreads; }

// The row the dequantizer reads for a row index from device memory: clamped into the
// matrix, so a corrupt index (a token no check saw) reads a real row instead of memory
// past the matrix. The host refuses such tokens before they reach the device.
QMV_HD std::int64_t clamped_row(int row_index, std::int64_t rows) {
  if (row_index < 0) return 0;
  return row_index < rows ? row_index : rows - 1;
}

}  // namespace qmv::cuda
