// What every x86 kernel family header (q4_K.h, q5_K.h, q6_K.h) starts
// from: the intrinsics header and the helpers that do not depend on a block format.
// Only SSE3 and AVX instructions, which every x86 kernel file is built with.
// Everything has internal linkage, so files built with different ISA flags never share
// (or pick up) one another's copy.
#pragma once

// GCC 12 reports its own _mm512_undefined_*() placeholders (inside _mm512_cvtepi32_ps,
// _mm512_reduce_add_ps, ...) as uninitialized (GCC bug 105593, fixed in 13). The
// diagnostics are tied to the intrinsic header's lines, so silencing them around its
// inclusion is enough; this header is included first, so this is where it is read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif

#include <cstdint>

namespace qmv::x86 {
namespace {

// The sum of the eight lanes.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Prefetches the cache line holding byte address a into L1. An integer address: near
// the end of a matrix it lies past the buffer, which a prefetch may touch but a
// pointer may not point to.
inline void prefetch_line(std::uintptr_t a) {
  _mm_prefetch(reinterpret_cast<const char*>(a), _MM_HINT_T0);
}

// prefetch_line at a fixed point of a computation: after the last update of `anchor`
// before it, and before the next. The compiler otherwise hoists the prefetches of an
// unrolled block to its top, and a burst of misses there reads slower from DRAM than
// the same misses spread through the block.
inline void prefetch_line_after(std::uintptr_t a, __m256i& anchor) {
#if defined(__GNUC__)
  __asm__ volatile("prefetcht0 (%1)" : "+x"(anchor) : "r"(a));
#else
  prefetch_line(a);
#endif
}

// Pins an accumulator's order of additions where it is called. GCC re-associates a
// chain of integer vector additions into a tree, which keeps every term live at once:
// in an unrolled block of 16 vpmaddubsw products that is more than the 16 registers,
// and the products go to the stack. An empty asm costs no instruction.
inline void keep_in_register(__m256i& v) {
#if defined(__GNUC__)
  __asm__("" : "+x"(v));
#endif
}

}  // namespace
}  // namespace qmv::x86
