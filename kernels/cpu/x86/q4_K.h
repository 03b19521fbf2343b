// Helpers shared by the x86 Q4_K kernels (x86/avx2/q4_K_*.cpp, x86/avx512vnni/q4_K_*.cpp).
// Only SSSE3, AVX and F16C instructions, which every one of those files is built with.
// Everything has internal linkage, so files built with different ISA flags never share
// (or pick up) one another's copy.
#pragma once

#include "x86.h"

#include <cstdint>

#include "kernel.h"

namespace qmv::q4k_x86 {
namespace {

// The first 16 bytes of a Q4_K block: d and dmin (fp16) and the 12 packed scale bytes.
inline __m128i load_head(const BlockQ4K& b) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(&b));
}

// (d, dmin, -, -) as floats: _mm_cvtph_ps converts the head's first four halves.
inline __m128 d_dmin(__m128i head) { return _mm_cvtph_ps(head); }

// The eight 6-bit scales (bytes 0..7) and mins (bytes 8..15) from a block head, in
// vector registers (the scalar layout is unpack_scale_min_k4). With s = the 12 packed
// bytes: sc_j = s_j & 63 and m_j = s_{j+4} & 63 for j < 4; for j >= 4,
// sc_j = (s_{j+4} & 15) | (s_{j-4} >> 6) << 4 and m_j = (s_{j+4} >> 4) | (s_j >> 6) << 4.
inline __m128i unpack_scales_mins(__m128i head) {
  // a: the byte that gives each output its low bits; b: the one that gives bits 4-5.
  const __m128i a = _mm_shuffle_epi8(head, _mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15));
  const __m128i b = _mm_shuffle_epi8(head, _mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11));
  const __m128i low = _mm_and_si128(a, _mm_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0));
  // 16-bit shifts: the bits a neighbouring byte shifts in are masked off.
  const __m128i high_nibble =
      _mm_and_si128(_mm_srli_epi16(a, 4), _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15));
  const __m128i top = _mm_and_si128(
      _mm_srli_epi16(b, 2), _mm_setr_epi8(0, 0, 0, 0, 0x30, 0x30, 0x30, 0x30, 0, 0, 0, 0, 0x30, 0x30, 0x30, 0x30));
  return _mm_or_si128(_mm_or_si128(low, high_nibble), top);
}

using x86::hsum;

// Prefetches the three cache lines that cover the 144-byte block at byte address a
// (wherever it starts), into L1. Integer arithmetic: at the end of the matrix the
// address lies past the buffer, which a prefetch may touch but a pointer may not
// point to.
inline void prefetch_block(std::uintptr_t a) {
  const auto* p = reinterpret_cast<const char*>(a);
  _mm_prefetch(p, _MM_HINT_T0);
  _mm_prefetch(p + 64, _MM_HINT_T0);
  _mm_prefetch(p + 128, _MM_HINT_T0);
}

}  // namespace
}  // namespace qmv::q4k_x86
