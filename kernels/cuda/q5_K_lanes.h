// Per-lane arithmetic of the Q5_K CUDA variants: which bytes of a block each lane
// loads, what it receives from other lanes, and the partial sum it contributes. The
// kernels (q5_K_*.cu) call exactly these functions; the CPU replay test calls them
// with recording memory and shuffle policies, lane by lane.
//
// Q5_K block (176 bytes): d, dmin fp16 (bytes 0..3), 12 bytes of packed 6-bit scales
// and mins (4..15), qh[32] (16..47), qs[128] (48..175). Weight i = 32j + l (sub-block
// j 0..7, l 0..31) has its low 4 bits in nibble j%2 of qs[32(j/2) + l] and its fifth
// bit at bit j of qh[l]: w = d * scale_j * q - dmin * min_j.
//
// Alignment: 176 = 16 * 11, so with the weights 4-aligned in memory (cudaMalloc gives
// 256, GGUF tensor data 32) every block, and every 4-byte group of it, is 4-aligned:
// all weight loads here are 32-bit (or bytes, in the warp variant).
#pragma once

#include "kernels/cuda/q5_K_q6_K_lanes.h"

namespace qmv::cuda::q5q6 {

inline constexpr int kQ5KScales = 4;
inline constexpr int kQ5KQh = 16;
inline constexpr int kQ5KQs = 48;

// The 6-bit scales and mins of sub-blocks 2g and 2g + 1, two per 16 bits (low byte:
// sub-block 2g), from the packed bytes as words s0 = bytes 0..3, s1 = 4..7, s2 = 8..11.
// Sub-blocks 0..3 keep their scale and min in the low 6 bits of bytes j and j + 4;
// sub-blocks 4..7 take 4 bits from byte j + 4 (low nibble: scale, high: min) and their
// top 2 bits from the top of bytes j - 4 (scale) and j (min).
QMV_HD void q5k_pair_scale_min(int g, std::uint32_t s0, std::uint32_t s1, std::uint32_t s2, std::uint32_t& scales,
                               std::uint32_t& mins) {
  const int shift = 16 * (g & 1);
  const std::uint32_t a = (s0 >> shift) & 0xFFFFu, b = (s1 >> shift) & 0xFFFFu, c = (s2 >> shift) & 0xFFFFu;
  if (g < 2) {
    scales = a & 0x3F3Fu;
    mins = b & 0x3F3Fu;
  } else {
    scales = (c & 0x0F0Fu) | ((a >> 2) & 0x3030u);
    mins = ((c >> 4) & 0x0F0Fu) | ((b >> 2) & 0x3030u);
  }
}

// ---------------------------------------------------------------------------------
// warp: one warp per row, a super-block at a time; lane t takes the weights with
// l = t, byte loads of qs and qh. The 16 header bytes are four 32-bit loads at the same
// address for every lane (one fetch each).

template <class Mem>
QMV_HD float q5k_legacy_row_partial(Mem& mem, const std::uint8_t* row, const float* x, std::int64_t nb,
                                    int lane) {
  float partial = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::uint8_t* blk = row + b * kQ5KBlockBytes;
    const float* xb = x + b * kSuperBlock;
    const std::uint32_t dm = mem.weight_u32(blk);
    const std::uint32_t s0 = mem.weight_u32(blk + kQ5KScales);
    const std::uint32_t s1 = mem.weight_u32(blk + kQ5KScales + 4);
    const std::uint32_t s2 = mem.weight_u32(blk + kQ5KScales + 8);
    const int qh = mem.weight_u8(blk + kQ5KQh + lane);
    const float d = half_bits_to_float(static_cast<std::uint16_t>(dm));
    const float dmin = half_bits_to_float(static_cast<std::uint16_t>(dm >> 16));
    float block_sum = 0.0f;
    for (int g = 0; g < 4; ++g) {
      const int qs = mem.weight_u8(blk + kQ5KQs + 32 * g + lane);
      std::uint32_t scales, mins;
      q5k_pair_scale_min(g, s0, s1, s2, scales, mins);
      for (int e = 0; e < 2; ++e) {
        const int j = 2 * g + e;
        const int q = ((qs >> (4 * e)) & 0xF) | (((qh >> j) & 1) << 4);
        const float xv = mem.act_f32(xb + 32 * j + lane);
        const float scale = d * static_cast<float>((scales >> (8 * e)) & 0xFFu);
        const float min = dmin * static_cast<float>((mins >> (8 * e)) & 0xFFu);
        block_sum += scale * (static_cast<float>(q) * xv) - min * xv;
      }
    }
    partial += block_sum;
  }
  return partial;
}

struct Q5KLegacyRow {
  using Act = float;
  static constexpr int kBlockBytes = kQ5KBlockBytes;
  template <class Mem, class Shfl>
  QMV_HD static float partial(Mem& mem, Shfl&, const std::uint8_t* row, const float* x, std::int64_t nb,
                              int lane) {
    return q5k_legacy_row_partial(mem, row, x, nb, lane);
  }
};

// ---------------------------------------------------------------------------------
// Full-warp layout (warpxN): 32 lanes per super-block, 8 weights per lane. Lane t = 8g + c
// takes l = 4c..4c+3 of sub-blocks 2g and 2g + 1: its qs word is bytes 4t..4t+3 (low
// nibbles: 2g, high: 2g + 1). The 48 bytes before qs are twelve words, one for each of
// lanes 0..11: lanes 0..7 load qh words (lane c's is the one every lane 8g + c needs),
// lanes 8..11 the header (d and dmin, then the three packed scale words).

struct Q5KFullWarpLoads {
  std::uint32_t qs;
  std::uint32_t side;  // lanes 0..7: qh bytes 4t..4t+3; lanes 8..11: header word t - 8
};

template <class Mem>
QMV_HD Q5KFullWarpLoads q5k_full_warp_load(Mem& mem, const std::uint8_t* blk, int lane, bool valid) {
  Q5KFullWarpLoads r;
  r.qs = mem.weight_u32_if(valid, blk + kQ5KQs + 4 * lane);
  const int side = lane < 8 ? kQ5KQh + 4 * lane : 4 * ((lane - 8) & 3);  // lanes >= 12 load nothing
  r.side = mem.weight_u32_if(valid && lane < 12, blk + side);
  return r;
}

// Offset (in values) of the lane's first activation of sub-block 2g; 2g + 1 is 32 further.
QMV_HD int q5k_full_warp_x_offset(int lane) { return 64 * (lane >> 3) + 4 * (lane & 7); }

// xa, xb: the lane's four activations of sub-blocks 2g and 2g + 1.
template <class Shfl>
QMV_HD float q5k_full_warp_dot_f32(Shfl& shfl, const Q5KFullWarpLoads& in, const F32x4& xa, const F32x4& xb,
                                   int lane) {
  const int g = lane >> 3;
  const std::uint32_t qh = shfl(in.side, lane & 7);
  const std::uint32_t dm = shfl(in.side, 8);
  const std::uint32_t s0 = shfl(in.side, 9);
  const std::uint32_t s1 = shfl(in.side, 10);
  const std::uint32_t s2 = shfl(in.side, 11);
  std::uint32_t scales, mins;
  q5k_pair_scale_min(g, s0, s1, s2, scales, mins);
  const float d = half_bits_to_float(static_cast<std::uint16_t>(dm));
  const float dmin = half_bits_to_float(static_cast<std::uint16_t>(dm >> 16));
  float sum = 0.0f;
  QMV_UNROLL
  for (int e = 0; e < 2; ++e) {
    const int j = 2 * g + e;
    const std::uint32_t quad = ((in.qs >> (4 * e)) & 0x0F0F0F0Fu) | (((qh >> j) & 0x01010101u) << 4);
    const F32x4& xv = e == 0 ? xa : xb;
    float dot = 0.0f, xsum = 0.0f;
    QMV_UNROLL
    for (int i = 0; i < 4; ++i) {
      dot += byte_to_float(quad, i) * xv[i];
      xsum += xv[i];
    }
    sum += d * byte_to_float(scales, e) * dot - dmin * byte_to_float(mins, e) * xsum;
  }
  return sum;
}

// warpxN: kWarps warps per row; warp w takes super-blocks w, w + kWarps, ..., kUnroll of
// them per step, their weight loads all issued before any arithmetic.
template <int kWarps>
struct Q5KWarpxNRow {
  using Act = float;
  static constexpr int kBlockBytes = kQ5KBlockBytes;
  static constexpr int kWarpsPerRow = kWarps;
  static constexpr int kUnroll = 4;

  template <class Mem, class Shfl>
  QMV_HD static float partial(Mem& mem, Shfl& shfl, const std::uint8_t* row, const float* x, std::int64_t nb,
                              int warp, int lane) {
    const int blocks = static_cast<int>(nb);  // a row's super-blocks fit an int
    float partial = 0.0f;
    for (int b0 = warp; b0 < blocks; b0 += kWarps * kUnroll) {
      // The weights of kUnroll super-blocks in flight together; the activations, which
      // L1 and L2 serve, are read just before they are needed, which keeps the
      // registers for more weight bytes in flight.
      Q5KFullWarpLoads w[kUnroll];
      bool valid[kUnroll];
      int at[kUnroll];
      QMV_UNROLL
      for (int u = 0; u < kUnroll; ++u) {
        const int b = b0 + kWarps * u;
        valid[u] = b < blocks;
        at[u] = valid[u] ? b : b0;  // keeps the addresses inside the row
        w[u] = q5k_full_warp_load(mem, row + at[u] * kQ5KBlockBytes, lane, valid[u]);
      }
      QMV_UNROLL
      for (int u = 0; u < kUnroll; ++u) {
        const float* xl = x + at[u] * kSuperBlock + q5k_full_warp_x_offset(lane);
        const F32x4 xa = mem.act_f32x4_if(valid[u], xl);
        const F32x4 xb = mem.act_f32x4_if(valid[u], xl + 32);
        const float s = q5k_full_warp_dot_f32(shfl, w[u], xa, xb, lane);  // every lane shuffles
        partial += valid[u] ? s : 0.0f;
      }
    }
    return partial;
  }
};

}  // namespace qmv::cuda::q5q6
