// Helpers shared by the x86 Q6_K kernels (x86/avx2/q6_K_*.cpp, x86/avx512vnni/q6_K_*.cpp).
// Only SSE, AVX and AVX2 instructions, which every one of those files is built with.
// Everything has internal linkage, so files built with different ISA flags never share
// (or pick up) one another's copy.
#pragma once

#include "x86.h"

#include <cstdint>

#include "kernel.h"

namespace qmv::q6k_x86 {
namespace {

using x86::hsum;

inline __m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// The unsigned quants (0..63) of one half super-block (64 bytes of ql, 32 of qh), 32
// per vector, each passed through `f` (q - 32 for the f32 kernel, as is for the
// integer one): q[k] byte l is weight 32k+l of the half, so weights l, 32+l, 64+l,
// 96+l take ql[l] low, ql[32+l] low, ql[l] high, ql[32+l] high and qh[l] bits 0-1,
// 2-3, 4-5, 6-7 (moved to bits 4-5; 16-bit shifts by <= 4 with the 0x30 mask keep
// each byte's own bits).
template <class F>
__attribute__((always_inline)) inline void unpack_half(const std::uint8_t* ql,
                                                      const std::uint8_t* qh, __m256i q[4], F f) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  const __m256i l0 = load(ql), l1 = load(ql + 32), hb = load(qh);
  q[0] = f(_mm256_or_si256(_mm256_and_si256(l0, m4),
                           _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30)));
  q[1] = f(_mm256_or_si256(_mm256_and_si256(l1, m4),
                           _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30)));
  q[2] = f(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                           _mm256_and_si256(hb, m30)));
  q[3] = f(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                           _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30)));
}

// Fetches the cache lines of the super-block `ahead` blocks after w (210 bytes: lines
// at +0, +64, +128, +192 cover it, and consecutive blocks leave no line out). The
// address is formed as an integer: it may lie past the matrix, where a prefetch is
// harmless (it never faults).
inline void prefetch_block(const BlockQ6K* w, std::int64_t ahead) {
  const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(w) +
                           static_cast<std::uintptr_t>(ahead) * sizeof(BlockQ6K);
  _mm_prefetch(reinterpret_cast<const char*>(a), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(a + 64), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(a + 128), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(a + 192), _MM_HINT_T0);
}

}  // namespace
}  // namespace qmv::q6k_x86
