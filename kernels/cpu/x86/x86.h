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

// Where a loop's software prefetches leave their lines. L1 (prefetcht0): where the loads
// want them, but every line in flight holds one of L1's few miss buffers until it lands.
// L2 (prefetcht1, "L2 and beyond" in the x86 manuals): L2's larger set of miss buffers
// holds them, so a loop that spends long on each line (a batch kernel with several
// vectors) keeps more of the read in flight and can look further ahead. Which is faster
// is the machine's and the loop's, so a loop that offers both is two kernels
// (kernels/README.md, `l2pf`; results/amd-zen4-2c/bench-batch-l2pf-q4_K.csv).
enum class PrefetchTo { L1, L2 };

// How far ahead a loop prefetching to L2 reads: 4 KiB, against 2 KiB for most L1 loops
// (results/amd-zen4-2c/l2pf-distance.csv: 4 to 12 KiB read alike, all ahead of 2 KiB).
inline constexpr int kL2PrefetchBytes = 4096;

// The distance of a loop whose L1 prefetches run l1_bytes ahead, when they go to kTo.
template <PrefetchTo kTo>
constexpr int prefetch_ahead_bytes(int l1_bytes) {
  return kTo == PrefetchTo::L1 ? l1_bytes : kL2PrefetchBytes;
}

// Prefetches the cache line holding byte address a into kTo. An integer address: near
// the end of a matrix it lies past the buffer, which a prefetch may touch but a
// pointer may not point to.
template <PrefetchTo kTo = PrefetchTo::L1>
inline void prefetch_line(std::uintptr_t a) {
  _mm_prefetch(reinterpret_cast<const char*>(a), kTo == PrefetchTo::L1 ? _MM_HINT_T0 : _MM_HINT_T1);
}

// prefetch_line at a fixed point of a computation: after the last update of `anchor`
// before it, and before the next. The compiler otherwise hoists the prefetches of an
// unrolled block to its top, and a burst of misses there reads slower from DRAM than
// the same misses spread through the block.
template <PrefetchTo kTo = PrefetchTo::L1>
inline void prefetch_line_after(std::uintptr_t a, __m256i& anchor) {
#if defined(__GNUC__)
  if constexpr (kTo == PrefetchTo::L1)
    __asm__ volatile("prefetcht0 (%1)" : "+x"(anchor) : "r"(a));
  else
    __asm__ volatile("prefetcht1 (%1)" : "+x"(anchor) : "r"(a));
#else
  prefetch_line<kTo>(a);
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
