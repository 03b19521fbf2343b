// The Q8_1 quantizer's per-lane arithmetic, host+device: the GPU quantizer
// (quantize_q8_1.cu) calls exactly these functions, and a CPU test replays its warp
// lane by lane against quantize_row_q8_1_scalar. Every step is one correctly rounded
// IEEE operation (division, round half away from zero, float to fp16 to nearest even)
// or an exact one (max, integer sum), so host and device give the same bytes.
#pragma once

#include <cstdint>

#include <cmath>

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#endif

#include "kernels/cuda/lane_math.h"
#include "kernels/formats/formats.h"

namespace qmv::cuda {

// The largest finite fp16: a block scale above it saturates rather than becoming inf.
inline constexpr float kQ8_1LargestScale = 65504.0f;

// Nearest integer, halfway cases away from zero (std::round).
QMV_HD float round_half_away(float v) {
#if defined(__CUDA_ARCH__)
  return roundf(v);
#else
  return std::round(v);
#endif
}

// float to IEEE binary16 bits, round to nearest even; overflow gives inf.
QMV_HD std::uint16_t float_to_half_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(f));
#else
  return fp32_to_fp16(f);
#endif
}

// A lane's contribution to the block maximum |x|: a NaN counts as 0, as the host
// quantizer's std::max(amax, |x|) skips it.
QMV_HD float q8_1_magnitude(float x) {
  const float a = x < 0.0f ? -x : x;
  return a > 0.0f ? a : 0.0f;
}

// The block maximum's combining step (std::max's definition; exact, so any reduction
// order gives the same result).
QMV_HD float q8_1_max(float a, float b) { return a < b ? b : a; }

// The stored block scale: fp16(min(amax / 127, largest fp16)).
QMV_HD std::uint16_t q8_1_scale_bits(float amax) {
  const float d = div_rn(amax, 127.0f);
  return float_to_half_bits(d < kQ8_1LargestScale ? d : kQ8_1LargestScale);
}

// The quant of x against the stored scale d: round(x / d) in [-127, 127]; 0 when d is
// 0 (a block of zeros or of values too small for an fp16 scale) and for NaN.
QMV_HD int q8_1_quant(float x, float d) {
  if (!(d > 0.0f)) return 0;
  const float v = round_half_away(div_rn(x, d));
  if (!(v == v)) return 0;
  return static_cast<int>(v < -127.0f ? -127.0f : (v > 127.0f ? 127.0f : v));
}

// The stored block sum s = fp16(d * sum of the quants).
QMV_HD std::uint16_t q8_1_sum_bits(float d, int quant_sum) {
  return float_to_half_bits(mul_rn(d, static_cast<float>(quant_sum)));
}

}  // namespace qmv::cuda
