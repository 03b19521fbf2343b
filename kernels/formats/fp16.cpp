// IEEE binary16 <-> binary32 and bfloat16 <-> binary32 by bit manipulation.
//
// This file is compiled without ISA flags, so it cannot use F16C; it must still give
// exactly what a hardware conversion gives (round to nearest even, subnormals, inf,
// NaN), because GGUF files store their scales as fp16 and a one-ulp difference in a
// scale shows up in every weight of its block.
#include <bit>
#include <cstdint>

#include "formats/formats.h"

namespace qmv {

namespace {

constexpr std::uint32_t kF32SignMask = 0x80000000u;
constexpr std::uint32_t kF32AbsMask = 0x7fffffffu;
constexpr std::uint32_t kF32Inf = 0x7f800000u;
constexpr std::uint32_t kF32MantissaBits = 23;
constexpr std::uint32_t kF16MantissaBits = 10;
constexpr std::uint32_t kMantissaShift = kF32MantissaBits - kF16MantissaBits;  // 13
// Exponent biases are 127 and 15; moving between them is a shift of 112 in the
// exponent field.
constexpr std::uint32_t kBiasDifference = 127 - 15;

// |f| at or above this rounds to infinity: 65504 (largest finite fp16) plus half an
// ulp (16). The tie itself rounds to the even neighbour, which is infinity.
constexpr std::uint32_t kF32RoundsToF16Inf = 0x477ff000u;  // 65520.0f
// Smallest normal fp16, 2^-14.
constexpr std::uint32_t kF32SmallestF16Normal = 0x38800000u;

}  // namespace

float fp16_to_fp32(fp16_bits h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> kF16MantissaBits) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;

  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in fp32.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(magnitude));
  }
  if (exponent == 0x1f) {
    // Inf keeps a zero mantissa; NaN keeps its payload (and so stays a NaN).
    return std::bit_cast<float>(sign | kF32Inf | (mantissa << kMantissaShift));
  }
  const std::uint32_t bits = sign | ((exponent + kBiasDifference) << kF32MantissaBits) |
                             (mantissa << kMantissaShift);
  return std::bit_cast<float>(bits);
}

fp16_bits fp32_to_fp16(float f) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (bits & kF32SignMask) >> 16;
  const std::uint32_t abs_bits = bits & kF32AbsMask;

  if (abs_bits > kF32Inf) {
    // NaN: keep the top of the payload and force the quiet bit so that a payload
    // living only in the low bits does not turn into infinity.
    return static_cast<fp16_bits>(sign | 0x7e00u | ((abs_bits >> kMantissaShift) & 0x3ffu));
  }
  if (abs_bits >= kF32RoundsToF16Inf) {
    return static_cast<fp16_bits>(sign | 0x7c00u);  // overflow (or inf) -> inf
  }

  if (abs_bits >= kF32SmallestF16Normal) {
    // Normal result. Round the 13 dropped mantissa bits to nearest even by adding
    // just under half (0xfff) plus the lowest kept bit; a carry out of the mantissa
    // correctly bumps the exponent. Then rebias the exponent.
    const std::uint32_t lowest_kept_bit = (abs_bits >> kMantissaShift) & 1u;
    const std::uint32_t rounded = abs_bits + 0xfffu + lowest_kept_bit;
    return static_cast<fp16_bits>(
        sign | ((rounded - (kBiasDifference << kF32MantissaBits)) >> kMantissaShift));
  }

  // Subnormal (or zero) result: the fp16 value is round(|f| / 2^-24) units of the
  // smallest subnormal. With the implicit bit m = 1.mantissa * 2^23 and exponent e,
  // |f| / 2^-24 = m * 2^(e - 126), i.e. m shifted right by 126 - e (>= 14 here).
  const std::uint32_t exponent = abs_bits >> kF32MantissaBits;
  const std::uint32_t shift = 126 - exponent;
  if (shift > 24) {
    return static_cast<fp16_bits>(sign);  // below half the smallest subnormal
  }
  const std::uint32_t m = (abs_bits & 0x7fffffu) | 0x800000u;
  std::uint32_t units = m >> shift;
  const std::uint32_t remainder = m & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1);
  if (remainder > half || (remainder == half && (units & 1u))) {
    ++units;  // may become 0x400, the encoding of the smallest normal: still right
  }
  return static_cast<fp16_bits>(sign | units);
}

// bfloat16 is binary32 without its low 16 mantissa bits: same exponent range, so
// widening is exact and narrowing only rounds the mantissa.
float bf16_to_fp32(bf16_bits h) { return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16); }

bf16_bits fp32_to_bf16(float f) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(f);
  if ((bits & kF32AbsMask) > kF32Inf) {
    // NaN: truncating could clear every remaining mantissa bit (inf); set the quiet bit.
    return static_cast<bf16_bits>((bits >> 16) | 0x0040u);
  }
  // Round to nearest even on the 16 dropped bits; a carry into the exponent is the
  // right result, up to and including the overflow of the largest finite to inf.
  const std::uint32_t lowest_kept_bit = (bits >> 16) & 1u;
  return static_cast<bf16_bits>((bits + 0x7fffu + lowest_kept_bit) >> 16);
}

}  // namespace qmv
