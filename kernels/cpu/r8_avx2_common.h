// What every AVX2 kernel of the row-interleaved layouts (row_interleaved.h) uses,
// legacy and K-quant alike: the activation broadcast and the eight rows' fp16 values.
// Included only by files built with -mavx2 -mfma -mf16c; internal linkage.
#pragma once

#include "x86_common.h"

#include <cstdint>
#include <cstring>

#include "row_interleaved.h"

namespace qmv::interleave {
namespace {

// Four activation quants in every 32-bit lane.
inline __m256i broadcast_quad(const std::int8_t* q) {
  std::int32_t v;
  std::memcpy(&v, q, sizeof(v));
  return _mm256_set1_epi32(v);
}

// The eight rows' fp16 values as eight floats, row r in lane r.
inline __m256 fp16x8(const fp16_bits* h) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
}

}  // namespace
}  // namespace qmv::interleave
