// The vectorized Q8_K and Q8_1 activation quantizers (avx2/, avx512/
// activation_quantizers.cpp), each writing the bytes of the scalar definition
// (formats/quantize.cpp); kernels/activation_quantizers.cpp picks one for the CPU. Call
// one only where the CPU has its folder's instruction sets.
#pragma once

#include <cstdint>
#include <cstring>

#include "formats/formats.h"

namespace qmv {

void quantize_row_q8_K_avx2(const float* x, BlockQ8K* y, std::int64_t n);
void quantize_row_q8_1_avx2(const float* x, BlockQ8_1* y, std::int64_t n);
// AVX-512 F, BW and VL.
void quantize_row_q8_K_avx512(const float* x, BlockQ8K* y, std::int64_t n);
void quantize_row_q8_1_avx512(const float* x, BlockQ8_1* y, std::int64_t n);

namespace x86 {
namespace {

// A block whose scale is not positive (all zeros, or a NaN in it) takes zero quants,
// as the scalar definition gives it; true when it did, and the caller moves on.
inline bool zero_if_unscaled(BlockQ8K& block, float d) {
  if (d > 0.0f) return false;
  std::memset(block.qs, 0, sizeof(block.qs));
  std::memset(block.bsums, 0, sizeof(block.bsums));
  return true;
}
inline bool zero_if_unscaled(BlockQ8_1& block, float d) {
  if (d > 0.0f) return false;
  std::memset(block.qs, 0, sizeof(block.qs));
  block.s = fp32_to_fp16(0.0f);
  return true;
}

}  // namespace
}  // namespace x86

}  // namespace qmv
