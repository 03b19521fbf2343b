// Helpers shared by the x86 Q5_K kernels (x86/avx2/q5_K_*.cpp, x86/avx512vnni/q5_K_*.cpp).
// Only SSSE3, AVX2 and F16C instructions, which every one of those files is built with.
// Everything has internal linkage, so files built with different ISA flags never share
// (or pick up) one another's copy.
#pragma once

#include "x86.h"

#include <cstdint>

#include "kernel.h"

namespace qmv::q5k_x86 {
namespace {

using x86::hsum;

// The block's first 16 bytes: d, dmin (fp16), then the 12 packed scale bytes.
inline __m128i load_head(const BlockQ5K& b) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(&b));
}

// (d, dmin, 0, 0) as floats, from the block's first 4 bytes.
inline __m128 d_dmin(const BlockQ5K& b) {
  return _mm_cvtph_ps(_mm_cvtsi32_si128(*reinterpret_cast<const int*>(&b)));
}

// The 8 six-bit scales (bytes 0..7) and 8 six-bit mins (bytes 8..15) of a super-block,
// as qmv::unpack_scale_min_k4 gives them, come from `v`: the block's first 16 bytes (d,
// dmin, then the 12 packed bytes s[0..11] at bytes 4..15). Scale j < 4 is s[j] & 63, min
// j < 4 is s[j+4] & 63; for j >= 4 the low 4 bits come from a nibble of s[j+4] and
// the top 2 bits from bits 6..7 of s[j-4] (scale) or s[j] (min). Both unpackers, the AVX2
// one below and the AVX-512 VNNI one, start from the two bytes
// of each output that hold its bits:
struct ScaleMinBytes {
  __m128i a;  // the byte with the low bits of each output
  __m128i b;  // the byte with its top 2 bits
};

inline ScaleMinBytes scale_min_bytes(__m128i v) {
  return {_mm_shuffle_epi8(v, _mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13,
                                            14, 15)),
          _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9,
                                            10, 11))};
}

// The top 2 bits of outputs 4..7 and 12..15 from `b`: bits 6..7 to 4..5, all else zero.
inline __m128i top_bits(__m128i b) {
  return _mm_and_si128(
      _mm_srli_epi16(b, 2),
      _mm_setr_epi8(0, 0, 0, 0, 0x30, 0x30, 0x30, 0x30, 0, 0, 0, 0, 0x30, 0x30, 0x30, 0x30));
}

// The scales (bytes 0..7) and mins (bytes 8..15), AVX2 instructions.
inline __m128i unpack_scales_mins(__m128i v) {
  const auto [a, b] = scale_min_bytes(v);
  const __m128i lo = _mm_or_si128(
      _mm_and_si128(a, _mm_setr_epi8(0x3f, 0x3f, 0x3f, 0x3f, 0x0f, 0x0f, 0x0f, 0x0f, 0x3f, 0x3f,
                                     0x3f, 0x3f, 0, 0, 0, 0)),
      // mins 4..7: the high nibble
      _mm_and_si128(_mm_srli_epi16(a, 4), _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0f,
                                                        0x0f, 0x0f, 0x0f)));
  return _mm_or_si128(lo, top_bits(b));
}

// pshufb control that makes int16 pairs (m_j, m_j) for j = 0..3 (low lane), 4..7
// (high lane) from the mins at bytes 8..15 of each lane.
inline __m256i min_pair_control() {
  return _mm256_setr_epi8(8, -1, 8, -1, 9, -1, 9, -1, 10, -1, 10, -1, 11, -1, 11, -1,
                          12, -1, 12, -1, 13, -1, 13, -1, 14, -1, 14, -1, 15, -1, 15, -1);
}

// The min term's int32 sums: lane j of bsums (as int32) holds the int16 pair bsums[2j],
// bsums[2j+1]; madd with (m_j, m_j) gives m_j*(bsums[2j]+bsums[2j+1]). `scales` holds
// the unpacked scales and mins in both 128-bit lanes, `min_pairs` is min_pair_control().
inline __m256i min_sums(__m256i bsums, __m256i scales, __m256i min_pairs) {
  return _mm256_madd_epi16(bsums, _mm256_shuffle_epi8(scales, min_pairs));
}

// Prefetches the super-block at byte address a with Hint: 176 bytes, so three lines
// from the block's start cover it wherever it lies. Integer arithmetic: the address
// may lie past the matrix, which a prefetch may name.
template <auto Hint>
inline void prefetch_block(std::uintptr_t a) {
  const char* p = reinterpret_cast<const char*>(a);
  _mm_prefetch(p, Hint);
  _mm_prefetch(p + 64, Hint);
  _mm_prefetch(p + 128, Hint);
}

}  // namespace
}  // namespace qmv::q5k_x86
