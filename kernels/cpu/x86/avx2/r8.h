// What every AVX2 kernel of the row-interleaved layouts (row_interleaved.h) uses,
// legacy and K-quant alike: the activation broadcast, the eight rows' fp16 values, and
// the quants of the 5-bit layouts.
// Included only by files built with -mavx2 -mfma -mf16c; internal linkage.
#pragma once

#include "kernels/cpu/x86/x86.h"

#include <cstdint>
#include <cstring>

#include "kernels/cpu/row_interleaved.h"

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

// Chunk c's share of a weight stream's software prefetch in the loops that go chunk
// by chunk over several streams: line c of the block AheadBlocks past `block`, so that
// block's lines spread over the first chunks rather than one burst of misses. A block
// must have at least as many chunks as lines.
template <class Layout, int Chunks, int AheadBlocks>
inline void prefetch_chunk_line(const Layout* block, int c, __m256i& anchor) {
  constexpr int kLines = static_cast<int>((sizeof(Layout) + 63) / 64);
  static_assert(kLines <= Chunks, "a block's lines must fit its chunks, one each");
  if (c < kLines)
    x86::prefetch_line_after(reinterpret_cast<std::uintptr_t>(block) + AheadBlocks * sizeof(Layout) + 64 * c, anchor);
}

// Chunk k's two quants in the 5-bit layouts of whole quants (BlockQ5_0x8, BlockQ5_Kx8):
// each byte of v holds a low weight whole in bits 0-4 and a high weight's low three bits
// in bits 5-7, whose top two bits sit at bits 2k and 2k+1 of the same byte of top. k is
// a constant once inlined; 16-bit shifts of at most 3 bring nothing into bits 3 and 4
// from the other byte of the word.
inline void five_bit_quants(__m256i v, __m256i top, int k, __m256i& low, __m256i& high) {
  const __m256i top_at_3 = 2 * k < 3 ? _mm256_slli_epi16(top, 3 - 2 * k) : _mm256_srli_epi16(top, 2 * k - 3);
  low = _mm256_and_si256(v, _mm256_set1_epi8(0x1f));
  high = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 5), _mm256_set1_epi8(0x07)),
                         _mm256_and_si256(top_at_3, _mm256_set1_epi8(0x18)));
}

}  // namespace
}  // namespace qmv::interleave
