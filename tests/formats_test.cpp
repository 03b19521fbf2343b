// Tests of the GGUF block formats: sizes, fp16 and bf16, hand-built blocks with
// hand-computed values, the 6-bit scale packing, and the quality of our quantizers.
//
// The bit-exactness of our layouts against a real GGUF implementation is checked
// separately by tests/gguf_crosscheck.py (against the `gguf` Python package).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "formats/formats.h"
#include "kernels/activation_quantizers.h"
#include "tests/skips.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

using testing::fresh_seed;

std::vector<float> gaussian(std::size_t n, std::uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<float> quantize_dequantize(WeightType t, const std::vector<float>& x) {
  const auto n = static_cast<std::int64_t>(x.size());
  std::vector<std::uint8_t> blocks(row_bytes(t, n));
  quantize_row(t, x.data(), blocks.data(), n);
  std::vector<float> y(x.size());
  dequantize_row(t, blocks.data(), y.data(), n);
  return y;
}

// sqrt(sum (x-y)^2 / sum x^2): the RMSE relative to the rms of x.
double relative_rmse(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0.0, ref = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double e = static_cast<double>(x[i]) - y[i];
    err += e * e;
    ref += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(err / ref);
}

constexpr WeightType kWeightTypes[] = {WeightType::Q4_K, WeightType::Q5_K, WeightType::Q6_K};

// ---------------------------------------------------------------------------------
// Names and sizes

TEST(Formats, NamesRoundTripAndParseIgnoresCase) {
  for (WeightType t : kWeightTypes) {
    WeightType parsed{};
    ASSERT_TRUE(parse_weight_type(to_string(t), parsed));
    EXPECT_EQ(parsed, t);
  }
  EXPECT_EQ(to_string(WeightType::Q4_K), "q4_K");
  EXPECT_EQ(to_string(WeightType::Q5_K), "q5_K");
  EXPECT_EQ(to_string(WeightType::Q6_K), "q6_K");
  WeightType t{};
  EXPECT_TRUE(parse_weight_type("Q5_K", t));
  EXPECT_EQ(t, WeightType::Q5_K);
  EXPECT_TRUE(parse_weight_type("q6_k", t));
  EXPECT_EQ(t, WeightType::Q6_K);
  EXPECT_FALSE(parse_weight_type("q4_2", t));
  EXPECT_FALSE(parse_weight_type("q4_K ", t));
  EXPECT_FALSE(parse_weight_type("", t));

  EXPECT_EQ(to_string(ActFormat::F32), "f32");
  EXPECT_EQ(to_string(ActFormat::Q8_K), "q8_K");
  EXPECT_EQ(to_string(ActFormat::Q8_1), "q8_1");
  ActFormat f{};
  EXPECT_TRUE(parse_act_format("F32", f));
  EXPECT_EQ(f, ActFormat::F32);
  EXPECT_TRUE(parse_act_format("Q8_K", f));
  EXPECT_EQ(f, ActFormat::Q8_K);
  EXPECT_TRUE(parse_act_format("q8_1", f));
  EXPECT_EQ(f, ActFormat::Q8_1);
  EXPECT_FALSE(parse_act_format("q8_0", f));
}

TEST(Formats, EveryWeightTypeHasItsGgufName) {
  const char* names[] = {"q4_K", "q5_K", "q6_K", "q4_0", "q4_1", "q5_0",
                         "q5_1", "q8_0", "f16",  "bf16", "f32"};
  ASSERT_EQ(std::size(names), std::size(kAllWeightTypes));
  for (std::size_t k = 0; k < std::size(names); ++k) {
    EXPECT_EQ(to_string(kAllWeightTypes[k]), names[k]);
    WeightType parsed{};
    ASSERT_TRUE(parse_weight_type(names[k], parsed)) << names[k];
    EXPECT_EQ(parsed, kAllWeightTypes[k]);
  }
  WeightType t{};
  EXPECT_TRUE(parse_weight_type("BF16", t));
  EXPECT_EQ(t, WeightType::BF16);
  EXPECT_TRUE(parse_weight_type("Q8_0", t));
  EXPECT_EQ(t, WeightType::Q8_0);
}

TEST(Formats, LegacyAndFloatSizes) {
  const struct {
    WeightType type;
    std::size_t bytes;
    int values;
  } expected[] = {
      {WeightType::Q4_0, 18, 32}, {WeightType::Q4_1, 20, 32}, {WeightType::Q5_0, 22, 32},
      {WeightType::Q5_1, 24, 32}, {WeightType::Q8_0, 34, 32}, {WeightType::F16, 2, 1},
      {WeightType::BF16, 2, 1},   {WeightType::F32, 4, 1},    {WeightType::Q4_K, 144, 256},
  };
  for (const auto& e : expected) {
    EXPECT_EQ(block_bytes(e.type), e.bytes) << to_string(e.type);
    EXPECT_EQ(block_values(e.type), e.values) << to_string(e.type);
  }
  // A 4096-wide row, a row that is not a multiple of 256 (the legacy types of Q4_K_M
  // files take those), and float rows of any length.
  EXPECT_EQ(row_bytes(WeightType::Q4_0, 4096), 128u * 18u);
  EXPECT_EQ(row_bytes(WeightType::Q8_0, 4096), 128u * 34u);
  EXPECT_EQ(row_bytes(WeightType::Q5_1, 96), 3u * 24u);
  EXPECT_EQ(row_bytes(WeightType::F16, 7), 14u);
  EXPECT_EQ(row_bytes(WeightType::BF16, 4096), 8192u);
  EXPECT_EQ(row_bytes(WeightType::F32, 3), 12u);
  static_assert(kValuesPerBlock<BlockQ8_0> == 32 && kValuesPerBlock<fp16_bits> == 1 &&
                kValuesPerBlock<BlockQ6K> == 256);
}

TEST(Formats, BlockAndRowSizes) {
  EXPECT_EQ(block_bytes(WeightType::Q4_K), 144u);
  EXPECT_EQ(block_bytes(WeightType::Q5_K), 176u);
  EXPECT_EQ(block_bytes(WeightType::Q6_K), 210u);
  EXPECT_EQ(block_bytes(ActFormat::F32), 4u);
  EXPECT_EQ(block_bytes(ActFormat::Q8_K), 292u);
  EXPECT_EQ(block_bytes(ActFormat::Q8_1), 36u);
  EXPECT_EQ(block_values(ActFormat::F32), 1);
  EXPECT_EQ(block_values(ActFormat::Q8_K), 256);
  EXPECT_EQ(block_values(ActFormat::Q8_1), 32);

  // A 4096-wide row (Llama-7B hidden size) and a 14336-wide one (Llama-3-8B FFN).
  EXPECT_EQ(row_bytes(WeightType::Q4_K, 4096), 16u * 144u);
  EXPECT_EQ(row_bytes(WeightType::Q5_K, 4096), 16u * 176u);
  EXPECT_EQ(row_bytes(WeightType::Q6_K, 14336), 56u * 210u);
  EXPECT_EQ(row_bytes(ActFormat::F32, 4096), 16384u);
  EXPECT_EQ(row_bytes(ActFormat::Q8_K, 4096), 16u * 292u);
  EXPECT_EQ(row_bytes(ActFormat::Q8_1, 4096), 128u * 36u);
  EXPECT_EQ(row_bytes(WeightType::Q4_K, 256), 144u);
  EXPECT_EQ(row_bytes(ActFormat::Q8_1, 32), 36u);
}

// ---------------------------------------------------------------------------------
// fp16

TEST(Fp16, KnownValues) {
  EXPECT_EQ(fp16_to_fp32(0x0000), 0.0f);
  EXPECT_TRUE(std::signbit(fp16_to_fp32(0x8000)));
  EXPECT_EQ(fp16_to_fp32(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_fp32(0xc000), -2.0f);
  EXPECT_EQ(fp16_to_fp32(0x3555), 0.333251953125f);
  EXPECT_EQ(fp16_to_fp32(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_fp32(0x0400), 0x1p-14f);        // smallest normal
  EXPECT_EQ(fp16_to_fp32(0x0001), 0x1p-24f);        // smallest subnormal
  EXPECT_EQ(fp16_to_fp32(0x03ff), 1023 * 0x1p-24f);  // largest subnormal
  EXPECT_EQ(fp16_to_fp32(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp16_to_fp32(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7e00)));
  EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7c01)));  // signalling NaN stays a NaN

  EXPECT_EQ(fp32_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(fp32_to_fp16(-2.0f), 0xc000);
  EXPECT_EQ(fp32_to_fp16(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(fp32_to_fp16(65519.99f), 0x7bff);  // below the rounding boundary
  EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);   // the tie rounds to even: infinity
  EXPECT_EQ(fp32_to_fp16(1e6f), 0x7c00);
  EXPECT_EQ(fp32_to_fp16(-1e6f), 0xfc00);
  EXPECT_EQ(fp32_to_fp16(std::numeric_limits<float>::infinity()), 0x7c00);
  const fp16_bits nan = fp32_to_fp16(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  // A NaN whose payload is only in the bits fp16 drops must still be a NaN.
  EXPECT_NE(fp32_to_fp16(std::bit_cast<float>(0x7f800001u)) & 0x03ff, 0);

  // Ties to even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(fp32_to_fp16(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(fp32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_EQ(fp32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  // Subnormals: 2^-25 is halfway between 0 and the smallest subnormal.
  EXPECT_EQ(fp32_to_fp16(0x1p-25f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(0x1p-25f * 1.0001f), 0x0001);
  EXPECT_EQ(fp32_to_fp16(3 * 0x1p-25f), 0x0002);
  EXPECT_EQ(fp32_to_fp16(5 * 0x1p-25f), 0x0002);
  EXPECT_EQ(fp32_to_fp16(1e-8f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(1e-30f), 0x0000);
  EXPECT_EQ(fp32_to_fp16(-1e-30f), 0x8000);
  EXPECT_EQ(fp32_to_fp16(1023.5f * 0x1p-24f), 0x0400);  // rounds up into the normals
  EXPECT_EQ(fp32_to_fp16(6e-5f), 0x03ef);
}

TEST(Fp16, EveryHalfRoundTripsThroughFloat) {
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const auto bits = static_cast<fp16_bits>(h);
    const float f = fp16_to_fp32(bits);
    const bool is_nan = (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0;
    if (is_nan) {
      ASSERT_TRUE(std::isnan(f)) << h;
      continue;
    }
    ASSERT_EQ(fp32_to_fp16(f), bits) << "h=" << h << " f=" << f;
  }
}

// For every pair of neighbouring finite fp16 values: the midpoint rounds to the even
// one, and anything just off the midpoint rounds to the nearer one. This pins round to
// nearest even without trusting any other converter.
TEST(Fp16, MidpointsRoundToNearestEven) {
  for (std::uint32_t h = 0; h < 0x7bff; ++h) {
    const float lo = fp16_to_fp32(static_cast<fp16_bits>(h));
    const float hi = fp16_to_fp32(static_cast<fp16_bits>(h + 1));
    const float mid = lo + (hi - lo) / 2;  // exact in fp32
    const fp16_bits even = (h & 1) == 0 ? static_cast<fp16_bits>(h) : static_cast<fp16_bits>(h + 1);
    ASSERT_EQ(fp32_to_fp16(mid), even) << "h=" << h;
    ASSERT_EQ(fp32_to_fp16(std::nextafter(mid, 0.0f)), h) << "h=" << h;
    ASSERT_EQ(fp32_to_fp16(std::nextafter(mid, 1e9f)), h + 1) << "h=" << h;
    ASSERT_EQ(fp32_to_fp16(-mid), even | 0x8000) << "h=" << h;
  }
}

#if defined(__FLT16_MAX__)
// The compiler's own conversion (a libgcc/compiler-rt routine without F16C) is an
// independent oracle on random bit patterns over the whole float range.
TEST(Fp16, AgreesWithCompilerFloat16OnRandomFloats) {
  std::mt19937 rng(fresh_seed("fp16 oracle"));
  for (int i = 0; i < 2'000'000; ++i) {
    const float f = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    if (std::isnan(f)) continue;
    const auto expected = std::bit_cast<std::uint16_t>(static_cast<_Float16>(f));
    ASSERT_EQ(fp32_to_fp16(f), expected) << "f=" << f;
  }
}
#else
TEST(Fp16, AgreesWithCompilerFloat16OnRandomFloats) {
  QMV_SKIP_UNLESS_CI("this compiler has no _Float16: fp32_to_fp16 is not checked against it");
}
#endif

// ---------------------------------------------------------------------------------
// The 6-bit scale packing of Q4_K / Q5_K.

// Eight scales and eight mins, sub-blocks 4..7 using the upper two bits, and the
// twelve bytes written out by hand from the GGUF rule:
//   byte j   (j<4): scale[j]   | (scale[j+4] >> 4) << 6
//   byte j+4 (j<4): min[j]     | (min[j+4]   >> 4) << 6
//   byte j+8 (j<4): (scale[j+4] & 15) | (min[j+4] & 15) << 4
constexpr std::uint8_t kScales[8] = {1, 2, 3, 4, 17, 33, 50, 63};
constexpr std::uint8_t kMins[8] = {0, 5, 10, 63, 16, 31, 48, 7};
constexpr std::uint8_t kPackedScales[12] = {0x41, 0x82, 0xc3, 0xc4, 0x40, 0x45,
                                            0xca, 0x3f, 0x01, 0xf1, 0x02, 0x7f};

TEST(ScalePacking, HandPackedBytes) {
  std::uint8_t packed[kKScaleBytes];
  pack_scales_mins_k4(kScales, kMins, packed);
  for (int i = 0; i < kKScaleBytes; ++i) EXPECT_EQ(packed[i], kPackedScales[i]) << "byte " << i;
  for (int j = 0; j < 8; ++j) {
    std::uint8_t sc = 255, m = 255;
    unpack_scale_min_k4(j, kPackedScales, sc, m);
    EXPECT_EQ(sc, kScales[j]) << "sub-block " << j;
    EXPECT_EQ(m, kMins[j]) << "sub-block " << j;
  }
}

// Every (scale, min) pair of 6-bit values at every sub-block position.
TEST(ScalePacking, AllValuesRoundTrip) {
  for (int s = 0; s < 64; ++s) {
    for (int m = 0; m < 64; ++m) {
      std::uint8_t scales[8], mins[8];
      for (int j = 0; j < 8; ++j) {
        scales[j] = static_cast<std::uint8_t>((s + 7 * j) % 64);
        mins[j] = static_cast<std::uint8_t>((m + 13 * j) % 64);
      }
      std::uint8_t packed[kKScaleBytes];
      pack_scales_mins_k4(scales, mins, packed);
      for (int j = 0; j < 8; ++j) {
        std::uint8_t sc, mn;
        unpack_scale_min_k4(j, packed, sc, mn);
        ASSERT_EQ(sc, scales[j]) << "s=" << s << " m=" << m << " j=" << j;
        ASSERT_EQ(mn, mins[j]) << "s=" << s << " m=" << m << " j=" << j;
      }
    }
  }
}

// ---------------------------------------------------------------------------------
// Hand-built blocks. Each checks a few values worked out by hand (written in the
// comment next to them) and then every value against the GGUF definition written
// index by index, independently of the dequantizer's loop structure.

BlockQ4K hand_built_q4k() {
  BlockQ4K b{};
  b.d = 0x3800;     // 0.5
  b.dmin = 0x3400;  // 0.25
  std::memcpy(b.scales, kPackedScales, sizeof(b.scales));
  for (int k = 0; k < 128; ++k) b.qs[k] = static_cast<std::uint8_t>(k);
  return b;
}

// Weight i of a Q4_K/Q5_K block: sub-block j = i/32; its 4 low bits are in byte
// 32*(i/64) + i%32, low nibble for even j and high nibble for odd j.
int q4k_low_bits(const std::uint8_t* qs, int i) {
  const std::uint8_t byte = qs[32 * (i / 64) + i % 32];
  return (i / 32) % 2 == 0 ? byte & 15 : byte >> 4;
}

TEST(KnownAnswer, Q4K) {
  const BlockQ4K b = hand_built_q4k();
  float y[256];
  dequantize_row_q4_K(&b, y, 256);
  // y = 0.5*sc*q - 0.25*m, with qs[k] = k so low nibble = k%16, high nibble = k/16.
  EXPECT_EQ(y[0], 0.0f);      // j0 (sc 1, m 0): q 0
  EXPECT_EQ(y[5], 2.5f);      // j0: q 5 -> 0.5*1*5
  EXPECT_EQ(y[37], -1.25f);   // j1 (sc 2, m 5): high nibble of 5 = 0 -> -0.25*5
  EXPECT_EQ(y[63], -0.25f);   // j1: high nibble of 31 = 1 -> 1 - 1.25
  EXPECT_EQ(y[71], 8.0f);     // j2 (sc 3, m 10): low nibble of 39 = 7 -> 10.5 - 2.5
  EXPECT_EQ(y[180], 74.75f);  // j5 (sc 33, m 31): high nibble of 84 = 5 -> 82.5 - 7.75
  EXPECT_EQ(y[195], 63.0f);   // j6 (sc 50, m 48): low nibble of 99 = 3 -> 75 - 12
  EXPECT_EQ(y[255], 218.75f); // j7 (sc 63, m 7): high nibble of 127 = 7 -> 220.5 - 1.75
  for (int i = 0; i < 256; ++i) {
    const int j = i / 32;
    const float expected = 0.5f * kScales[j] * q4k_low_bits(b.qs, i) - 0.25f * kMins[j];
    ASSERT_EQ(y[i], expected) << "weight " << i;
  }
  // The dispatcher gives the same.
  float z[256];
  dequantize_row(WeightType::Q4_K, &b, z, 256);
  EXPECT_EQ(std::memcmp(y, z, sizeof(y)), 0);
}

TEST(KnownAnswer, Q5K) {
  BlockQ5K b{};
  b.d = 0x3800;     // 0.5
  b.dmin = 0x3400;  // 0.25
  std::memcpy(b.scales, kPackedScales, sizeof(b.scales));
  for (int k = 0; k < 128; ++k) b.qs[k] = static_cast<std::uint8_t>(k);
  // Fifth bit of weight 32*j + l is bit j of qh[l]: set for even j when l is even,
  // for odd j when l is odd.
  for (int l = 0; l < 32; ++l) b.qh[l] = l % 2 == 0 ? 0x55 : 0xaa;
  float y[256];
  dequantize_row_q5_K(&b, y, 256);
  EXPECT_EQ(y[4], 10.0f);     // j0, l 4 even: q = 4 + 16 -> 0.5*1*20
  EXPECT_EQ(y[5], 2.5f);      // j0, l 5 odd: no fifth bit, q 5
  EXPECT_EQ(y[37], 14.75f);   // j1 (sc 2, m 5), l 5 odd: q = 0 + 16 -> 16 - 1.25
  EXPECT_EQ(y[180], 74.75f);  // j5, l 20 even: no fifth bit (odd j), q 5
  EXPECT_EQ(y[194], 438.0f);  // j6 (sc 50, m 48), l 2 even: q = 2 + 16 -> 450 - 12
  EXPECT_EQ(y[195], 63.0f);   // j6, l 3 odd: q 3
  EXPECT_EQ(y[255], 722.75f); // j7 (sc 63, m 7), l 31 odd: q = 7 + 16 -> 724.5 - 1.75
  for (int i = 0; i < 256; ++i) {
    const int j = i / 32, l = i % 32;
    const int q = q4k_low_bits(b.qs, i) | (((b.qh[l] >> j) & 1) << 4);
    const float expected = 0.5f * kScales[j] * q - 0.25f * kMins[j];
    ASSERT_EQ(y[i], expected) << "weight " << i;
  }
}

TEST(KnownAnswer, Q6K) {
  BlockQ6K b{};
  for (int k = 0; k < 128; ++k) b.ql[k] = static_cast<std::uint8_t>(k);
  // qh bit pairs (k = 0..3, low pair first): 3,2,1,0 for even bytes, 0,1,2,3 for odd.
  for (int k = 0; k < 64; ++k) b.qh[k] = k % 2 == 0 ? 0x1b : 0xe4;
  const std::int8_t scales[16] = {1, -1, 2, -3, 5, -8, 13, -21, 34, -55, 89, -128, 127, 0, 7, -7};
  std::memcpy(b.scales, scales, sizeof(scales));
  b.d = 0x3000;  // 0.125
  float y[256];
  dequantize_row_q6_K(&b, y, 256);
  // y = 0.125 * scale[i/16] * (q - 32).
  EXPECT_EQ(y[0], 2.0f);        // ql[0] low 0, qh[0] pair0 = 3: q 48 -> 16
  EXPECT_EQ(y[1], -3.875f);     // ql[1] low 1, qh[1] pair0 = 0: q 1 -> -31
  EXPECT_EQ(y[33], -3.75f);     // j2 (2): ql[33] low 1, qh[1] pair1 = 1: q 17 -> -15
  EXPECT_EQ(y[70], -10.0f);     // j4 (5): ql[6] high 0, qh[6] pair2 = 1: q 16 -> -16
  EXPECT_EQ(y[127], -49.875f);  // j7 (-21): ql[63] high 3, qh[31] pair3 = 3: q 51 -> 19
  EXPECT_EQ(y[176], 0.0f);      // j11 (-128): ql[112] low 0, qh[48] pair1 = 2: q 32 -> 0
  EXPECT_EQ(y[177], 240.0f);    // j11 (-128): ql[113] low 1, qh[49] pair1 = 1: q 17 -> -15
  EXPECT_EQ(y[200], -190.5f);   // j12 (127): ql[72] high 4, qh[40] pair2 = 1: q 20 -> -12
  EXPECT_EQ(y[255], -20.125f);  // j15 (-7): ql[127] high 7, qh[63] pair3 = 3: q 55 -> 23
  for (int i = 0; i < 256; ++i) {
    // Weight i: half h = i/128, r = i%128, group k = r/32, l = r%32. Low 4 bits from
    // ql[64h + l + 32*(k%2)] (low nibble for k < 2, high for k >= 2); top 2 bits are
    // bits 2k, 2k+1 of qh[32h + l].
    const int h = i / 128, r = i % 128, k = r / 32, l = r % 32;
    const std::uint8_t low_byte = b.ql[64 * h + l + 32 * (k % 2)];
    const int low = k < 2 ? low_byte & 15 : low_byte >> 4;
    const int high = (b.qh[32 * h + l] >> (2 * k)) & 3;
    const float expected = 0.125f * scales[i / 16] * static_cast<float>((low | high << 4) - 32);
    ASSERT_EQ(y[i], expected) << "weight " << i;
  }
}

// Several blocks in a row: each block is read from its own offset.
TEST(KnownAnswer, RowsOfBlocksAdvance) {
  BlockQ4K blocks[3] = {hand_built_q4k(), hand_built_q4k(), hand_built_q4k()};
  blocks[1].d = 0x3c00;  // 1.0: doubles the scale term of the middle block
  blocks[2].dmin = 0;    // no offset in the last block
  std::vector<float> y(3 * 256);
  dequantize_row_q4_K(blocks, y.data(), 3 * 256);
  EXPECT_EQ(y[5], 2.5f);
  EXPECT_EQ(y[256 + 5], 5.0f);
  EXPECT_EQ(y[512 + 37], 0.0f);
  EXPECT_EQ(y[512 + 255], 220.5f);
}

// ---------------------------------------------------------------------------------
// Quantizer quality.
//
// The naive baseline below is what a quantizer without any search does: each
// sub-block's scale spans its range (Q4_K/Q5_K: (max - min)/qmax with the min as the
// offset; Q6_K: amax/31), the scales go to 6/8 bits against the largest, and the
// quants are rounded against the stored scales. Ours searches scale and offset for the
// least squared error of the rounded values, then refines the stored integers (without
// that last step Q5_K would miss its bound).
//
// The bounds sit between the relative RMSE of ours and of the naive one on N(0,1) rows
// (the test prints both): a correct quantizer passes with margin, a naive one fails
// (the test checks that too, so the bounds stay meaningful). ggml's reference Q4_K
// quantizer also passes the Q4_K bound.

std::vector<float> naive_quantize_dequantize(WeightType t, const std::vector<float>& x) {
  std::vector<float> y(x.size());
  auto stored = [](float v) { return fp16_to_fp32(fp32_to_fp16(v)); };
  auto round_clamp = [](float v, int lo, int hi) {
    return static_cast<int>(std::clamp(std::nearbyint(v), float(lo), float(hi)));
  };
  for (std::size_t b = 0; b < x.size(); b += 256) {
    const float* xb = x.data() + b;
    float* yb = y.data() + b;
    if (t == WeightType::Q6_K) {
      float scales[16], max_scale = 0.0f;
      for (int j = 0; j < 16; ++j) {
        float amax = 0.0f;
        for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(xb[16 * j + i]));
        scales[j] = amax / 31.0f;
        max_scale = std::max(max_scale, scales[j]);
      }
      const float d = stored(max_scale / 127.0f);
      for (int j = 0; j < 16; ++j) {
        const float scale = d * static_cast<float>(round_clamp(scales[j] / d, -128, 127));
        for (int i = 0; i < 16; ++i) {
          const float v = xb[16 * j + i];
          yb[16 * j + i] = scale == 0.0f ? 0.0f : scale * static_cast<float>(round_clamp(v / scale, -32, 31));
        }
      }
      continue;
    }
    const int qmax = t == WeightType::Q4_K ? 15 : 31;
    float scales[8], offsets[8], max_scale = 0.0f, max_offset = 0.0f;
    for (int j = 0; j < 8; ++j) {
      const float* xs = xb + 32 * j;
      const float lo = std::min(0.0f, *std::min_element(xs, xs + 32));
      const float hi = *std::max_element(xs, xs + 32);
      scales[j] = (hi - lo) / static_cast<float>(qmax);
      offsets[j] = -lo;
      max_scale = std::max(max_scale, scales[j]);
      max_offset = std::max(max_offset, offsets[j]);
    }
    const float d = stored(max_scale / 63.0f), dmin = stored(max_offset / 63.0f);
    for (int j = 0; j < 8; ++j) {
      const float scale = d * static_cast<float>(round_clamp(scales[j] / d, 0, 63));
      const float offset = dmin == 0.0f ? 0.0f : dmin * static_cast<float>(round_clamp(offsets[j] / dmin, 0, 63));
      for (int i = 0; i < 32; ++i) {
        const float v = xb[32 * j + i];
        const int q = scale == 0.0f ? 0 : round_clamp((v + offset) / scale, 0, qmax);
        yb[32 * j + i] = scale * static_cast<float>(q) - offset;
      }
    }
  }
  return y;
}

struct QualityBound {
  WeightType type;
  double max_relative_rmse;
};

// Between ours and the naive quantizer's relative RMSE (see above).
constexpr QualityBound kQualityBounds[] = {
    {WeightType::Q4_K, 0.0720},
    {WeightType::Q5_K, 0.0362},
    {WeightType::Q6_K, 0.0172},
};

TEST(Quantizer, GaussianRowsReachTheBoundsTheNaiveQuantizerMisses) {
  const std::uint32_t seed = fresh_seed("gaussian rows");
  const std::vector<float> x = gaussian(64 * 4096, seed);
  for (const QualityBound& bound : kQualityBounds) {
    const double ours = relative_rmse(x, quantize_dequantize(bound.type, x));
    const double naive = relative_rmse(x, naive_quantize_dequantize(bound.type, x));
    std::printf("[ quality  ] %s: relative RMSE ours %.5f, naive %.5f, bound %.4f\n",
                to_string(bound.type).data(), ours, naive, bound.max_relative_rmse);
    EXPECT_LT(ours, bound.max_relative_rmse) << to_string(bound.type);
    // The bound must be one that the naive quantizer fails, or it proves nothing.
    EXPECT_GT(naive, bound.max_relative_rmse) << to_string(bound.type);
  }
}

// The relative error must not depend on the overall magnitude in the range where fp16
// super-block scales are normal numbers.
TEST(Quantizer, QualityHoldsAcrossMagnitudes) {
  const std::uint32_t seed = fresh_seed("magnitudes");
  for (float sigma : {3e-3f, 1.0f, 100.0f, 1e4f}) {
    const std::vector<float> x = gaussian(16 * 256, seed, sigma);
    for (const QualityBound& bound : kQualityBounds) {
      const double ours = relative_rmse(x, quantize_dequantize(bound.type, x));
      EXPECT_LT(ours, bound.max_relative_rmse * 1.1)
          << to_string(bound.type) << " sigma " << sigma;
    }
  }
}

// Blocks that break naive code: zeros, constants, tiny and huge magnitudes, outliers.
TEST(Quantizer, SpecialBlocksStayFiniteAndSensible) {
  const std::uint32_t seed = fresh_seed("special blocks");
  // Bounds per type (q4_K, q5_K, q6_K); negative: only finiteness is checked.
  using Bounds = std::array<double, 3>;
  constexpr Bounds kFinitenessOnly = {-1, -1, -1};
  auto quality_bounds_times = [](double factor) {
    Bounds b{};
    for (int k = 0; k < 3; ++k) b[k] = kQualityBounds[k].max_relative_rmse * factor;
    return b;
  };
  struct Case {
    std::string name;
    std::vector<float> x;
    Bounds max_relative_rmse;
  };
  std::vector<Case> cases;
  cases.push_back({"all zero", std::vector<float>(256, 0.0f), kFinitenessOnly});
  // A constant is represented up to the fp16 rounding of the super-block scale.
  cases.push_back({"constant 0.7", std::vector<float>(256, 0.7f), {2e-3, 2e-3, 2e-3}});
  cases.push_back({"constant -3", std::vector<float>(256, -3.0f), {2e-3, 2e-3, 2e-3}});
  cases.push_back({"constant 6e4", std::vector<float>(256, 6e4f), {2e-3, 2e-3, 2e-3}});
  for (float magnitude : {1e-30f, 1e-6f, 1e-3f, 1.0f, 100.0f, 1e4f, 6e4f}) {
    // Scaled so that the largest magnitude of the block is `magnitude`.
    std::vector<float> x = gaussian(256, seed, 1.0f);
    float amax = 0.0f;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    for (float& v : x) v = v / amax * magnitude;
    // One block (256 values) spreads about 5% around the row figures, hence the
    // margin. At 1e-3 the fp16 super-block scale is subnormal and has fewer bits;
    // below that it is at its smallest and the format itself loses the values, so
    // there we only ask for finiteness.
    const Bounds bounds = magnitude >= 1.0f    ? quality_bounds_times(1.25)
                          : magnitude >= 1e-3f ? quality_bounds_times(1.5)
                                               : kFinitenessOnly;
    cases.push_back({"gaussian amax " + std::to_string(magnitude), x, bounds});
  }
  {
    std::vector<float> x = gaussian(256, seed + 1);
    x[17] = 40.0f;  // outliers dominating their super-block
    x[200] = -25.0f;
    cases.push_back({"outliers", x, {0.2, 0.1, 0.06}});
  }
  {
    std::vector<float> x = gaussian(256, seed + 2);
    for (float& v : x) v = std::fabs(v) + 5.0f;  // all positive, far from 0
    cases.push_back({"all positive", x, {0.04, 0.02, 0.02}});
  }
  for (const Case& c : cases) {
    for (int k = 0; k < 3; ++k) {
      const WeightType t = kWeightTypes[k];
      std::vector<std::uint8_t> block(block_bytes(t));
      quantize_row(t, c.x.data(), block.data(), 256);
      // The fp16 scales must be finite.
      fp16_bits d[2];
      std::size_t count = 1;
      if (t == WeightType::Q6_K) {
        std::memcpy(&d[0], block.data() + offsetof(BlockQ6K, d), 2);
      } else {
        std::memcpy(&d[0], block.data(), 4);
        count = 2;
      }
      for (std::size_t k = 0; k < count; ++k) {
        EXPECT_TRUE(std::isfinite(fp16_to_fp32(d[k]))) << c.name << " " << to_string(t);
      }
      std::vector<float> y(256);
      dequantize_row(t, block.data(), y.data(), 256);
      for (float v : y) ASSERT_TRUE(std::isfinite(v)) << c.name << " " << to_string(t);
      if (c.name == "all zero") {
        for (float v : y) EXPECT_EQ(v, 0.0f) << to_string(t);
      }
      if (c.max_relative_rmse[k] > 0) {
        const double rmse = relative_rmse(c.x, y);
        std::printf("[ special  ] %-26s %s: relative RMSE %.5f (bound %.3g)\n", c.name.c_str(),
                    to_string(t).data(), rmse, c.max_relative_rmse[k]);
        EXPECT_LT(rmse, c.max_relative_rmse[k]) << c.name << " " << to_string(t);
      }
    }
  }
}

// ---------------------------------------------------------------------------------
// Activation formats

TEST(Q8K, QuantsSumsAndError) {
  const std::uint32_t seed = fresh_seed("q8_K");
  std::vector<float> x = gaussian(16 * 256, seed, 2.0f);
  x[3] = 50.0f;  // a "massive activation" channel
  std::vector<BlockQ8K> blocks(x.size() / 256);
  quantize_row_q8_K(x.data(), blocks.data(), static_cast<std::int64_t>(x.size()));
  std::vector<float> y(x.size());
  dequantize_row_q8_K(blocks.data(), y.data(), static_cast<std::int64_t>(x.size()));
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const BlockQ8K& block = blocks[b];
    float amax = 0.0f;
    for (int i = 0; i < 256; ++i) amax = std::max(amax, std::fabs(x[b * 256 + i]));
    EXPECT_EQ(block.d, amax / 127.0f);
    int largest = 0;
    for (int i = 0; i < 256; ++i) {
      largest = std::max(largest, std::abs(static_cast<int>(block.qs[i])));
      ASSERT_LE(std::fabs(x[b * 256 + i] - y[b * 256 + i]), block.d * 0.5f * (1 + 1e-5f))
          << "block " << b << " value " << i;
      ASSERT_EQ(y[b * 256 + i], block.d * block.qs[i]);
    }
    EXPECT_EQ(largest, 127);
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += block.qs[16 * g + i];
      EXPECT_EQ(block.bsums[g], sum) << "block " << b << " group " << g;
    }
  }
}

TEST(Q8K, ZeroBlock) {
  const std::vector<float> x(256, 0.0f);
  BlockQ8K block;
  std::memset(&block, 0x5a, sizeof(block));  // garbage that must be overwritten
  quantize_row_q8_K(x.data(), &block, 256);
  EXPECT_EQ(block.d, 0.0f);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(block.qs[i], 0);
  for (int g = 0; g < 16; ++g) EXPECT_EQ(block.bsums[g], 0);
}

TEST(Q8_1, ScaleSumAndError) {
  const std::uint32_t seed = fresh_seed("q8_1");
  std::vector<float> x = gaussian(128 * 32, seed, 3.0f);
  x[70] = -200.0f;  // a "massive activation" channel
  std::vector<BlockQ8_1> blocks(x.size() / 32);
  quantize_row_q8_1(x.data(), blocks.data(), static_cast<std::int64_t>(x.size()));
  std::vector<float> y(x.size());
  dequantize_row_q8_1(blocks.data(), y.data(), static_cast<std::int64_t>(x.size()));
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const BlockQ8_1& block = blocks[b];
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[b * 32 + i]));
    EXPECT_EQ(block.d, fp32_to_fp16(amax / 127.0f));
    const float d = fp16_to_fp32(block.d);  // d as stored
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      sum += block.qs[i];
      ASSERT_LE(std::fabs(x[b * 32 + i] - y[b * 32 + i]), d * 0.5f * (1 + 1e-5f))
          << "block " << b << " value " << i;
    }
    EXPECT_EQ(block.s, fp32_to_fp16(d * static_cast<float>(sum))) << "block " << b;
  }
}

TEST(Activations, DispatchMatchesDirectCallsAndF32IsACopy) {
  const std::vector<float> x = gaussian(512, fresh_seed("activation dispatch"));
  for (ActFormat f : {ActFormat::F32, ActFormat::Q8_K, ActFormat::Q8_1}) {
    std::vector<std::uint8_t> packed(row_bytes(f, 512));
    quantize_activation(f, x.data(), packed.data(), 512);
    std::vector<float> y(512);
    dequantize_activation(f, packed.data(), y.data(), 512);
    std::vector<float> expected(512);
    if (f == ActFormat::F32) {
      expected = x;
    } else if (f == ActFormat::Q8_K) {
      std::vector<BlockQ8K> direct(2);
      quantize_row_q8_K(x.data(), direct.data(), 512);
      EXPECT_EQ(std::memcmp(direct.data(), packed.data(), packed.size()), 0);
      dequantize_row_q8_K(direct.data(), expected.data(), 512);
    } else {
      std::vector<BlockQ8_1> direct(16);
      quantize_row_q8_1(x.data(), direct.data(), 512);
      EXPECT_EQ(std::memcmp(direct.data(), packed.data(), packed.size()), 0);
      dequantize_row_q8_1(direct.data(), expected.data(), 512);
    }
    EXPECT_EQ(y, expected) << to_string(f);
  }
}

TEST(Activations, ExtremeScalesStayFinite) {
  for (float magnitude : {1e-30f, 1e-6f, 1e-3f, 1.0f, 1e4f, 6e4f}) {
    std::vector<float> x = gaussian(256, 1234, magnitude);
    for (ActFormat f : {ActFormat::Q8_K, ActFormat::Q8_1}) {
      std::vector<std::uint8_t> packed(row_bytes(f, 256));
      quantize_activation(f, x.data(), packed.data(), 256);
      std::vector<float> y(256);
      dequantize_activation(f, packed.data(), y.data(), 256);
      for (float v : y) ASSERT_TRUE(std::isfinite(v)) << to_string(f) << " " << magnitude;
      // Q8_K keeps an fp32 scale: it keeps its relative precision at any magnitude.
      if (f == ActFormat::Q8_K) {
        EXPECT_LT(relative_rmse(x, y), 0.02) << magnitude;
      }
    }
  }
}

TEST(KnownAnswer, Q6KUnpackedQuantsMatchTheDequantizer) {
  // unpack_q6_K_quants serves the scalar kernels; d*scale*(q-32) must be exactly what
  // the dequantizer (checked against gguf) gives for every weight.
  const auto x = gaussian(8 * kSuperBlock, fresh_seed("q6_K unpack"));
  std::vector<BlockQ6K> blocks(8);
  quantize_row_q6_K(x.data(), blocks.data(), static_cast<std::int64_t>(x.size()));
  std::vector<float> deq(x.size());
  dequantize_row_q6_K(blocks.data(), deq.data(), static_cast<std::int64_t>(x.size()));
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    std::int8_t q[kSuperBlock];
    unpack_q6_K_quants(blocks[b], q);
    const float d = fp16_to_fp32(blocks[b].d);
    for (int i = 0; i < kSuperBlock; ++i) {
      ASSERT_GE(q[i], -32);
      ASSERT_LE(q[i], 31);
      EXPECT_EQ(d * blocks[b].scales[i / 16] * q[i], deq[b * kSuperBlock + i]) << b << " " << i;
    }
  }
}

// ---------------------------------------------------------------------------------
// bf16

TEST(Bf16, KnownValues) {
  EXPECT_EQ(bf16_to_fp32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_fp32(0xc000), -2.0f);
  EXPECT_EQ(bf16_to_fp32(0x4049), 3.140625f);
  EXPECT_EQ(bf16_to_fp32(0x7f7f), 0x1.fep127f);  // largest finite
  EXPECT_EQ(bf16_to_fp32(0x0001), 0x1p-133f);    // an fp32 subnormal
  EXPECT_TRUE(std::isinf(bf16_to_fp32(0xff80)));
  EXPECT_TRUE(std::isnan(bf16_to_fp32(0x7fc1)));
  EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(fp32_to_bf16(-2.0f), 0xc000);
}

TEST(Bf16, RoundsToNearestEvenAndKeepsNaN) {
  auto from_bits = [](std::uint32_t bits) { return std::bit_cast<float>(bits); };
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3f808000u)), 0x3f80);  // tie, kept lsb 0: down
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3f818000u)), 0x3f82);  // tie, kept lsb 1: up
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3f808001u)), 0x3f81);  // above the tie: up
  EXPECT_EQ(fp32_to_bf16(from_bits(0x3f807fffu)), 0x3f80);  // below the tie: down
  EXPECT_EQ(fp32_to_bf16(from_bits(0xbf818000u)), 0xbf82);  // sign does not matter
  EXPECT_EQ(fp32_to_bf16(from_bits(0x7f7fffffu)), 0x7f80);  // largest float: rounds to inf
  EXPECT_EQ(fp32_to_bf16(from_bits(0x00008000u)), 0x0000);  // subnormal tie: to even (0)
  // A NaN whose payload lives in the dropped bits must stay a NaN, not become inf.
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(from_bits(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(from_bits(0xffc00000u)))));
}

TEST(Bf16, EveryBf16RoundTripsThroughFloat) {
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const auto bits = static_cast<bf16_bits>(h);
    if (std::isnan(bf16_to_fp32(bits))) continue;
    ASSERT_EQ(fp32_to_bf16(bf16_to_fp32(bits)), bits) << std::hex << h;
  }
}

// ---------------------------------------------------------------------------------
// Legacy quants and float types: hand-built blocks. qs[l] = l | (15 - l) << 4, so
// weight l < 16 has low bits l and weight 16 + l has low bits 15 - l.

template <class Block>
Block with_counting_nibbles() {
  Block b{};
  for (int l = 0; l < 16; ++l) b.qs[l] = static_cast<std::uint8_t>(l | (15 - l) << 4);
  return b;
}

// Fifth bits 0x55 0x55 0xaa 0xaa (a little-endian word): set for the even weights
// 0..15 and the odd weights 16..31.
constexpr std::uint8_t kFifthBits[4] = {0x55, 0x55, 0xaa, 0xaa};
int fifth_bit(int i) { return i < 16 ? (i % 2 == 0) : (i % 2 == 1); }
int counting_low_bits(int i) { return i < 16 ? i : 31 - i; }

TEST(KnownAnswer, Q4_0) {
  auto b = with_counting_nibbles<BlockQ4_0>();
  b.d = 0x3800;  // 0.5
  float y[32];
  dequantize_row_q4_0(&b, y, 32);
  EXPECT_EQ(y[0], -4.0f);   // q 0 -> 0.5 * -8
  EXPECT_EQ(y[15], 3.5f);   // q 15 -> 0.5 * 7
  EXPECT_EQ(y[16], 3.5f);   // high nibble of qs[0] = 15
  EXPECT_EQ(y[31], -4.0f);  // high nibble of qs[15] = 0
  for (int i = 0; i < 32; ++i) ASSERT_EQ(y[i], 0.5f * (counting_low_bits(i) - 8)) << i;
}

TEST(KnownAnswer, Q4_1) {
  auto b = with_counting_nibbles<BlockQ4_1>();
  b.d = 0x3400;  // 0.25
  b.m = 0xc000;  // -2
  float y[32];
  dequantize_row_q4_1(&b, y, 32);
  EXPECT_EQ(y[0], -2.0f);
  EXPECT_EQ(y[15], 1.75f);
  EXPECT_EQ(y[17], 1.5f);  // high nibble of qs[1] = 14
  for (int i = 0; i < 32; ++i) ASSERT_EQ(y[i], 0.25f * counting_low_bits(i) - 2.0f) << i;
}

TEST(KnownAnswer, Q5_0) {
  auto b = with_counting_nibbles<BlockQ5_0>();
  b.d = 0x3c00;  // 1
  std::memcpy(b.qh, kFifthBits, 4);
  float y[32];
  dequantize_row_q5_0(&b, y, 32);
  EXPECT_EQ(y[0], 0.0f);    // 0 | 16 -> 0
  EXPECT_EQ(y[1], -15.0f);  // 1, no fifth bit
  EXPECT_EQ(y[2], 2.0f);    // 2 | 16
  EXPECT_EQ(y[16], -1.0f);  // 15, no fifth bit (even weight above 15)
  EXPECT_EQ(y[17], 14.0f);  // 14 | 16
  EXPECT_EQ(y[31], 0.0f);   // 0 | 16
  for (int i = 0; i < 32; ++i)
    ASSERT_EQ(y[i], static_cast<float>((counting_low_bits(i) | fifth_bit(i) << 4) - 16)) << i;
}

TEST(KnownAnswer, Q5_1) {
  auto b = with_counting_nibbles<BlockQ5_1>();
  b.d = 0x3800;  // 0.5
  b.m = 0x3c00;  // 1
  std::memcpy(b.qh, kFifthBits, 4);
  float y[32];
  dequantize_row_q5_1(&b, y, 32);
  EXPECT_EQ(y[0], 9.0f);    // q 16
  EXPECT_EQ(y[1], 1.5f);    // q 1
  EXPECT_EQ(y[31], 9.0f);   // q 16
  for (int i = 0; i < 32; ++i)
    ASSERT_EQ(y[i], 0.5f * (counting_low_bits(i) | fifth_bit(i) << 4) + 1.0f) << i;
}

TEST(KnownAnswer, Q8_0) {
  BlockQ8_0 b{};
  b.d = 0x3400;  // 0.25
  for (int i = 0; i < 32; ++i) b.qs[i] = static_cast<std::int8_t>(8 * i - 128);
  float y[32];
  dequantize_row_q8_0(&b, y, 32);
  EXPECT_EQ(y[0], -32.0f);  // q -128
  EXPECT_EQ(y[16], 0.0f);
  EXPECT_EQ(y[31], 30.0f);  // q 120
  for (int i = 0; i < 32; ++i) ASSERT_EQ(y[i], 2.0f * i - 32.0f) << i;
}

TEST(KnownAnswer, FloatTypes) {
  const fp16_bits h[5] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00};
  float y[5];
  dequantize_row(WeightType::F16, h, y, 5);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -2.0f);
  EXPECT_EQ(y[2], 65504.0f);
  EXPECT_EQ(y[3], 0x1p-24f);
  EXPECT_TRUE(std::isinf(y[4]));
  const bf16_bits b[3] = {0x3f80, 0xc040, 0x4049};
  dequantize_row(WeightType::BF16, b, y, 3);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], -3.0f);
  EXPECT_EQ(y[2], 3.140625f);
  const float f[3] = {1.5f, -0.0f, 0x1p-149f};
  dequantize_row(WeightType::F32, f, y, 3);
  EXPECT_EQ(std::memcmp(f, y, sizeof(f)), 0);
}

// Blocks in a row advance by the block size, for every legacy type.
TEST(KnownAnswer, LegacyRowsOfBlocksAdvance) {
  BlockQ8_0 b[2]{};
  b[0].d = 0x3c00;  // 1
  b[1].d = 0x4000;  // 2
  for (int i = 0; i < 32; ++i) b[0].qs[i] = b[1].qs[i] = static_cast<std::int8_t>(i);
  float y[64];
  dequantize_row(WeightType::Q8_0, b, y, 64);
  EXPECT_EQ(y[5], 5.0f);
  EXPECT_EQ(y[32 + 5], 10.0f);
}

// ---------------------------------------------------------------------------------
// Legacy and float quantizers: each value within its rounding bound, and the
// relative RMSE of N(0,1) rows near what a range-based quantizer gives.

// The scale d and offset m as stored in the block that holds value i.
struct StoredScale {
  float d = 0, m = 0;
};
StoredScale stored_scale(WeightType t, const std::vector<std::uint8_t>& blocks, std::size_t i) {
  const std::uint8_t* block = blocks.data() + (i / 32) * block_bytes(t);
  fp16_bits d, m = 0;
  std::memcpy(&d, block, 2);
  if (t == WeightType::Q4_1 || t == WeightType::Q5_1) std::memcpy(&m, block + 2, 2);
  return {fp16_to_fp32(d), fp16_to_fp32(m)};
}

constexpr WeightType kLegacyTypes[] = {WeightType::Q4_0, WeightType::Q4_1, WeightType::Q5_0,
                                       WeightType::Q5_1, WeightType::Q8_0};

TEST(LegacyQuantizer, EveryValueWithinItsRoundingBound) {
  const std::uint32_t seed = fresh_seed("legacy rounding");
  std::vector<float> x = gaussian(256 * 32, seed, 2.0f);
  for (std::size_t i = 0; i < x.size(); i += 97) x[i] = x[i] * 20.0f;  // outliers
  for (WeightType t : kLegacyTypes) {
    std::vector<std::uint8_t> blocks(row_bytes(t, static_cast<std::int64_t>(x.size())));
    quantize_row(t, x.data(), blocks.data(), static_cast<std::int64_t>(x.size()));
    std::vector<float> y(x.size());
    dequantize_row(t, blocks.data(), y.data(), static_cast<std::int64_t>(x.size()));
    for (std::size_t i = 0; i < x.size(); ++i) {
      const StoredScale s = stored_scale(t, blocks, i);
      // Half a step, plus what the fp16 rounding of d and m moves the grid (at most
      // 2^-11 of m and of the 31 steps of the range). The symmetric _0 types clamp
      // the side opposite their extreme one step short (q - 8 reaches 7, not 8).
      const bool symmetric = t == WeightType::Q4_0 || t == WeightType::Q5_0;
      const float bound = std::fabs(s.d) * (symmetric ? 1.0f : 0.5f) +
                          0x1p-11f * (std::fabs(s.m) + 32.0f * std::fabs(s.d));
      ASSERT_LE(std::fabs(x[i] - y[i]), bound) << to_string(t) << " value " << i;
    }
  }
}

TEST(LegacyQuantizer, GaussianRowsReachTheExpectedQuality) {
  const std::uint32_t seed = fresh_seed("legacy quality");
  const std::vector<float> x = gaussian(64 * 4096, seed);
  // The bounds sit about 3% above the relative RMSE each type reaches (which varies
  // far less than that between seeds), so a lost bit (a scale off by 2x, a dropped
  // fifth bit) fails.
  const struct {
    WeightType type;
    double bound;
  } cases[] = {{WeightType::Q4_0, 0.0885}, {WeightType::Q4_1, 0.0805}, {WeightType::Q5_0, 0.0440},
               {WeightType::Q5_1, 0.0390}, {WeightType::Q8_0, 0.0055}};
  for (const auto& c : cases) {
    const double rmse = relative_rmse(x, quantize_dequantize(c.type, x));
    std::printf("[ quality  ] %s: relative RMSE %.5f, bound %.4f\n", to_string(c.type).data(), rmse,
                c.bound);
    EXPECT_LT(rmse, c.bound) << to_string(c.type);
  }
}

TEST(LegacyQuantizer, SpecialBlocksStayFiniteAndSensible) {
  for (WeightType t : kLegacyTypes) {
    for (float value : {0.0f, 0.7f, -3.0f, 6e4f}) {
      const std::vector<float> x(32, value);
      const std::vector<float> y = quantize_dequantize(t, x);
      for (float v : y) {
        ASSERT_TRUE(std::isfinite(v)) << to_string(t) << " constant " << value;
        // A constant comes back up to the fp16 rounding of its scale (or offset).
        EXPECT_NEAR(v, value, std::fabs(value) * 1e-3f) << to_string(t) << " constant " << value;
      }
    }
    for (float magnitude : {1e-30f, 1e-6f, 1e6f}) {
      const std::vector<float> x = gaussian(32 * 8, 77, magnitude);
      for (float v : quantize_dequantize(t, x))
        ASSERT_TRUE(std::isfinite(v)) << to_string(t) << " magnitude " << magnitude;
    }
  }
}

TEST(FloatQuantizer, RelativeErrorWithinHalfAnUlp) {
  const std::uint32_t seed = fresh_seed("float types");
  std::vector<float> x = gaussian(8192, seed, 100.0f);
  for (WeightType t : {WeightType::F16, WeightType::BF16, WeightType::F32}) {
    const std::vector<float> y = quantize_dequantize(t, x);
    // Half an ulp of 11 (fp16) or 8 (bf16) significant bits; f32 is a copy. fp16
    // values below its normal range (6.1e-5) have an absolute step of 2^-24.
    const double rel = t == WeightType::F16 ? 0x1p-11 : t == WeightType::BF16 ? 0x1p-8 : 0.0;
    for (std::size_t i = 0; i < x.size(); ++i)
      ASSERT_LE(std::fabs(double(x[i]) - y[i]), rel * std::fabs(x[i]) + (rel > 0 ? 0x1p-25 : 0.0))
          << to_string(t) << " value " << x[i];
  }
}

// Every vectorized activation quantizer this CPU can run (AVX2, AVX512) must write the
// same bytes as the plain definitions: Gaussian rows with outliers, values on exact
// rounding ties, NaN and infinity, all-zero blocks, huge and tiny scales.
TEST(ActivationQuantizer, EveryVectorizedVersionWritesTheSameBytesAsTheDefinition) {
  std::vector<QuantizerIsa> versions;
  for (QuantizerIsa isa : {QuantizerIsa::AVX2, QuantizerIsa::AVX512}) {
    float probe[256] = {1.0f};
    BlockQ8K block;
    if (quantize_row_q8_K_with(isa, probe, &block, 256)) versions.push_back(isa);
  }
  if (versions.empty()) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX512: only the scalar quantizers run";
  std::mt19937 rng(qmv::testing::fresh_seed());
  std::normal_distribution<float> normal;
  const int n = 256 * 12;
  std::vector<float> x(n);
  for (int trial = 0; trial < 40; ++trial) {
    const float scale = std::pow(10.0f, std::uniform_real_distribution<float>(-6, 6)(rng));
    for (float& v : x) v = normal(rng) * scale;
    switch (trial % 5) {
      case 1:  // ties: a block whose max is 127 has d == 1, so k + 0.5 is an exact tie
        for (int i = 0; i < 256; ++i) x[i] = std::uniform_int_distribution<int>(-126, 125)(rng) + 0.5f;
        x[0] = 127.0f;
        for (int i = 0; i < 32; ++i) x[256 + i] = std::uniform_int_distribution<int>(-126, 125)(rng) + 0.5f;
        x[256] = 127.0f;
        break;
      case 2:  // specials
        x[5] = std::numeric_limits<float>::quiet_NaN();
        x[300] = std::numeric_limits<float>::infinity();
        x[700] = -std::numeric_limits<float>::infinity();
        break;
      case 3:  // a zero block and a block of one outlier
        std::fill(x.begin() + 512, x.begin() + 768, 0.0f);
        x[1000] = 1e4f * scale;
        break;
      case 4:  // negative zero and subnormal values
        std::fill(x.begin(), x.begin() + 256, -0.0f);
        x[1] = 1e-40f;
        break;
      default:
        break;
    }
    std::vector<BlockQ8K> plain_k(n / 256);
    std::vector<BlockQ8_1> plain_1(n / 32);
    quantize_row_q8_K_scalar(x.data(), plain_k.data(), n);
    quantize_row_q8_1_scalar(x.data(), plain_1.data(), n);
    for (QuantizerIsa isa : versions) {
      std::vector<BlockQ8K> fast_k(n / 256);
      std::vector<BlockQ8_1> fast_1(n / 32);
      std::memset(fast_k.data(), 0x5a, fast_k.size() * sizeof(BlockQ8K));
      std::memset(fast_1.data(), 0x5a, fast_1.size() * sizeof(BlockQ8_1));
      ASSERT_TRUE(quantize_row_q8_K_with(isa, x.data(), fast_k.data(), n));
      ASSERT_TRUE(quantize_row_q8_1_with(isa, x.data(), fast_1.data(), n));
      for (int b = 0; b < n / 256; ++b)
        ASSERT_EQ(std::memcmp(&fast_k[b], &plain_k[b], sizeof(BlockQ8K)), 0)
            << to_string(isa) << ", trial " << trial << " Q8_K block " << b;
      for (int b = 0; b < n / 32; ++b)
        ASSERT_EQ(std::memcmp(&fast_1[b], &plain_1[b], sizeof(BlockQ8_1)), 0)
            << to_string(isa) << ", trial " << trial << " Q8_1 block " << b;
    }
  }
}

// The public quantizers take the widest version the limit allows and the CPU
// has; the limit comes back to where it was.
TEST(ActivationQuantizer, TheLimitPicksTheVersion) {
  const QuantizerIsa widest = active_quantizer_isa();
  set_quantizer_isa_limit(QuantizerIsa::Scalar);
  EXPECT_EQ(active_quantizer_isa(), QuantizerIsa::Scalar);
  set_quantizer_isa_limit(QuantizerIsa::AVX2);
  EXPECT_LE(active_quantizer_isa(), QuantizerIsa::AVX2);
  EXPECT_EQ(active_quantizer_isa() == QuantizerIsa::AVX2, __builtin_cpu_supports("avx2") != 0);
  set_quantizer_isa_limit(QuantizerIsa::AVX512);
  EXPECT_EQ(active_quantizer_isa(), widest);
}

}  // namespace
}  // namespace qmv
