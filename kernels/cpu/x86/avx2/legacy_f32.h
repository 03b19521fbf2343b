// Helpers shared by the x86 kernels of the legacy quants (q4_0, q4_1, q5_0, q5_1,
// q8_0 _f32 files of this folder): a block of 32 quants is decoded into int8 lanes in two SSE
// registers, then widened to float and FMA'd against the activations. Only SSSE3,
// AVX2, FMA and F16C instructions. Everything has internal linkage, so files built
// with different ISA flags never share (or pick up) one another's copy.
#pragma once

#include "kernels/cpu/x86/x86.h"

#include <cstdint>
#include <cstring>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace qmv::legacy_x86 {
namespace {

// How far ahead of the block being read the weight stream is prefetched, in bytes.
// The hardware prefetchers leave a single stream far below the read bandwidth (see
// q4_K_f32.cpp); one prefetch per block is cheap next to the decode.
inline constexpr std::uintptr_t kPrefetchBytes = 4096;

inline void prefetch_ahead(const void* block) {
  x86::prefetch_line(reinterpret_cast<std::uintptr_t>(block) + kPrefetchBytes);
}

// The 32 quants of a block as int8: weights 0..15 in lo, 16..31 in hi.
struct Quants32 {
  __m128i lo;
  __m128i hi;
};

// The nibbles of qs[0..15]: low nibbles are weights 0..15, high nibbles 16..31.
inline Quants32 unpack_nibbles(const std::uint8_t* qs) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m4 = _mm_set1_epi8(0x0f);
  return {_mm_and_si128(bytes, m4), _mm_and_si128(_mm_srli_epi16(bytes, 4), m4)};
}

// 0x10 in byte i where bit i of the little-endian word qh is set, else 0: the fifth
// quant bit of each weight, in place.
inline Quants32 fifth_bits(const std::uint8_t* qh) {
  std::uint32_t word;
  std::memcpy(&word, qh, sizeof(word));
  const __m128i all = _mm_set1_epi32(static_cast<int>(word));
  // Byte i of a half takes the qh byte holding its bit, then keeps only that bit.
  const __m128i bit = _mm_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  auto spread = [&](__m128i byte_index) {
    const __m128i selected = _mm_and_si128(_mm_shuffle_epi8(all, byte_index), bit);
    return _mm_and_si128(_mm_cmpeq_epi8(selected, bit), _mm_set1_epi8(0x10));
  };
  return {spread(_mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1)),
          spread(_mm_setr_epi8(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3))};
}

inline Quants32 operator|(Quants32 a, Quants32 b) {
  return {_mm_or_si128(a.lo, b.lo), _mm_or_si128(a.hi, b.hi)};
}

// q - zero on every byte (the _0 types store their quants offset by 8 or 16).
inline Quants32 centred(Quants32 q, char zero) {
  const __m128i z = _mm_set1_epi8(zero);
  return {_mm_sub_epi8(q.lo, z), _mm_sub_epi8(q.hi, z)};
}

inline Quants32 load_int8(const std::int8_t* qs) {
  return {_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 16))};
}

// Eight lanes whose sum is sum(q[i] * x[i]) over the block's 32 weights.
inline __m256 dot32(Quants32 q, const float* x) {
  auto widen = [](__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)); };
  __m256 t = _mm256_mul_ps(widen(q.lo), _mm256_loadu_ps(x));
  t = _mm256_fmadd_ps(widen(_mm_srli_si128(q.lo, 8)), _mm256_loadu_ps(x + 8), t);
  t = _mm256_fmadd_ps(widen(q.hi), _mm256_loadu_ps(x + 16), t);
  return _mm256_fmadd_ps(widen(_mm_srli_si128(q.hi, 8)), _mm256_loadu_ps(x + 24), t);
}

inline __m256 broadcast_fp16(fp16_bits h) { return _mm256_set1_ps(_cvtsh_ss(h)); }

// For the _1 types (w = d*q + m): eight lanes per block whose sum is the block's sum
// of x, so the offset term is one FMA per block. Written to `out` (8 floats per block).
inline void block_sums_of_x(const float* x, std::int64_t n_blocks, float* out) {
  for (std::int64_t b = 0; b < n_blocks; ++b) {
    const float* xb = x + b * kLegacyBlock;
    const __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(xb), _mm256_loadu_ps(xb + 8)),
                                   _mm256_add_ps(_mm256_loadu_ps(xb + 16), _mm256_loadu_ps(xb + 24)));
    _mm256_store_ps(out + 8 * b, s);
  }
}

// One row of a symmetric type (Q4_0, Q5_0, Q8_0: w = d*q): y = sum_b d_b * (q_b . x_b).
// Decode gives a block's 32 quants, centred where the format needs it.
template <class Block, Quants32 (*Decode)(const Block&)>
float dot_row_symmetric(const Block* blocks, const float* x, std::int64_t n_blocks) {
  __m256 acc = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < n_blocks; ++b) {
    const Block& blk = blocks[b];
    prefetch_ahead(&blk);
    acc = _mm256_fmadd_ps(dot32(Decode(blk), x + b * kLegacyBlock), broadcast_fp16(blk.d), acc);
  }
  return x86::hsum(acc);
}

// One row of an offset type (Q4_1, Q5_1: w = d*q + m): the scale term as above, the
// offset term one FMA per block with the block sums of x (block_sums_of_x).
template <class Block, Quants32 (*Decode)(const Block&)>
float dot_row_with_offset(const Block* blocks, const float* x, const float* x_sums, std::int64_t n_blocks) {
  __m256 acc = _mm256_setzero_ps();
  __m256 acc_offset = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < n_blocks; ++b) {
    const Block& blk = blocks[b];
    prefetch_ahead(&blk);
    acc = _mm256_fmadd_ps(dot32(Decode(blk), x + b * kLegacyBlock), broadcast_fp16(blk.d), acc);
    acc_offset = _mm256_fmadd_ps(_mm256_load_ps(x_sums + 8 * b), broadcast_fp16(blk.m), acc_offset);
  }
  return x86::hsum(_mm256_add_ps(acc, acc_offset));
}

// The kernel of an offset type: the block sums of x once per call (they do not depend on
// the row, so every row shares them), then the rows over tiles.
template <class Block, Quants32 (*Decode)(const Block&)>
Status run_with_offset(const MatVecArgs& a) {
  const std::int64_t n_blocks = a.shape.cols / kLegacyBlock;
  const auto* w = static_cast<const Block*>(a.w);
  const auto* x = static_cast<const float*>(a.x);
  auto* x_sums = static_cast<float*>(thread_scratch(static_cast<std::size_t>(n_blocks) * 8 * sizeof(float)));
  block_sums_of_x(x, n_blocks, x_sums);
  parallel_row_tiles(a.shape.rows, a.threads, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) a.y[r] = dot_row_with_offset<Block, Decode>(w + r * n_blocks, x, x_sums, n_blocks);
  });
  return Status::Ok();
}

}  // namespace
}  // namespace qmv::legacy_x86
