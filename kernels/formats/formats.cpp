// Names, sizes, the packed 6-bit scales, and dequantization of the GGUF weight types.
//
// The dequantizers follow the GGUF definition literally and in the same order of
// float operations (scale = d * sc in fp32, then scale * q - dmin * m), so that the
// values are those any GGUF reader computes; tests/gguf_crosscheck.py checks this
// against the reference Python implementation. For the legacy quants d*q is exact in
// fp32 (11-bit mantissa times at most 8 bits), so only the + m of the _1 types rounds.
#include <cassert>
#include <cctype>
#include <cstring>

#include "formats/formats.h"

namespace qmv {

// ---------------------------------------------------------------------------------
// Names

std::string_view to_string(WeightType t) {
  switch (t) {
    case WeightType::Q4_K: return "q4_K";
    case WeightType::Q5_K: return "q5_K";
    case WeightType::Q6_K: return "q6_K";
    case WeightType::Q4_0: return "q4_0";
    case WeightType::Q4_1: return "q4_1";
    case WeightType::Q5_0: return "q5_0";
    case WeightType::Q5_1: return "q5_1";
    case WeightType::Q8_0: return "q8_0";
    case WeightType::F16: return "f16";
    case WeightType::BF16: return "bf16";
    case WeightType::F32: return "f32";
  }
  return "unknown";
}

std::string_view to_string(ActFormat f) {
  switch (f) {
    case ActFormat::F32: return "f32";
    case ActFormat::Q8_K: return "q8_K";
    case ActFormat::Q8_1: return "q8_1";
  }
  return "unknown";
}

namespace {

bool equals_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto ca = static_cast<unsigned char>(a[i]);
    const auto cb = static_cast<unsigned char>(b[i]);
    if (std::tolower(ca) != std::tolower(cb)) return false;
  }
  return true;
}

}  // namespace

bool parse_weight_type(std::string_view s, WeightType& out) {
  for (WeightType t : kAllWeightTypes) {
    if (equals_ignoring_case(s, to_string(t))) {
      out = t;
      return true;
    }
  }
  return false;
}

bool parse_act_format(std::string_view s, ActFormat& out) {
  for (ActFormat f : {ActFormat::F32, ActFormat::Q8_K, ActFormat::Q8_1}) {
    if (equals_ignoring_case(s, to_string(f))) {
      out = f;
      return true;
    }
  }
  return false;
}

// ---------------------------------------------------------------------------------
// Sizes

std::size_t block_bytes(WeightType t) {
  switch (t) {
    case WeightType::Q4_K: return sizeof(BlockQ4K);
    case WeightType::Q5_K: return sizeof(BlockQ5K);
    case WeightType::Q6_K: return sizeof(BlockQ6K);
    case WeightType::Q4_0: return sizeof(BlockQ4_0);
    case WeightType::Q4_1: return sizeof(BlockQ4_1);
    case WeightType::Q5_0: return sizeof(BlockQ5_0);
    case WeightType::Q5_1: return sizeof(BlockQ5_1);
    case WeightType::Q8_0: return sizeof(BlockQ8_0);
    case WeightType::F16: return sizeof(fp16_bits);
    case WeightType::BF16: return sizeof(bf16_bits);
    case WeightType::F32: return sizeof(float);
  }
  return 0;
}

int block_values(WeightType t) {
  switch (t) {
    case WeightType::Q4_K:
    case WeightType::Q5_K:
    case WeightType::Q6_K: return kSuperBlock;
    case WeightType::Q4_0:
    case WeightType::Q4_1:
    case WeightType::Q5_0:
    case WeightType::Q5_1:
    case WeightType::Q8_0: return kLegacyBlock;
    case WeightType::F16:
    case WeightType::BF16:
    case WeightType::F32: return 1;
  }
  return 0;
}

std::size_t block_bytes(ActFormat f) {
  switch (f) {
    case ActFormat::F32: return sizeof(float);
    case ActFormat::Q8_K: return sizeof(BlockQ8K);
    case ActFormat::Q8_1: return sizeof(BlockQ8_1);
  }
  return 0;
}

int block_values(ActFormat f) {
  switch (f) {
    case ActFormat::F32: return 1;
    case ActFormat::Q8_K: return kSuperBlock;
    case ActFormat::Q8_1: return kQ8_1Block;
  }
  return 0;
}

std::size_t row_bytes(WeightType t, std::int64_t cols) {
  assert(cols % block_values(t) == 0);
  return static_cast<std::size_t>(cols / block_values(t)) * block_bytes(t);
}

std::size_t row_bytes(ActFormat f, std::int64_t cols) {
  assert(cols % block_values(f) == 0);
  return static_cast<std::size_t>(cols / block_values(f)) * block_bytes(f);
}

// ---------------------------------------------------------------------------------
// The 12 scale bytes of Q4_K / Q5_K hold eight 6-bit scales and eight 6-bit mins.
// Sub-blocks 0..3 keep theirs whole in the low 6 bits of bytes 0..3 (scales) and
// 4..7 (mins). Sub-blocks 4..7 keep their low 4 bits in the nibbles of bytes 8..11
// (scale low, min high) and their top 2 bits in the spare top bits of bytes 0..3
// (scales) and 4..7 (mins).

void unpack_scale_min_k4(int j, const std::uint8_t* packed, std::uint8_t& scale,
                         std::uint8_t& min) {
  assert(j >= 0 && j < 8);
  if (j < 4) {
    scale = packed[j] & 0x3f;
    min = packed[j + 4] & 0x3f;
  } else {
    scale = static_cast<std::uint8_t>((packed[j + 4] & 0x0f) | ((packed[j - 4] >> 6) << 4));
    min = static_cast<std::uint8_t>((packed[j + 4] >> 4) | ((packed[j] >> 6) << 4));
  }
}

void pack_scales_mins_k4(const std::uint8_t scales[8], const std::uint8_t mins[8],
                         std::uint8_t packed[kKScaleBytes]) {
  for (int j = 0; j < 4; ++j) {
    assert(scales[j] < 64 && mins[j] < 64 && scales[j + 4] < 64 && mins[j + 4] < 64);
    const int hi = j + 4;
    packed[j] = static_cast<std::uint8_t>((scales[j] & 0x3f) | ((scales[hi] >> 4) << 6));
    packed[j + 4] = static_cast<std::uint8_t>((mins[j] & 0x3f) | ((mins[hi] >> 4) << 6));
    packed[j + 8] = static_cast<std::uint8_t>((scales[hi] & 0x0f) | ((mins[hi] & 0x0f) << 4));
  }
}

// ---------------------------------------------------------------------------------
// Weight dequantization.
//
// Q4_K / Q5_K: the 256 weights are 4 chunks of 64; in chunk c, byte l of qs[32c..]
// holds weight 64c+l in its low nibble (sub-block 2c) and weight 64c+32+l in its high
// nibble (sub-block 2c+1). For Q5_K, bit j of qh[l] is the fifth bit of weight 32j+l.

void unpack_q6_K_quants(const BlockQ6K& block, std::int8_t q[kSuperBlock]) {
  for (int half = 0; half < 2; ++half) {
    const std::uint8_t* ql = block.ql + 64 * half;
    const std::uint8_t* qh = block.qh + 32 * half;
    std::int8_t* out = q + 128 * half;
    for (int l = 0; l < 32; ++l) {
      out[l] = static_cast<std::int8_t>(((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32);
      out[l + 32] = static_cast<std::int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
      out[l + 64] = static_cast<std::int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
      out[l + 96] = static_cast<std::int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
    }
  }
}

void dequantize_row_q4_K(const BlockQ4K* x, float* y, std::int64_t n) {
  assert(n % kSuperBlock == 0);
  for (std::int64_t b = 0; b < n / kSuperBlock; ++b) {
    const BlockQ4K& block = x[b];
    const float d = fp16_to_fp32(block.d);
    const float dmin = fp16_to_fp32(block.dmin);
    for (int chunk = 0; chunk < 4; ++chunk) {
      const std::uint8_t* q = block.qs + 32 * chunk;
      for (int half = 0; half < 2; ++half) {
        const int j = 2 * chunk + half;
        std::uint8_t sc, m;
        unpack_scale_min_k4(j, block.scales, sc, m);
        const float scale = d * sc;
        const float offset = dmin * m;
        const int shift = 4 * half;
        for (int l = 0; l < 32; ++l) {
          y[32 * j + l] = scale * static_cast<float>((q[l] >> shift) & 0x0f) - offset;
        }
      }
    }
    y += kSuperBlock;
  }
}

void dequantize_row_q5_K(const BlockQ5K* x, float* y, std::int64_t n) {
  assert(n % kSuperBlock == 0);
  for (std::int64_t b = 0; b < n / kSuperBlock; ++b) {
    const BlockQ5K& block = x[b];
    const float d = fp16_to_fp32(block.d);
    const float dmin = fp16_to_fp32(block.dmin);
    for (int chunk = 0; chunk < 4; ++chunk) {
      const std::uint8_t* q = block.qs + 32 * chunk;
      for (int half = 0; half < 2; ++half) {
        const int j = 2 * chunk + half;
        std::uint8_t sc, m;
        unpack_scale_min_k4(j, block.scales, sc, m);
        const float scale = d * sc;
        const float offset = dmin * m;
        const int shift = 4 * half;
        for (int l = 0; l < 32; ++l) {
          const int low = (q[l] >> shift) & 0x0f;
          const int high = (block.qh[l] >> j) & 1;
          y[32 * j + l] = scale * static_cast<float>(low | (high << 4)) - offset;
        }
      }
    }
    y += kSuperBlock;
  }
}

// Q6_K: two halves of 128 weights. In half h, with ql = ql[64h..], qh = qh[32h..] and
// l in 0..31, the four weights 128h + l + 32k (k = 0..3) take their low 4 bits from
// the low nibble of ql[l] (k=0), of ql[l+32] (k=1), the high nibble of ql[l] (k=2), of
// ql[l+32] (k=3), and their top 2 bits from bits 2k..2k+1 of qh[l]. Sub-block j (16
// weights) has the signed scale scales[j]; the quant is stored offset by 32.

void dequantize_row_q6_K(const BlockQ6K* x, float* y, std::int64_t n) {
  assert(n % kSuperBlock == 0);
  for (std::int64_t b = 0; b < n / kSuperBlock; ++b) {
    const BlockQ6K& block = x[b];
    const float d = fp16_to_fp32(block.d);
    for (int h = 0; h < 2; ++h) {
      const std::uint8_t* ql = block.ql + 64 * h;
      const std::uint8_t* qh = block.qh + 32 * h;
      for (int k = 0; k < 4; ++k) {
        const std::uint8_t* low_src = ql + 32 * (k & 1);
        const int low_shift = 4 * (k >> 1);
        for (int l = 0; l < 32; ++l) {
          const int index = 128 * h + 32 * k + l;
          const int low = (low_src[l] >> low_shift) & 0x0f;
          const int high = (qh[l] >> (2 * k)) & 0x03;
          const int q = (low | (high << 4)) - 32;
          const float scale = d * static_cast<float>(block.scales[index / 16]);
          y[index] = scale * static_cast<float>(q);
        }
      }
    }
    y += kSuperBlock;
  }
}

// The legacy quants: the 5-bit types add bit i of qh (little endian) as bit 4 of
// weight i's quant.

namespace {

// The 32 quants of a legacy block, unsigned: low nibbles, then high nibbles.
void unpack_nibbles(const std::uint8_t* qs, int q[kLegacyBlock]) {
  for (int l = 0; l < kLegacyBlock / 2; ++l) {
    q[l] = qs[l] & 0x0f;
    q[l + kLegacyBlock / 2] = qs[l] >> 4;
  }
}

void add_fifth_bits(const std::uint8_t* qh, int q[kLegacyBlock]) {
  std::uint32_t high;
  std::memcpy(&high, qh, sizeof(high));  // little endian on every host we build for
  for (int i = 0; i < kLegacyBlock; ++i) q[i] |= static_cast<int>((high >> i) & 1u) << 4;
}

}  // namespace

void dequantize_row_q4_0(const BlockQ4_0* x, float* y, std::int64_t n) {
  assert(n % kLegacyBlock == 0);
  for (std::int64_t b = 0; b < n / kLegacyBlock; ++b, y += kLegacyBlock) {
    const float d = fp16_to_fp32(x[b].d);
    int q[kLegacyBlock];
    unpack_nibbles(x[b].qs, q);
    for (int i = 0; i < kLegacyBlock; ++i) y[i] = d * static_cast<float>(q[i] - 8);
  }
}

void dequantize_row_q4_1(const BlockQ4_1* x, float* y, std::int64_t n) {
  assert(n % kLegacyBlock == 0);
  for (std::int64_t b = 0; b < n / kLegacyBlock; ++b, y += kLegacyBlock) {
    const float d = fp16_to_fp32(x[b].d);
    const float m = fp16_to_fp32(x[b].m);
    int q[kLegacyBlock];
    unpack_nibbles(x[b].qs, q);
    for (int i = 0; i < kLegacyBlock; ++i) y[i] = d * static_cast<float>(q[i]) + m;
  }
}

void dequantize_row_q5_0(const BlockQ5_0* x, float* y, std::int64_t n) {
  assert(n % kLegacyBlock == 0);
  for (std::int64_t b = 0; b < n / kLegacyBlock; ++b, y += kLegacyBlock) {
    const float d = fp16_to_fp32(x[b].d);
    int q[kLegacyBlock];
    unpack_nibbles(x[b].qs, q);
    add_fifth_bits(x[b].qh, q);
    for (int i = 0; i < kLegacyBlock; ++i) y[i] = d * static_cast<float>(q[i] - 16);
  }
}

void dequantize_row_q5_1(const BlockQ5_1* x, float* y, std::int64_t n) {
  assert(n % kLegacyBlock == 0);
  for (std::int64_t b = 0; b < n / kLegacyBlock; ++b, y += kLegacyBlock) {
    const float d = fp16_to_fp32(x[b].d);
    const float m = fp16_to_fp32(x[b].m);
    int q[kLegacyBlock];
    unpack_nibbles(x[b].qs, q);
    add_fifth_bits(x[b].qh, q);
    for (int i = 0; i < kLegacyBlock; ++i) y[i] = d * static_cast<float>(q[i]) + m;
  }
}

void dequantize_row_q8_0(const BlockQ8_0* x, float* y, std::int64_t n) {
  assert(n % kLegacyBlock == 0);
  for (std::int64_t b = 0; b < n / kLegacyBlock; ++b, y += kLegacyBlock) {
    const float d = fp16_to_fp32(x[b].d);
    for (int i = 0; i < kLegacyBlock; ++i) y[i] = d * static_cast<float>(x[b].qs[i]);
  }
}

void dequantize_row_f16(const fp16_bits* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}

void dequantize_row_bf16(const bf16_bits* x, float* y, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(x[i]);
}

void dequantize_row(WeightType t, const void* blocks, float* y, std::int64_t n) {
  switch (t) {
    case WeightType::Q4_K:
      dequantize_row_q4_K(static_cast<const BlockQ4K*>(blocks), y, n);
      return;
    case WeightType::Q5_K:
      dequantize_row_q5_K(static_cast<const BlockQ5K*>(blocks), y, n);
      return;
    case WeightType::Q6_K:
      dequantize_row_q6_K(static_cast<const BlockQ6K*>(blocks), y, n);
      return;
    case WeightType::Q4_0:
      dequantize_row_q4_0(static_cast<const BlockQ4_0*>(blocks), y, n);
      return;
    case WeightType::Q4_1:
      dequantize_row_q4_1(static_cast<const BlockQ4_1*>(blocks), y, n);
      return;
    case WeightType::Q5_0:
      dequantize_row_q5_0(static_cast<const BlockQ5_0*>(blocks), y, n);
      return;
    case WeightType::Q5_1:
      dequantize_row_q5_1(static_cast<const BlockQ5_1*>(blocks), y, n);
      return;
    case WeightType::Q8_0:
      dequantize_row_q8_0(static_cast<const BlockQ8_0*>(blocks), y, n);
      return;
    case WeightType::F16:
      dequantize_row_f16(static_cast<const fp16_bits*>(blocks), y, n);
      return;
    case WeightType::BF16:
      dequantize_row_bf16(static_cast<const bf16_bits*>(blocks), y, n);
      return;
    case WeightType::F32:
      std::memcpy(y, blocks, static_cast<std::size_t>(n) * sizeof(float));
      return;
  }
}

// ---------------------------------------------------------------------------------
// Activations

void dequantize_row_q8_K(const BlockQ8K* x, float* y, std::int64_t n) {
  assert(n % kSuperBlock == 0);
  for (std::int64_t b = 0; b < n / kSuperBlock; ++b) {
    for (int i = 0; i < kSuperBlock; ++i) {
      y[b * kSuperBlock + i] = x[b].d * static_cast<float>(x[b].qs[i]);
    }
  }
}

void dequantize_row_q8_1(const BlockQ8_1* x, float* y, std::int64_t n) {
  assert(n % kQ8_1Block == 0);
  for (std::int64_t b = 0; b < n / kQ8_1Block; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    for (int i = 0; i < kQ8_1Block; ++i) {
      y[b * kQ8_1Block + i] = d * static_cast<float>(x[b].qs[i]);
    }
  }
}

void dequantize_activation(ActFormat f, const void* in, float* y, std::int64_t n) {
  switch (f) {
    case ActFormat::F32:
      std::memcpy(y, in, static_cast<std::size_t>(n) * sizeof(float));
      return;
    case ActFormat::Q8_K:
      dequantize_row_q8_K(static_cast<const BlockQ8K*>(in), y, n);
      return;
    case ActFormat::Q8_1:
      dequantize_row_q8_1(static_cast<const BlockQ8_1*>(in), y, n);
      return;
  }
}

}  // namespace qmv
