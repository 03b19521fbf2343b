// The per-lane arithmetic and launch geometry of the Q4_K CUDA variants, as plain
// host+device code. Each kernel is a thin loop around these functions; the CPU test
// (tests/cuda_q4_K_replay_test.cpp) calls the same functions for every block, warp
// and lane the kernel's launch would have, so the indexing is checked without a GPU.
//
// Memory reads go through a Loads policy (a template parameter): on the device it
// issues the real loads (Q4KLoads, kernels/cuda/q4_K_kernels.cuh), in the test it also
// counts which bytes each lane reads. A policy provides GlobalLoads' interface
// (global_loads.h; these lanes use weight_u8, _u16, _u32, _u32x2, _u32x4 and act_f32,
// _f32x4, _u32) and the two header broadcasts:
//   header_from_lane_0(words, lane, out[4])       lane 0 loads, the warp receives
//   header_from_lanes_0_to_3(words, lane, out[4]) lane i < 4 loads word i, the warp receives
//
// Q4_K block (144 bytes, 36 little-endian 32-bit words when the block is 4-byte
// aligned, which it is whenever the matrix is: 144 is a multiple of 16):
//   word 0      d | dmin << 16 (fp16 bits)
//   words 1..3  the 12 packed bytes of the eight 6-bit scales and mins
//   words 4..35 qs: word 4 + k holds qs bytes 4k..4k+3. With g = k / 8, p = k % 8, its
//               low nibbles are weights 64g + 4p + i (sub-block 2g) and its high
//               nibbles weights 64g + 32 + 4p + i (sub-block 2g + 1), i = 0..3.
// Q8_1 block (36 bytes, 9 words): word 0 = d | s << 16 (fp16 bits, s = d * sum(q)),
// words 1..8 the 32 int8 quants. Sub-block j of super-block b pairs with Q8_1 block
// 8b + j, so a super-block's activations are 72 consecutive words.
#pragma once

#include <cstdint>

#include "kernels/cuda/global_loads.h"
#include "kernels/cuda/lane_math.h"
#include "kernels/cuda/tma_schedule.h"
#include "kernels/formats/formats.h"
#include "kernels/kernel.h"

namespace qmv::cuda::q4k {

inline constexpr int kWarpLanes = 32;
inline constexpr int kBlockBytes = 144;
inline constexpr int kBlockWords = 36;
inline constexpr int kHeaderWords = 4;
inline constexpr int kQsWordOffset = 4;  // first qs word of a block
inline constexpr int kQsBytesOffset = 16;
inline constexpr int kQ8_1Words = 9;
inline constexpr int kQ8_1WordsPerSuperBlock = 8 * kQ8_1Words;
inline constexpr std::uint32_t kLowNibbles = 0x0F0F0F0Fu;
static_assert(sizeof(BlockQ4K) == kBlockBytes && sizeof(BlockQ8_1) == kQ8_1Words * 4);

// A 16-byte store (shared memory staging): one vector store per lane, which a warp
// completes in the minimum four wavefronts, where four scalar stores at a stride of
// four words would meet 4-way bank conflicts.
QMV_HD void store_f32x4(float* p, const F32x4& v) {
#if defined(__CUDA_ARCH__)
  *reinterpret_cast<float4*>(p) = make_float4(v.x, v.y, v.z, v.w);
#else
  p[0] = v.x;
  p[1] = v.y;
  p[2] = v.z;
  p[3] = v.w;
#endif
}

// ---------------------------------------------------------------------------------
// Scales and mins from the three packed scale words, four 6-bit values per word:
// byte k of sc_lo / m_lo belongs to sub-block k, byte k of sc_hi / m_hi to 4 + k.
// Sub-blocks 4..7 keep their low four bits in bytes 8..11 and their top two bits in
// the spare top bits of bytes 0..7.
struct Scales8 {
  std::uint32_t sc_lo, sc_hi, m_lo, m_hi;
};

QMV_HD Scales8 unpack_scales(std::uint32_t u0, std::uint32_t u1, std::uint32_t u2) {
  Scales8 s;
  s.sc_lo = u0 & 0x3F3F3F3Fu;
  s.m_lo = u1 & 0x3F3F3F3Fu;
  s.sc_hi = (u2 & kLowNibbles) | ((u0 >> 2) & 0x30303030u);
  s.m_hi = ((u2 >> 4) & kLowNibbles) | ((u1 >> 2) & 0x30303030u);
  return s;
}

QMV_HD std::uint32_t scale_of(const Scales8& s, int j) { return byte_of(j < 4 ? s.sc_lo : s.sc_hi, j & 3); }
QMV_HD std::uint32_t min_of(const Scales8& s, int j) { return byte_of(j < 4 ? s.m_lo : s.m_hi, j & 3); }

// The scales and mins of the two sub-blocks 2g and 2g + 1 that share the qs bytes
// of group g, for lanes that only ever touch one group: a lane-constant selector
// (made once, outside the loop) gathers the bytes with two byte permutes, the same
// few instructions whichever half of the packing the group lives in.
//   g < 2:  scale = byte 2g(+1) of u0 & 63, min = byte 2g(+1) of u1 & 63.
//   g >= 2: with k = 2(g - 2): scale = (byte k(+1) of u2 & 15) | (byte k(+1) of u0 >> 6) << 4,
//           min = (byte k(+1) of u2 >> 4) | (byte k(+1) of u1 >> 6) << 4.
// The permute puts the two low-part bytes in bytes 0, 1 and the two high-bit donors
// in bytes 2, 3; a shift by 18 brings a donor's bits 6, 7 to bits 4, 5 of the byte
// two places below.
struct ScaleSelector {
  std::uint32_t perm;       // byte_perm selector over (u0 or u1, u2)
  std::uint32_t low_mask;   // whole 6-bit values (g < 2) or low nibbles (g >= 2)
  std::uint32_t high_mask;  // 0 (g < 2) or the donated two high bits (g >= 2)
  int min_shift;            // 0 (g < 2) or 4: those mins sit in the high nibbles of u2
};

QMV_HD ScaleSelector scale_selector(int g) {
  if (g < 2) {
    const std::uint32_t b = 2u * static_cast<std::uint32_t>(g);
    return {b | (b + 1) << 4 | b << 8 | (b + 1) << 12, 0x3F3Fu, 0u, 0};
  }
  const std::uint32_t k = 2u * static_cast<std::uint32_t>(g - 2);
  return {(4 + k) | (5 + k) << 4 | k << 8 | (k + 1) << 12, 0x0F0Fu, 0x3030u, 4};
}

// Byte 0: sub-block 2g, byte 1: sub-block 2g + 1; bits 14.. are zero.
struct ScalePairs {
  std::uint32_t sc, m;
};

QMV_HD ScalePairs scale_pairs(const std::uint32_t (&hdr)[kHeaderWords], const ScaleSelector& sel) {
  const std::uint32_t a = byte_perm(hdr[1], hdr[3], sel.perm);
  const std::uint32_t b = byte_perm(hdr[2], hdr[3], sel.perm);
  return {(a & sel.low_mask) | ((a >> 18) & sel.high_mask),
          ((b >> sel.min_shift) & sel.low_mask) | ((b >> 18) & sel.high_mask)};
}

QMV_HD float half_low(std::uint32_t w) { return half_bits_to_float(static_cast<std::uint16_t>(w & 0xFFFFu)); }
QMV_HD float half_high(std::uint32_t w) { return half_bits_to_float(static_cast<std::uint16_t>(w >> 16)); }

// d * scale and dmin * min of all eight sub-blocks: the factors of the byte-per-lane
// layouts, whose lanes touch every sub-block of a super-block.
struct SubBlockFactors {
  float d_sc[8];
  float dmin_m[8];
};

// From the block's own bytes, read by this lane: d and dmin as 16-bit loads, the
// 12 scale bytes one by one (what a warp-per-row kernel does without any sharing).
template <class Loads>
QMV_HD SubBlockFactors factors_from_bytes(const Loads& ld, const std::uint8_t* block) {
  const float d = half_bits_to_float(ld.weight_u16(block));
  const float dmin = half_bits_to_float(ld.weight_u16(block + 2));
  std::uint8_t packed[kKScaleBytes];
  for (int i = 0; i < kKScaleBytes; ++i) packed[i] = ld.weight_u8(block + 4 + i);
  SubBlockFactors f;
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    k_scale_min(j, packed, sc, m);
    f.d_sc[j] = d * static_cast<float>(sc);
    f.dmin_m[j] = dmin * static_cast<float>(m);
  }
  return f;
}

// From the four header words, however the lane got them.
QMV_HD SubBlockFactors factors_from_words(const std::uint32_t (&hdr)[kHeaderWords]) {
  const float d = half_low(hdr[0]), dmin = half_high(hdr[0]);
  const Scales8 s = unpack_scales(hdr[1], hdr[2], hdr[3]);
  SubBlockFactors f;
  for (int j = 0; j < 8; ++j) {
    f.d_sc[j] = d * byte_to_float(j < 4 ? s.sc_lo : s.sc_hi, j & 3);
    f.dmin_m[j] = dmin * byte_to_float(j < 4 ? s.m_lo : s.m_hi, j & 3);
  }
  return f;
}

// ---------------------------------------------------------------------------------
// Byte per lane (warp, tiled, chunked, coalesced, wide): a warp takes a whole
// super-block; lane l reads qs bytes l + 32g (g = 0..3), whose nibbles are weights
// 64g + l (sub-block 2g) and 64g + 32 + l (sub-block 2g + 1). Consecutive lanes read
// consecutive bytes and consecutive activations (no bank conflicts in shared memory).
// `x_sb` points at the super-block's 256 activations (global or shared memory).
template <class Loads>
QMV_HD float byte_lane_dot(const Loads& ld, const SubBlockFactors& f, const std::uint8_t* block, const float* x_sb,
                           int lane) {
  float sum = 0.0f;
  QMV_UNROLL
  for (int g = 0; g < 4; ++g) {
    const std::uint32_t q = ld.weight_u8(block + kQsBytesOffset + 32 * g + lane);
    const float x_lo = ld.act_f32(x_sb + 64 * g + lane);
    const float x_hi = ld.act_f32(x_sb + 64 * g + 32 + lane);
    sum += (f.d_sc[2 * g] * byte_to_float(q & 0xFu, 0) - f.dmin_m[2 * g]) * x_lo;
    sum += (f.d_sc[2 * g + 1] * byte_to_float(q >> 4, 0) - f.dmin_m[2 * g + 1]) * x_hi;
  }
  return sum;
}

// One super-block for one lane, every lane reading the header itself.
template <class Loads>
QMV_HD float byte_lane_superblock(const Loads& ld, const std::uint8_t* block, const float* x_sb, int lane) {
  return byte_lane_dot(ld, factors_from_bytes(ld, block), block, x_sb, lane);
}

// ---------------------------------------------------------------------------------
// Word per lane (vectorized, warpxN, dp4a, halfwarp_dp4a, warpxN_dp4a). A lane keeps a cursor:
// pointers at what it reads of one super-block of its row, so that the super-blocks
// it goes on to read sit at constant offsets (36 words of weights and 256 floats or
// 72 Q8_1 words of activations each) and the loads need no per-super-block index
// arithmetic.

// f32 activations: lane k of a super-block reads qs word k (a 128-byte coalesced load
// per warp) and the two float4s of activations its eight nibbles multiply.
struct F32Cursor {
  const std::uint32_t* hdr;  // the block's header words
  const std::uint32_t* qs;   // the lane's qs word
  const float* x_lo;         // the four activations of its low nibbles (+32: high)
};

QMV_HD F32Cursor f32_cursor(const std::uint32_t* row_words, const float* x, int b, int word) {
  const int g = word / 8, p = word % 8;
  const std::uint32_t* block = row_words + kBlockWords * b;
  return {block, block + kQsWordOffset + word, x + kSuperBlock * b + 64 * g + 4 * p};
}

QMV_HD F32Cursor advance(F32Cursor c, int super_blocks) {
  return {c.hdr + kBlockWords * super_blocks, c.qs + kBlockWords * super_blocks, c.x_lo + kSuperBlock * super_blocks};
}

struct F32Slot {
  std::uint32_t hdr[kHeaderWords];
  std::uint32_t q;
  F32x4 x_lo, x_hi;
};

// The weights and activations of super-block `sb` past the cursor (the header is
// the caller's: by lane, or by shuffle).
template <class Loads>
QMV_HD void load_f32_word(const Loads& ld, const F32Cursor& c, int sb, F32Slot& s) {
  s.q = ld.weight_u32(c.qs + kBlockWords * sb);
  s.x_lo = ld.act_f32x4(c.x_lo + kSuperBlock * sb);
  s.x_hi = ld.act_f32x4(c.x_lo + kSuperBlock * sb + 32);
}

// `sel` is scale_selector(word / 8), made once per lane.
QMV_HD float f32_word_partial(const F32Slot& s, const ScaleSelector& sel) {
  const ScalePairs sp = scale_pairs(s.hdr, sel);
  const float d = half_low(s.hdr[0]), dmin = half_high(s.hdr[0]);
  const std::uint32_t lo = s.q & kLowNibbles, hi = (s.q >> 4) & kLowNibbles;
  const float dot_lo = byte_to_float(lo, 0) * s.x_lo.x + byte_to_float(lo, 1) * s.x_lo.y +
                       byte_to_float(lo, 2) * s.x_lo.z + byte_to_float(lo, 3) * s.x_lo.w;
  const float dot_hi = byte_to_float(hi, 0) * s.x_hi.x + byte_to_float(hi, 1) * s.x_hi.y +
                       byte_to_float(hi, 2) * s.x_hi.z + byte_to_float(hi, 3) * s.x_hi.w;
  const float sum_lo = (s.x_lo.x + s.x_lo.y) + (s.x_lo.z + s.x_lo.w);
  const float sum_hi = (s.x_hi.x + s.x_hi.y) + (s.x_hi.z + s.x_hi.w);
  const float scaled = byte_to_float(sp.sc, 0) * dot_lo + byte_to_float(sp.sc, 1) * dot_hi;
  const float mins = byte_to_float(sp.m, 0) * sum_lo + byte_to_float(sp.m, 1) * sum_hi;
  return d * scaled - dmin * mins;
}

// Q8_1 activations: a lane takes kWords consecutive qs words starting at `word` (all
// in one group g = word / 8, position p = word % 8), dots their low nibbles with
// quant words p.. of Q8_1 block 8b + 2g and their high nibbles with the same words
// of block 8b + 2g + 1, by __dp4a. Per sub-block the result is
//   d*sc*dx*sum(q*xq) - dmin*m*s,   s = dx*sum(xq) from the Q8_1 block.
// The lanes of a group share its two min terms: the group's first lane adds the even
// sub-block's, its second lane the odd one's, the others none (a zero mask, so no
// lane branches).
struct Q8Lane {
  ScaleSelector sel;
  int min_shift;           // 0: this lane adds the even sub-block's min term, 8: the odd one's
  std::uint32_t min_mask;  // 0xFF, or 0 for lanes that add no min term
};

QMV_HD Q8Lane q8_lane(int word, int words_per_lane) {
  const int in_group = (word % 8) / words_per_lane;
  return {scale_selector(word / 8), in_group == 1 ? 8 : 0, in_group < 2 ? 0xFFu : 0u};
}

struct Q8Cursor {
  const std::uint32_t* hdr;   // the block's header words
  const std::uint32_t* qs;    // the lane's first qs word
  const std::uint32_t* x_lo;  // d | s word of Q8_1 block 8b + 2g (block 8b + 2g + 1 follows)
  const std::uint32_t* x_q;   // the quant word of block 8b + 2g that pairs with the first qs word
};

QMV_HD Q8Cursor q8_cursor(const std::uint32_t* row_words, const std::uint32_t* x_words, int b, int word) {
  const int g = word / 8, p = word % 8;
  const std::uint32_t* block = row_words + kBlockWords * b;
  const std::uint32_t* x_lo = x_words + kQ8_1WordsPerSuperBlock * b + kQ8_1Words * (2 * g);
  return {block, block + kQsWordOffset + word, x_lo, x_lo + 1 + p};
}

QMV_HD Q8Cursor advance(Q8Cursor c, int super_blocks) {
  return {c.hdr + kBlockWords * super_blocks, c.qs + kBlockWords * super_blocks,
          c.x_lo + kQ8_1WordsPerSuperBlock * super_blocks, c.x_q + kQ8_1WordsPerSuperBlock * super_blocks};
}

template <int kWords>
struct Q8Slot {
  std::uint32_t hdr[kHeaderWords];
  std::uint32_t q[kWords];
  int a_lo[kWords], a_hi[kWords];
  std::uint32_t ds_lo, ds_hi;  // d | s << 16 of the two Q8_1 blocks
};

// The weights of super-block `sb` past the cursor (the header is the caller's: by
// lane, or by shuffle).
template <int kWords, class Loads>
QMV_HD void load_q4_words(const Loads& ld, const Q8Cursor& c, int sb, Q8Slot<kWords>& s) {
  static_assert(kWords == 1 || kWords == 2 || kWords == 4, "one, two or four words per lane");
  const std::uint32_t* qs = c.qs + kBlockWords * sb;
  if constexpr (kWords == 1) {
    s.q[0] = ld.weight_u32(qs);
  } else if constexpr (kWords == 2) {
    const U32x2 v = ld.weight_u32x2(qs);
    s.q[0] = v.x;
    s.q[1] = v.y;
  } else {
    const U32x4 v = ld.weight_u32x4(qs);
    s.q[0] = v.x;
    s.q[1] = v.y;
    s.q[2] = v.z;
    s.q[3] = v.w;
  }
}

// The activation words that pair with them, from the vector `vec_words` words past the
// cursor's (a batch's vectors lie back to back; 0 for the first or only one).
template <int kWords, class Loads>
QMV_HD void load_q8_1_act_words(const Loads& ld, const Q8Cursor& c, int sb, std::int64_t vec_words,
                                Q8Slot<kWords>& s) {
  const std::uint32_t* x_lo = c.x_lo + kQ8_1WordsPerSuperBlock * sb + vec_words;
  const std::uint32_t* x_q = c.x_q + kQ8_1WordsPerSuperBlock * sb + vec_words;
  s.ds_lo = ld.act_u32(x_lo);
  s.ds_hi = ld.act_u32(x_lo + kQ8_1Words);
  QMV_UNROLL
  for (int i = 0; i < kWords; ++i) {
    s.a_lo[i] = static_cast<int>(ld.act_u32(x_q + i));
    s.a_hi[i] = static_cast<int>(ld.act_u32(x_q + kQ8_1Words + i));
  }
}

// Both: the weights and activations of super-block `sb` past the cursor.
template <int kWords, class Loads>
QMV_HD void load_q8_1_words(const Loads& ld, const Q8Cursor& c, int sb, Q8Slot<kWords>& s) {
  load_q4_words<kWords>(ld, c, sb, s);
  load_q8_1_act_words<kWords>(ld, c, sb, 0, s);
}

// The lane's partial sum of one super-block, its scale and min pair `sp` already
// decoded from the header (a batch decodes it once for all its vectors).
template <int kWords>
QMV_HD float q8_1_words_partial(const Q8Slot<kWords>& s, const Q8Lane& lane, const ScalePairs& sp) {
  // |sc * sum| <= 63 * kWords * 4 * 15 * 128 < 2^22: small_int_to_float is exact.
  static_assert(kWords <= 8);
  int sum_lo = 0, sum_hi = 0;
  QMV_UNROLL
  for (int i = 0; i < kWords; ++i) {
    sum_lo = dp4a(static_cast<int>(s.q[i] & kLowNibbles), s.a_lo[i], sum_lo);
    sum_hi = dp4a(static_cast<int>((s.q[i] >> 4) & kLowNibbles), s.a_hi[i], sum_hi);
  }
  const int sc_even = static_cast<int>(sp.sc & 0xFFu), sc_odd = static_cast<int>(sp.sc >> 8);
  const float scaled = half_low(s.ds_lo) * small_int_to_float(sc_even * sum_lo) +
                       half_low(s.ds_hi) * small_int_to_float(sc_odd * sum_hi);
  const std::uint32_t m = (sp.m >> lane.min_shift) & lane.min_mask;
  const float s_min = half_high(lane.min_shift ? s.ds_hi : s.ds_lo);
  return half_low(s.hdr[0]) * scaled - half_high(s.hdr[0]) * (small_uint_to_float(m) * s_min);
}

template <int kWords>
QMV_HD float q8_1_words_partial(const Q8Slot<kWords>& s, const Q8Lane& lane) {
  return q8_1_words_partial<kWords>(s, lane, scale_pairs(s.hdr, lane.sel));
}

// The header words of a block, loaded by this lane as one 16-byte load (every lane
// of the group asks for the same address: one transaction).
template <class Loads>
QMV_HD void header_by_lane(const Loads& ld, const std::uint32_t* hdr_words, std::uint32_t (&hdr)[kHeaderWords]) {
  const U32x4 v = ld.weight_u32x4(hdr_words);
  hdr[0] = v.x;
  hdr[1] = v.y;
  hdr[2] = v.z;
  hdr[3] = v.w;
}

// ---------------------------------------------------------------------------------
// Launch geometry and per-lane row loops, one section per variant. `row_bytes` /
// `row_words` point at the row's first block; `nb` is the number of super-blocks per
// row (cols / 256).
//
// The unrolled loops run whole groups of kUnroll super-blocks (all loads first, then
// all arithmetic, so kUnroll loads per lane are in flight) while a whole group is
// left, then the rest one at a time.

QMV_HD constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Row `row` of a matrix with nb super-blocks per row, as bytes or as words.
QMV_HD const std::uint8_t* row_bytes_of(const std::uint8_t* w, std::int64_t row, int nb) {
  return w + row * nb * kBlockBytes;
}
QMV_HD const std::uint32_t* row_words_of(const std::uint32_t* w, std::int64_t row, int nb) {
  return w + row * nb * kBlockWords;
}

// warp: one warp (one 32-thread block) per row.
namespace warp {
inline constexpr int kThreads = 32;
QMV_HD std::int64_t grid(std::int64_t rows) { return rows; }
template <class Loads>
QMV_HD float lane_row(const Loads& ld, const std::uint8_t* row_bytes, const float* x, int nb, int lane) {
  float acc = 0.0f;
  for (int b = 0; b < nb; ++b) acc += byte_lane_superblock(ld, row_bytes + kBlockBytes * b, x + kSuperBlock * b, lane);
  return acc;
}
}  // namespace warp

// coalesced: one warp (one 32-thread block) per row; lane 0 loads the header words
// and the warp receives them by shuffle.
namespace coalesced {
inline constexpr int kThreads = 32;
QMV_HD std::int64_t grid(std::int64_t rows) { return rows; }
template <class Loads>
QMV_HD float lane_row(const Loads& ld, const std::uint32_t* row_words, const float* x, int nb, int lane) {
  float acc = 0.0f;
  for (int b = 0; b < nb; ++b) {
    const std::uint32_t* block = row_words + kBlockWords * b;
    std::uint32_t hdr[kHeaderWords];
    ld.header_from_lane_0(block, lane, hdr);
    acc += byte_lane_dot(ld, factors_from_words(hdr), reinterpret_cast<const std::uint8_t*>(block), x + kSuperBlock * b,
                         lane);
  }
  return acc;
}
}  // namespace coalesced

// tiled: 4 rows (warps) per 128-thread block; the whole activation vector is staged
// in shared memory once per block, so cols is bounded by the default 48 KiB.
namespace tiled {
inline constexpr int kRowsPerBlock = 4;
inline constexpr int kThreads = kRowsPerBlock * kWarpLanes;
inline constexpr std::int64_t kSharedBytes = 48 * 1024;
inline constexpr std::int64_t kMaxCols = kSharedBytes / 4;  // 12288
inline constexpr const char* kShapeRule =
    "rows >= 1, cols % 256 == 0, cols <= 12288 (f32 activations in 48 KiB of shared memory)";
inline bool supports(Shape s) { return supports_superblock_cols(s) && s.cols <= kMaxCols; }
QMV_HD std::int64_t grid(std::int64_t rows) { return ceil_div(rows, kRowsPerBlock); }
QMV_HD std::int64_t row_of(int block, int warp) { return std::int64_t(block) * kRowsPerBlock + warp; }
// Thread `thread` of the block copies float4s thread, thread + kThreads, ... of the
// n activations (n a multiple of 256).
template <class Loads>
QMV_HD void stage(const Loads& ld, const float* x, float* x_shared, int n, int thread) {
  for (int i = thread; i < n / 4; i += kThreads) store_f32x4(x_shared + 4 * i, ld.act_f32x4(x + 4 * i));
}
template <class SharedLoads>
QMV_HD float lane_row(const SharedLoads& ld, const std::uint8_t* row_bytes, const float* x_shared, int nb, int lane) {
  float acc = 0.0f;
  for (int b = 0; b < nb; ++b)
    acc += byte_lane_superblock(ld, row_bytes + kBlockBytes * b, x_shared + kSuperBlock * b, lane);
  return acc;
}
}  // namespace tiled

// chunked: as tiled, with the activations staged kChunkSuperBlocks super-blocks
// (8 KiB) at a time, so any cols fits.
namespace chunked {
inline constexpr int kRowsPerBlock = 4;
inline constexpr int kThreads = kRowsPerBlock * kWarpLanes;
inline constexpr int kChunkSuperBlocks = 8;
inline constexpr int kChunkFloats = kChunkSuperBlocks * kSuperBlock;
QMV_HD std::int64_t grid(std::int64_t rows) { return ceil_div(rows, kRowsPerBlock); }
QMV_HD std::int64_t row_of(int block, int warp) { return std::int64_t(block) * kRowsPerBlock + warp; }
QMV_HD int chunks(int nb) { return (nb + kChunkSuperBlocks - 1) / kChunkSuperBlocks; }
QMV_HD int chunk_first(int c) { return c * kChunkSuperBlocks; }
QMV_HD int chunk_count(int c, int nb) {
  const int left = nb - chunk_first(c);
  return left < kChunkSuperBlocks ? left : kChunkSuperBlocks;
}
// Thread `thread` copies float4s thread, thread + kThreads, ... of the chunk.
template <class Loads>
QMV_HD void stage(const Loads& ld, const float* x, float* x_chunk, int c, int nb, int thread) {
  const float* src = x + std::int64_t(chunk_first(c)) * kSuperBlock;
  const int n4 = chunk_count(c, nb) * (kSuperBlock / 4);
  for (int i = thread; i < n4; i += kThreads) store_f32x4(x_chunk + 4 * i, ld.act_f32x4(src + 4 * i));
}
template <class SharedLoads>
QMV_HD float lane_chunk(const SharedLoads& ld, const std::uint8_t* row_bytes, const float* x_chunk, int c, int nb,
                        int lane) {
  float acc = 0.0f;
  const int first = chunk_first(c), n = chunk_count(c, nb);
  for (int i = 0; i < n; ++i)
    acc += byte_lane_superblock(ld, row_bytes + kBlockBytes * (first + i), x_chunk + kSuperBlock * i, lane);
  return acc;
}
}  // namespace chunked

// wide: 8 warps (256 threads) per row; warp w takes super-blocks w, w + 8, ...;
// byte per lane within a warp; warp sums meet in shared memory.
namespace wide {
inline constexpr int kWarps = 8;
inline constexpr int kThreads = kWarps * kWarpLanes;
QMV_HD std::int64_t grid(std::int64_t rows) { return rows; }
template <class Loads>
QMV_HD float lane_row(const Loads& ld, const std::uint8_t* row_bytes, const float* x, int nb, int warp, int lane) {
  float acc = 0.0f;
  for (int b = warp; b < nb; b += kWarps)
    acc += byte_lane_superblock(ld, row_bytes + kBlockBytes * b, x + kSuperBlock * b, lane);
  return acc;
}
}  // namespace wide

// vectorized: one warp per row, 4 rows per 128-thread block; lane k reads qs word k
// (32-bit loads, 8 nibbles) and the header as one 16-byte load; kUnroll super-blocks
// in flight per lane.
namespace vectorized {
inline constexpr int kRowsPerBlock = 4;
inline constexpr int kThreads = kRowsPerBlock * kWarpLanes;
inline constexpr int kUnroll = 4;
QMV_HD std::int64_t grid(std::int64_t rows) { return ceil_div(rows, kRowsPerBlock); }
QMV_HD std::int64_t row_of(int block, int warp) { return std::int64_t(block) * kRowsPerBlock + warp; }
template <class Loads>
QMV_HD float lane_row(const Loads& ld, const std::uint32_t* row_words, const float* x, int nb, int lane) {
  const ScaleSelector sel = scale_selector(lane / 8);
  F32Cursor c = f32_cursor(row_words, x, 0, lane);
  float acc = 0.0f;
  int b = 0;
  for (; b + kUnroll <= nb; b += kUnroll, c = advance(c, kUnroll)) {
    F32Slot s[kUnroll];
    QMV_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      header_by_lane(ld, c.hdr + kBlockWords * u, s[u].hdr);
      load_f32_word(ld, c, u, s[u]);
    }
    QMV_UNROLL
    for (int u = 0; u < kUnroll; ++u) acc += f32_word_partial(s[u], sel);
  }
  for (; b < nb; ++b, c = advance(c, 1)) {
    F32Slot s;
    header_by_lane(ld, c.hdr, s.hdr);
    load_f32_word(ld, c, 0, s);
    acc += f32_word_partial(s, sel);
  }
  return acc;
}
}  // namespace vectorized

// warpxN: N warps per row (one row per block of 32N threads); warp w takes
// super-blocks w, w + N, ...; word per lane, lanes 0..3 load the header words and
// the warp receives them by shuffle; kUnroll super-blocks in flight per lane.
// The loop bounds depend on the warp only, so the shuffles see the whole warp.
namespace warpxN {
inline constexpr int kUnroll = 4;
QMV_HD std::int64_t grid(std::int64_t rows) { return rows; }
template <int kWarps, class Loads>
QMV_HD float lane_row(const Loads& ld, const std::uint32_t* row_words, const float* x, int nb, int warp, int lane) {
  const ScaleSelector sel = scale_selector(lane / 8);
  F32Cursor c = f32_cursor(row_words, x, warp, lane);
  float acc = 0.0f;
  int b = warp;
  for (; b + kWarps * (kUnroll - 1) < nb; b += kWarps * kUnroll, c = advance(c, kWarps * kUnroll)) {
    F32Slot s[kUnroll];
    QMV_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      ld.header_from_lanes_0_to_3(c.hdr + kBlockWords * kWarps * u, lane, s[u].hdr);
      load_f32_word(ld, c, kWarps * u, s[u]);
    }
    QMV_UNROLL
    for (int u = 0; u < kUnroll; ++u) acc += f32_word_partial(s[u], sel);
  }
  for (; b < nb; b += kWarps, c = advance(c, kWarps)) {
    F32Slot s;
    ld.header_from_lanes_0_to_3(c.hdr, lane, s.hdr);
    load_f32_word(ld, c, 0, s);
    acc += f32_word_partial(s, sel);
  }
  return acc;
}
}  // namespace warpxN

// dp4a: one warp per row, 4 rows per 128-thread block; word per lane with Q8_1
// activations, header by lane, one super-block at a time (the plain DP4A baseline).
namespace dp4a {
inline constexpr int kRowsPerBlock = 4;
inline constexpr int kThreads = kRowsPerBlock * kWarpLanes;
QMV_HD std::int64_t grid(std::int64_t rows) { return ceil_div(rows, kRowsPerBlock); }
QMV_HD std::int64_t row_of(int block, int warp) { return std::int64_t(block) * kRowsPerBlock + warp; }
template <class Loads>
QMV_HD float lane_row(const Loads& ld, const std::uint32_t* row_words, const std::uint32_t* x_words, int nb, int lane) {
  const Q8Lane q8 = q8_lane(lane, 1);
  Q8Cursor c = q8_cursor(row_words, x_words, 0, lane);
  float acc = 0.0f;
  for (int b = 0; b < nb; ++b, c = advance(c, 1)) {
    Q8Slot<1> s;
    header_by_lane(ld, c.hdr, s.hdr);
    load_q8_1_words<1>(ld, c, 0, s);
    acc += q8_1_words_partial<1>(s, q8);
  }
  return acc;
}
}  // namespace dp4a

// The row loop of a warp whose kGroups groups of 32 / kGroups lanes take kGroups
// neighbouring super-blocks, each lane kWords consecutive qs words of its group's block:
// whole steps of kUnroll super-blocks per group (all loads, then all arithmetic), then
// the rest one at a time.
template <int kGroups, int kUnroll, int kWords, class Loads>
QMV_HD float grouped_lane_row(const Loads& ld, const std::uint32_t* row_words, const std::uint32_t* x_words, int nb,
                              int lane) {
  constexpr int kLanesPerGroup = kWarpLanes / kGroups;
  const int group = lane / kLanesPerGroup;
  const int word = kWords * (lane % kLanesPerGroup);
  const Q8Lane q8 = q8_lane(word, kWords);
  Q8Cursor c = q8_cursor(row_words, x_words, group, word);
  float acc = 0.0f;
  int b = group;
  for (; b + kGroups * (kUnroll - 1) < nb; b += kGroups * kUnroll, c = advance(c, kGroups * kUnroll)) {
    Q8Slot<kWords> s[kUnroll];
    QMV_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      header_by_lane(ld, c.hdr + kBlockWords * kGroups * u, s[u].hdr);
      load_q8_1_words<kWords>(ld, c, kGroups * u, s[u]);
    }
    QMV_UNROLL
    for (int u = 0; u < kUnroll; ++u) acc += q8_1_words_partial<kWords>(s[u], q8);
  }
  for (; b < nb; b += kGroups, c = advance(c, kGroups)) {
    Q8Slot<kWords> s;
    header_by_lane(ld, c.hdr, s.hdr);
    load_q8_1_words<kWords>(ld, c, 0, s);
    acc += q8_1_words_partial<kWords>(s, q8);
  }
  return acc;
}

// grouped_lane_row for kN activation vectors at once, back to back in x_words
// (`vec_words` words apart): each super-block's weights are loaded, and its scales
// decoded, once for all the vectors; acc[j] gets vector j's partial sum.
template <int kGroups, int kUnroll, int kWords, int kN, class Loads>
QMV_HD void grouped_lane_row_batch(const Loads& ld, const std::uint32_t* row_words, const std::uint32_t* x_words,
                                   std::int64_t vec_words, int nb, int lane, float (&acc)[kN]) {
  constexpr int kLanesPerGroup = kWarpLanes / kGroups;
  const int group = lane / kLanesPerGroup;
  const int word = kWords * (lane % kLanesPerGroup);
  const Q8Lane q8 = q8_lane(word, kWords);
  Q8Cursor c = q8_cursor(row_words, x_words, group, word);
  QMV_UNROLL
  for (int j = 0; j < kN; ++j) acc[j] = 0.0f;
  int b = group;
  for (; b + kGroups * (kUnroll - 1) < nb; b += kGroups * kUnroll, c = advance(c, kGroups * kUnroll)) {
    Q8Slot<kWords> s[kUnroll];
    ScalePairs sp[kUnroll];
    QMV_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      header_by_lane(ld, c.hdr + kBlockWords * kGroups * u, s[u].hdr);
      load_q4_words<kWords>(ld, c, kGroups * u, s[u]);
    }
    QMV_UNROLL
    for (int u = 0; u < kUnroll; ++u) sp[u] = scale_pairs(s[u].hdr, q8.sel);
    QMV_UNROLL
    for (int j = 0; j < kN; ++j) {
      QMV_UNROLL
      for (int u = 0; u < kUnroll; ++u) {
        load_q8_1_act_words<kWords>(ld, c, kGroups * u, j * vec_words, s[u]);
        acc[j] += q8_1_words_partial<kWords>(s[u], q8, sp[u]);
      }
    }
  }
  for (; b < nb; b += kGroups, c = advance(c, kGroups)) {
    Q8Slot<kWords> s;
    header_by_lane(ld, c.hdr, s.hdr);
    load_q4_words<kWords>(ld, c, 0, s);
    const ScalePairs sp = scale_pairs(s.hdr, q8.sel);
    QMV_UNROLL
    for (int j = 0; j < kN; ++j) {
      load_q8_1_act_words<kWords>(ld, c, 0, j * vec_words, s);
      acc[j] += q8_1_words_partial<kWords>(s, q8, sp);
    }
  }
}

// halfwarp_dp4a: a warp per row at a time, grid-stride over rows; its two half-warps take
// alternate super-blocks (two in flight per warp, times kUnroll per half-warp).
// Lane t of a half-warp reads qs words 2t, 2t + 1 as one 8-byte load and the header
// as one 16-byte load; the two first lanes of each group of four add its min terms.
namespace halfwarp_dp4a {
inline constexpr int kRowsPerBlock = 4;
inline constexpr int kThreads = kRowsPerBlock * kWarpLanes;
inline constexpr int kGroups = 2;  // of 16 lanes: grouped_lane_row<kGroups, kUnroll, kWordsPerLane>
inline constexpr int kUnroll = 4;
inline constexpr int kWordsPerLane = 2;
// Blocks to launch: one warp per row, at most `cap` blocks (the rest is grid-stride).
QMV_HD std::int64_t grid(std::int64_t rows, std::int64_t cap) {
  const std::int64_t want = ceil_div(rows, kRowsPerBlock);
  return want < cap ? want : cap;
}
QMV_HD std::int64_t first_row(int block, int warp) { return std::int64_t(block) * kRowsPerBlock + warp; }
QMV_HD std::int64_t row_stride(int grid_blocks) { return std::int64_t(grid_blocks) * kRowsPerBlock; }
}  // namespace halfwarp_dp4a

// quarterwarp_dp4a: as halfwarp_dp4a with a quarter-warp per super-block: the four groups of
// eight lanes take four neighbouring super-blocks, lane t of a group reads qs words
// 4t..4t + 3 as one 16-byte load, so its two sub-blocks' scales, mins and activation
// scales are handled once per 16 weights each (8 in halfwarp_dp4a); kUnroll super-blocks
// per group in flight. Launched as halfwarp_dp4a is (run_grouped_dp4a).
// halfwarp_batch_dp4a: halfwarp_dp4a's layout and launch for 1..kMaxN activation
// vectors per call, each super-block's weights read once for all of them; two
// super-blocks in flight per half-warp, not four, to leave registers for the vectors'
// accumulators.
namespace halfwarp_batch_dp4a {
inline constexpr int kGroups = 2;
inline constexpr int kUnroll = 2;
inline constexpr int kWordsPerLane = 2;
inline constexpr int kMaxN = 8;
}  // namespace halfwarp_batch_dp4a

namespace quarterwarp_dp4a {
inline constexpr int kGroups = 4;
inline constexpr int kUnroll = 3;
inline constexpr int kWordsPerLane = 4;
}  // namespace quarterwarp_dp4a

// quarterwarp_batch_dp4a: quarterwarp_dp4a's layout for 1..kMaxN vectors. A lane reads
// each vector's block scales once per 16 weights, and decodes the weights' scales once
// per 32, where the half-warp batch kernel does both per 8 and 16: with several vectors
// the half-warp one is bound by its loads through L1
// (results/nvidia-h200/batch/profile.log).
// Up to kFewVectors vectors, one super-block in flight per quarter-warp at 64 registers
// (8 blocks an SM); with more, latency bounds that, and two in flight at up to 128
// registers (4 blocks an SM) are quicker (results/nvidia-h200/batch/unroll/).
namespace quarterwarp_batch_dp4a {
inline constexpr int kGroups = 4;
inline constexpr int kWordsPerLane = 4;
inline constexpr int kMaxN = 8;
inline constexpr int kFewVectors = 4;
inline constexpr int kUnrollFew = 1, kMinBlocksFew = 8;
inline constexpr int kUnrollMany = 2, kMinBlocksMany = 4;
}  // namespace quarterwarp_batch_dp4a

// tma_dp4a: each warp's rows streamed chunk by chunk into a ring of kStages
// shared-memory stages of its own by TMA copies (tma_schedule.h, tma_kernels.cuh);
// the warp computes each chunk from its stage with quarterwarp_dp4a's lane layout, whose
// 16-byte reads of a super-block's qs and header fall on 16-byte boundaries of the
// stage. The activations come from global memory.
namespace tma_dp4a {
inline constexpr int kStages = 4;
inline constexpr int kChunkBlocks = 16;
inline constexpr int kStageBytes = tma::stage_bytes<kBlockBytes>(kChunkBlocks);
inline constexpr int kGroups = 4;
inline constexpr int kUnroll = 2;
inline constexpr int kWordsPerLane = 4;
}  // namespace tma_dp4a

// warpxN_dp4a: the warpxN layout (N warps per row, header by shuffle from lanes 0..3,
// kUnroll super-blocks in flight per lane) with the DP4A word-per-lane product.
namespace warpxN_dp4a {
inline constexpr int kUnroll = 4;
QMV_HD std::int64_t grid(std::int64_t rows) { return rows; }
template <int kWarps, class Loads>
QMV_HD float lane_row(const Loads& ld, const std::uint32_t* row_words, const std::uint32_t* x_words, int nb, int warp,
                      int lane) {
  const Q8Lane q8 = q8_lane(lane, 1);
  Q8Cursor c = q8_cursor(row_words, x_words, warp, lane);
  float acc = 0.0f;
  int b = warp;
  for (; b + kWarps * (kUnroll - 1) < nb; b += kWarps * kUnroll, c = advance(c, kWarps * kUnroll)) {
    Q8Slot<1> s[kUnroll];
    QMV_UNROLL
    for (int u = 0; u < kUnroll; ++u) {
      ld.header_from_lanes_0_to_3(c.hdr + kBlockWords * kWarps * u, lane, s[u].hdr);
      load_q8_1_words<1>(ld, c, kWarps * u, s[u]);
    }
    QMV_UNROLL
    for (int u = 0; u < kUnroll; ++u) acc += q8_1_words_partial<1>(s[u], q8);
  }
  for (; b < nb; b += kWarps, c = advance(c, kWarps)) {
    Q8Slot<1> s;
    ld.header_from_lanes_0_to_3(c.hdr, lane, s.hdr);
    load_q8_1_words<1>(ld, c, 0, s);
    acc += q8_1_words_partial<1>(s, q8);
  }
  return acc;
}
}  // namespace warpxN_dp4a

}  // namespace qmv::cuda::q4k
