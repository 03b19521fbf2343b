// Per-lane arithmetic of the Q6_K CUDA variants: which bytes of a block each lane
// loads, what it receives from other lanes, and the partial sum it contributes. The
// kernels (q6_K_*.cu) call exactly these functions; the CPU replay test calls them
// with recording memory and shuffle policies, lane by lane.
//
// Q6_K block (210 bytes): ql[128] low nibbles, qh[64] high bit pairs, scales[16] int8,
// d fp16. Weight i = 128h + 32k + l (h 0..1, k 0..3, l 0..31) has its low 4 bits in
// nibble k/2 of ql[64h + 32(k%2) + l], its high 2 bits at bit 2k of qh[32h + l], its
// scale in scales[i/16]: w = d * scale * (q - 32).
//
// Alignment: 210 = 2 * 105, so a block starts 4-aligned only when its index in the
// buffer is even. Every weight load here is therefore 8 or 16 bits wide; a 32-bit word
// of quants is joined from two 16-bit loads. Scales and d are contiguous (bytes
// 192..209): nine 16-bit words, loaded by nine lanes and handed round by shuffles.
#pragma once

#include <cstddef>

#include "kernels/cuda/q5_K_q6_K_lanes.h"
#include "kernels/kernel.h"

namespace qmv::cuda::q5q6 {

inline constexpr int kQ6KQh = 128;
inline constexpr int kQ6KScales = 192;
inline constexpr int kQ6KD = 208;

// The four 6-bit quants (0..63) of four consecutive weights, one per byte: low nibbles
// from `ql` shifted by `nibble_shift` (0 or 4), high pairs from `qh` shifted by
// `qh_shift` (2k).
QMV_HD std::uint32_t q6k_quad(std::uint32_t ql, int nibble_shift, std::uint32_t qh, int qh_shift) {
  return ((ql >> nibble_shift) & 0x0F0F0F0Fu) | (((qh >> qh_shift) & 0x03030303u) << 4);
}

// q - 32 in each byte, as int8 for dp4a: q + 0x60 <= 0x9F never carries into the next
// byte, and flipping bit 7 then subtracts 128 (mod 256).
//
// With Q8_1 activations the -32 offset is folded into the integer dot this way (two
// logic ops per four weights, exact), not taken as -32 * sum(activation quants): Q8_1
// carries that sum only per 32 values and only as s = d * sum rounded to fp16, while a
// Q6_K scale covers 16 values, so the sums would cost another dp4a per four weights and
// the fp16 s would add a rounding error 32 times the scale.
QMV_HD std::uint32_t q6k_quad_signed(std::uint32_t q) { return (q + 0x60606060u) ^ 0x80808080u; }

// Lane s (0..8) of a group that loads a block's scales and d: bytes 192 + 2s, +1 (lane 8:
// d). The scale of sub-block j then sits in byte j % 2 of lane j / 2's word.
template <class Mem>
QMV_HD std::uint16_t q6k_load_header_word(Mem& mem, const std::uint8_t* blk, int s, bool valid) {
  return mem.weight_u16_if(valid && s <= 8, blk + kQ6KScales + 2 * (s <= 8 ? s : 0));
}

// ---------------------------------------------------------------------------------
// warp: one warp per row, a super-block at a time; lane t takes the weights with
// l = t, byte loads. The scale loads of a (h, k) pair fetch two neighbouring bytes
// (lanes 0-15: sub-block 8h+2k, lanes 16-31: the next), d is one load for all lanes.

template <class Mem>
QMV_HD float q6k_legacy_row_partial(Mem& mem, const std::uint8_t* row, const float* x, std::int64_t nb,
                                    int lane) {
  float partial = 0.0f;
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::uint8_t* blk = row + b * kQ6KBlockBytes;
    const float* xb = x + b * kSuperBlock;
    float block_sum = 0.0f;
    for (int h = 0; h < 2; ++h) {
      const int ql_even = mem.weight_u8(blk + 64 * h + lane);       // k = 0 low nibble, k = 2 high
      const int ql_odd = mem.weight_u8(blk + 64 * h + 32 + lane);   // k = 1, k = 3
      const int qh = mem.weight_u8(blk + kQ6KQh + 32 * h + lane);
      for (int k = 0; k < 4; ++k) {
        const int ql = (k & 1) ? ql_odd : ql_even;
        const int q = ((ql >> (4 * (k >> 1))) & 0xF) | (((qh >> (2 * k)) & 3) << 4);
        const int j = 8 * h + 2 * k + (lane >= 16 ? 1 : 0);
        const int scale = static_cast<std::int8_t>(mem.weight_u8(blk + kQ6KScales + j));
        const float xv = mem.act_f32(xb + 128 * h + 32 * k + lane);
        block_sum += static_cast<float>(scale) * (static_cast<float>(q - 32) * xv);
      }
    }
    partial += half_bits_to_float(mem.weight_u16(blk + kQ6KD)) * block_sum;
  }
  return partial;
}

struct Q6KLegacyRow {
  using Act = float;
  static constexpr int kBlockBytes = kQ6KBlockBytes;
  template <class Mem, class Shfl>
  QMV_HD static float partial(Mem& mem, Shfl&, const std::uint8_t* row, const float* x, std::int64_t nb,
                              int lane) {
    return q6k_legacy_row_partial(mem, row, x, nb, lane);
  }
};

// ---------------------------------------------------------------------------------
// Full-warp layout (warpxN, dp4a): 32 lanes per super-block, 8 weights per lane. Lane
// t = 16h + 8p + c takes l = 4c..4c+3 of sub-groups k = p and k = p + 2 of half h: its
// ql word is bytes 4t..4t+3 (low nibbles for k = p, high for k = p + 2); the matching
// qh word (bytes 32h + 4c..) is shared with lane t ^ 8, so each of the two loads half
// of it and they swap.

struct Q6KFullWarpLoads {
  std::uint16_t ql_lo, ql_hi;  // ql bytes 4t, 4t+1 and 4t+2, 4t+3
  std::uint16_t qh;            // qh bytes 32h + 4c + 2p, +1
  std::uint16_t header;        // lanes 0..8: scales / d word
};

struct Q6KFullWarpLane {
  int h, p, c;
  QMV_HD explicit Q6KFullWarpLane(int lane) : h(lane >> 4), p((lane >> 3) & 1), c(lane & 7) {}
  QMV_HD int upper_scale() const { return c >= 4 ? 1 : 0; }  // l >= 16: odd sub-block
};

template <class Mem>
QMV_HD Q6KFullWarpLoads q6k_full_warp_load(Mem& mem, const std::uint8_t* blk, int lane, bool valid) {
  const Q6KFullWarpLane at(lane);
  Q6KFullWarpLoads r;
  r.ql_lo = mem.weight_u16_if(valid, blk + 4 * lane);
  r.ql_hi = mem.weight_u16_if(valid, blk + 4 * lane + 2);
  r.qh = mem.weight_u16_if(valid, blk + kQ6KQh + 32 * at.h + 4 * at.c + 2 * at.p);
  r.header = q6k_load_header_word(mem, blk, lane, valid);
  return r;
}

// What a lane needs from the others for one block, and its two quads of quants.
struct Q6KFullWarpBlock {
  std::uint32_t quad_a, quad_b;    // quants of k = p and k = p + 2 (0..63 per byte)
  std::uint32_t scale_a, scale_b;  // bytes 0, 1: the int8 scales of the sub-block pair;
                                   // bits 16..31 (Q8_1 kernels): the activation block's d
  std::uint16_t d;
};

// `header`: the lane's header word, with (Q8_1 kernels) the activation scale it
// carries in the upper 16 bits; the scale words come back with theirs.
template <class Shfl>
QMV_HD Q6KFullWarpBlock q6k_full_warp_exchange(Shfl& shfl, const Q6KFullWarpLoads& in, std::uint32_t header,
                                               int lane) {
  const Q6KFullWarpLane at(lane);
  const std::uint32_t partner_qh = shfl(in.qh, lane ^ 8);
  Q6KFullWarpBlock r;
  r.scale_a = shfl(header, 4 * at.h + at.p);  // sub-block 8h + 2p (+1): word 4h + p
  r.scale_b = shfl(header, 4 * at.h + at.p + 2);
  r.d = static_cast<std::uint16_t>(shfl(header, 8));
  const std::uint32_t qh = at.p == 0 ? join_u16(in.qh, static_cast<std::uint16_t>(partner_qh))
                                     : join_u16(static_cast<std::uint16_t>(partner_qh), in.qh);
  const std::uint32_t ql = join_u16(in.ql_lo, in.ql_hi);
  r.quad_a = q6k_quad(ql, 0, qh, 2 * at.p);
  r.quad_b = q6k_quad(ql, 4, qh, 2 * at.p + 4);
  return r;
}

// Offset (in values) of the lane's first activation of sub-group k = p within the block,
// 128h + 32p + 4c; k = p + 2 is 64 further.
QMV_HD int q6k_full_warp_x_offset(int lane) {
  const Q6KFullWarpLane at(lane);
  return 128 * at.h + 32 * at.p + 4 * at.c;
}

// f32 activations: xa, xb the lane's four activations of k = p and of k = p + 2.
QMV_HD float q6k_full_warp_dot_f32(const Q6KFullWarpBlock& blk, const F32x4& xa, const F32x4& xb,
                                   int lane) {
  const Q6KFullWarpLane at(lane);
  float dot_a = 0.0f, dot_b = 0.0f;
  QMV_UNROLL
  for (int i = 0; i < 4; ++i) {
    dot_a += byte_to_float(blk.quad_a, i, 32.0f) * xa[i];
    dot_b += byte_to_float(blk.quad_b, i, 32.0f) * xb[i];
  }
  const float sum = int8_byte_to_float(blk.scale_a, at.upper_scale()) * dot_a +
                    int8_byte_to_float(blk.scale_b, at.upper_scale()) * dot_b;
  return half_bits_to_float(blk.d) * sum;
}

// Q8_1 activations of the lane: the quant words of its two activation blocks (block
// 4h + k of the super-block's eight, k = p and p + 2). The blocks' fp16 scales travel
// with the weight scales: lane s < 8 loads the scale of activation block s, which is
// wanted exactly by the lanes that want its weight-scale word s, so one shuffle brings
// both (see q6k_full_warp_exchange).
struct Q6KFullWarpAct {
  std::uint32_t qa, qb;
  std::uint16_t d_own;  // lanes 0..7: fp16 scale of activation block `lane`
};

template <class Mem>
QMV_HD Q6KFullWarpAct q6k_full_warp_load_q8_1(Mem& mem, const BlockQ8_1* xq, int lane, bool valid) {
  const Q6KFullWarpLane at(lane);
  const auto* a = reinterpret_cast<const std::uint8_t*>(xq + 4 * at.h + at.p);
  const auto* b = reinterpret_cast<const std::uint8_t*>(xq + 4 * at.h + at.p + 2);
  const int quants = static_cast<int>(offsetof(BlockQ8_1, qs)) + 4 * at.c;
  Q6KFullWarpAct r;
  r.qa = mem.act_u32_if(valid, a + quants);
  r.qb = mem.act_u32_if(valid, b + quants);
  r.d_own = mem.act_u16_if(valid && lane < 8, reinterpret_cast<const std::uint8_t*>(xq + (lane & 7)));
  return r;
}

// The integer dot of four quants (q - 32) with four int8 activations, scaled by the
// sub-block scale (|scale * dot| <= 128 * 4 * 32 * 128 = 2^21, exact as float).
QMV_HD float q6k_scaled_quad_dot(std::uint32_t quad, std::uint32_t act, std::uint32_t scale_word, int byte) {
  const int dot = dp4a(static_cast<int>(q6k_quad_signed(quad)), static_cast<int>(act), 0);
  return small_int_to_float(int8_byte(scale_word, byte) * dot);
}

QMV_HD float q6k_full_warp_dot_q8_1(const Q6KFullWarpBlock& blk, const Q6KFullWarpAct& x, int lane) {
  const Q6KFullWarpLane at(lane);
  const float da = half_bits_to_float(static_cast<std::uint16_t>(blk.scale_a >> 16));
  const float db = half_bits_to_float(static_cast<std::uint16_t>(blk.scale_b >> 16));
  const float sum = da * q6k_scaled_quad_dot(blk.quad_a, x.qa, blk.scale_a, at.upper_scale()) +
                    db * q6k_scaled_quad_dot(blk.quad_b, x.qb, blk.scale_b, at.upper_scale());
  return half_bits_to_float(blk.d) * sum;
}

// warpxN: kWarps warps per row; warp w takes super-blocks w, w + kWarps, ..., kUnroll of
// them per step, their weight loads all issued before any arithmetic.
template <int kWarps>
struct Q6KWarpxNRow {
  using Act = float;
  static constexpr int kBlockBytes = kQ6KBlockBytes;
  static constexpr int kWarpsPerRow = kWarps;
  static constexpr int kUnroll = 3;

  template <class Mem, class Shfl>
  QMV_HD static float partial(Mem& mem, Shfl& shfl, const std::uint8_t* row, const float* x, std::int64_t nb,
                              int warp, int lane) {
    const int blocks = static_cast<int>(nb);  // a row's super-blocks fit an int
    float partial = 0.0f;
    for (int b0 = warp; b0 < blocks; b0 += kWarps * kUnroll) {
      // The weights of kUnroll super-blocks in flight together; the activations, which
      // L1 and L2 serve, are read just before they are needed, which keeps the
      // registers for more weight bytes in flight.
      Q6KFullWarpLoads w[kUnroll];
      QMV_UNROLL
      for (int u = 0; u < kUnroll; ++u) {
        const int b = b0 + kWarps * u;
        w[u] = q6k_full_warp_load(mem, row + (b < blocks ? b : b0) * kQ6KBlockBytes, lane, b < blocks);
      }
      QMV_UNROLL
      for (int u = 0; u < kUnroll; ++u) {
        const int b = b0 + kWarps * u;
        const bool valid = b < blocks;
        const float* xl = x + (valid ? b : b0) * kSuperBlock + q6k_full_warp_x_offset(lane);
        const F32x4 xa = mem.act_f32x4_if(valid, xl);
        const F32x4 xb = mem.act_f32x4_if(valid, xl + 64);
        const Q6KFullWarpBlock blk = q6k_full_warp_exchange(shfl, w[u], w[u].header, lane);
        const float s = q6k_full_warp_dot_f32(blk, xa, xb, lane);
        partial += valid ? s : 0.0f;
      }
    }
    return partial;
  }
};

// dp4a: one warp per row, full-warp layout, Q8_1 activations, kUnroll super-blocks per
// step.
struct Q6KDp4aRow {
  using Act = BlockQ8_1;
  static constexpr int kBlockBytes = kQ6KBlockBytes;
  static constexpr int kUnroll = 3;

  template <class Mem, class Shfl>
  QMV_HD static float partial(Mem& mem, Shfl& shfl, const std::uint8_t* row, const BlockQ8_1* xq,
                              std::int64_t nb, int lane) {
    constexpr int kQ8PerSuper = kSuperBlock / kQ8_1Block;
    const int blocks = static_cast<int>(nb);  // a row's super-blocks fit an int
    float partial = 0.0f;
    for (int b0 = 0; b0 < blocks; b0 += kUnroll) {
      Q6KFullWarpLoads w[kUnroll];
      Q6KFullWarpAct a[kUnroll];
      bool valid[kUnroll];
      QMV_UNROLL
      for (int u = 0; u < kUnroll; ++u) {
        const int b = b0 + u;
        valid[u] = b < blocks;
        const int bb = valid[u] ? b : b0;  // keeps the addresses inside the row
        w[u] = q6k_full_warp_load(mem, row + bb * kQ6KBlockBytes, lane, valid[u]);
        a[u] = q6k_full_warp_load_q8_1(mem, xq + bb * kQ8PerSuper, lane, valid[u]);
      }
      QMV_UNROLL
      for (int u = 0; u < kUnroll; ++u) {
        const Q6KFullWarpBlock blk = q6k_full_warp_exchange(shfl, w[u], join_u16(w[u].header, a[u].d_own), lane);
        const float s = q6k_full_warp_dot_q8_1(blk, a[u], lane);
        partial += valid[u] ? s : 0.0f;
      }
    }
    return partial;
  }
};

// ---------------------------------------------------------------------------------
// Half-warp layout (halfwarp_dp4a): 16 threads per super-block, 16 weights per thread, the
// two half-warps on neighbouring super-blocks. Thread u = 8h + c of a half-warp takes
// l = 4c..4c+3 of all four sub-groups k of half h: ql words at 64h + 4c (k = 0, 2) and
// 64h + 32 + 4c (k = 1, 3), qh word at 32h + 4c (all k), four Q8_1 words.

struct Q6KHalfWarpLoads {
  std::uint16_t ql[4];   // ql bytes 64h+4c, +2, then 64h+32+4c, +2
  std::uint16_t qh[2];   // qh bytes 32h+4c, +2
  std::uint16_t header;  // threads 0..8: scales / d word
};

// As in the full-warp layout, thread s < 8 of a half-warp loads the fp16 scale of
// activation block s, and it travels with weight-scale word s.
struct Q6KHalfWarpAct {
  std::uint32_t q[4];    // quant word of activation block 4h + k
  std::uint16_t d_own;   // threads 0..7: fp16 scale of activation block u
};

struct Q6KHalfWarpLane {
  int group, u, h, c;  // group: first lane of the half-warp
  QMV_HD explicit Q6KHalfWarpLane(int lane) : group(lane & 16), u(lane & 15), h((lane & 15) >> 3), c(lane & 7) {}
  QMV_HD int upper_scale() const { return c >= 4 ? 1 : 0; }
};

template <class Mem>
QMV_HD Q6KHalfWarpLoads q6k_half_warp_load(Mem& mem, const std::uint8_t* blk, int lane, bool valid) {
  const Q6KHalfWarpLane at(lane);
  const std::uint8_t* ql = blk + 64 * at.h + 4 * at.c;
  const std::uint8_t* qh = blk + kQ6KQh + 32 * at.h + 4 * at.c;
  Q6KHalfWarpLoads r;
  r.ql[0] = mem.weight_u16_if(valid, ql);
  r.ql[1] = mem.weight_u16_if(valid, ql + 2);
  r.ql[2] = mem.weight_u16_if(valid, ql + 32);
  r.ql[3] = mem.weight_u16_if(valid, ql + 34);
  r.qh[0] = mem.weight_u16_if(valid, qh);
  r.qh[1] = mem.weight_u16_if(valid, qh + 2);
  r.header = q6k_load_header_word(mem, blk, at.u, valid);
  return r;
}

template <class Mem>
QMV_HD Q6KHalfWarpAct q6k_half_warp_load_q8_1(Mem& mem, const BlockQ8_1* xq, int lane, bool valid) {
  const Q6KHalfWarpLane at(lane);
  Q6KHalfWarpAct r;
  QMV_UNROLL
  for (int k = 0; k < 4; ++k) {
    const auto* a = reinterpret_cast<const std::uint8_t*>(xq + 4 * at.h + k);
    r.q[k] = mem.act_u32_if(valid, a + offsetof(BlockQ8_1, qs) + 4 * at.c);
  }
  r.d_own = mem.act_u16_if(valid && at.u < 8, reinterpret_cast<const std::uint8_t*>(xq + (at.u & 7)));
  return r;
}

template <class Shfl>
QMV_HD float q6k_half_warp_dot(Shfl& shfl, const Q6KHalfWarpLoads& in, const Q6KHalfWarpAct& x, int lane) {
  const Q6KHalfWarpLane at(lane);
  const std::uint32_t header = join_u16(in.header, x.d_own);
  std::uint32_t scale[4];  // bytes 0, 1: scales of sub-blocks 8h + 2k, +1; bits 16..31: d of activation block 4h + k
  QMV_UNROLL
  for (int k = 0; k < 4; ++k) scale[k] = shfl(header, at.group + 4 * at.h + k);
  const std::uint16_t d = static_cast<std::uint16_t>(shfl(header, at.group + 8));
  const std::uint32_t ql_even = join_u16(in.ql[0], in.ql[1]);  // k = 0 (low), 2 (high)
  const std::uint32_t ql_odd = join_u16(in.ql[2], in.ql[3]);   // k = 1, 3
  const std::uint32_t qh = join_u16(in.qh[0], in.qh[1]);
  float sum = 0.0f;
  QMV_UNROLL
  for (int k = 0; k < 4; ++k) {
    const std::uint32_t quad = q6k_quad((k & 1) ? ql_odd : ql_even, 4 * (k >> 1), qh, 2 * k);
    const float dk = half_bits_to_float(static_cast<std::uint16_t>(scale[k] >> 16));
    sum += dk * q6k_scaled_quad_dot(quad, x.q[k], scale[k], at.upper_scale());
  }
  return half_bits_to_float(d) * sum;
}

// halfwarp_dp4a: one warp per row; each step the half-warps take super-blocks b0 + 2s and
// b0 + 2s + 1 for s < kPairs, so 2 * kPairs super-blocks per warp are in flight.
template <int kPairs>
struct Q6KHalfWarpRowOf {
  using Act = BlockQ8_1;
  static constexpr int kBlockBytes = kQ6KBlockBytes;

  template <class Mem, class Shfl>
  QMV_HD static float partial(Mem& mem, Shfl& shfl, const std::uint8_t* row, const BlockQ8_1* xq,
                              std::int64_t nb, int lane) {
    constexpr int kQ8PerSuper = kSuperBlock / kQ8_1Block;
    const int half = lane >> 4, blocks = static_cast<int>(nb);  // a row's super-blocks fit an int
    float partial = 0.0f;
    for (int b0 = 0; b0 < blocks; b0 += 2 * kPairs) {
      Q6KHalfWarpLoads w[kPairs];
      Q6KHalfWarpAct a[kPairs];
      bool valid[kPairs];
      QMV_UNROLL
      for (int s = 0; s < kPairs; ++s) {
        const int b = b0 + 2 * s + half;
        valid[s] = b < blocks;
        const int bb = valid[s] ? b : b0;  // keeps the addresses inside the row
        w[s] = q6k_half_warp_load(mem, row + bb * kQ6KBlockBytes, lane, valid[s]);
        a[s] = q6k_half_warp_load_q8_1(mem, xq + bb * kQ8PerSuper, lane, valid[s]);
      }
      QMV_UNROLL
      for (int s = 0; s < kPairs; ++s) {
        const float v = q6k_half_warp_dot(shfl, w[s], a[s], lane);  // every lane shuffles
        partial += valid[s] ? v : 0.0f;
      }
    }
    return partial;
  }
};

// halfwarp_batch_dp4a: halfwarp_dp4a's layout for kN activation vectors at once, back to
// back in xq (`vec_blocks` Q8_1 blocks apart). Each step's weights are loaded once and
// multiplied with every vector, whose activation words are loaded as it comes; acc[j]
// gets vector j's partial sum.
template <int kPairs>
struct Q6KHalfWarpBatchRowOf {
  using Act = BlockQ8_1;
  static constexpr int kBlockBytes = kQ6KBlockBytes;

  template <int kN, class Mem, class Shfl>
  QMV_HD static void partial(Mem& mem, Shfl& shfl, const std::uint8_t* row, const BlockQ8_1* xq,
                             std::int64_t vec_blocks, std::int64_t nb, int lane, float (&acc)[kN]) {
    constexpr int kQ8PerSuper = kSuperBlock / kQ8_1Block;
    const int half = lane >> 4, blocks = static_cast<int>(nb);  // a row's super-blocks fit an int
    QMV_UNROLL
    for (int j = 0; j < kN; ++j) acc[j] = 0.0f;
    for (int b0 = 0; b0 < blocks; b0 += 2 * kPairs) {
      Q6KHalfWarpLoads w[kPairs];
      bool valid[kPairs];
      int at[kPairs];
      QMV_UNROLL
      for (int s = 0; s < kPairs; ++s) {
        const int b = b0 + 2 * s + half;
        valid[s] = b < blocks;
        at[s] = valid[s] ? b : b0;  // keeps the addresses inside the row
        w[s] = q6k_half_warp_load(mem, row + at[s] * kQ6KBlockBytes, lane, valid[s]);
      }
      QMV_UNROLL
      for (int j = 0; j < kN; ++j) {
        QMV_UNROLL
        for (int s = 0; s < kPairs; ++s) {
          const Q6KHalfWarpAct a = q6k_half_warp_load_q8_1(mem, xq + j * vec_blocks + at[s] * kQ8PerSuper, lane, valid[s]);
          const float v = q6k_half_warp_dot(shfl, w[s], a, lane);  // every lane shuffles
          acc[j] += valid[s] ? v : 0.0f;
        }
      }
    }
  }
};

// The kernel's row: two pairs per step (four super-blocks in flight per warp) for one
// or two vectors, one pair for more, which 64 registers then hold without spilling.
struct Q6KHalfWarpBatchRow {
  using Act = BlockQ8_1;
  static constexpr int kBlockBytes = kQ6KBlockBytes;
  static constexpr int kMaxN = 8;
  template <int kN>
  static constexpr int kPairs = kN <= 2 ? 2 : 1;

  template <int kN, class Mem, class Shfl>
  QMV_HD static void partial(Mem& mem, Shfl& shfl, const std::uint8_t* row, const BlockQ8_1* xq,
                             std::int64_t vec_blocks, std::int64_t nb, int lane, float (&acc)[kN]) {
    Q6KHalfWarpBatchRowOf<kPairs<kN>>::template partial<kN>(mem, shfl, row, xq, vec_blocks, nb, lane, acc);
  }
};

// The kernel's row: three pairs per step (six super-blocks, 1260 bytes of weights per
// warp in flight) on sm_90, where 64 registers hold them without spilling; two on older
// GPUs, whose ptxas spills with three. The choice is inside the function, so the
// kernel is one type (one symbol) in the host pass and every device pass. The CPU test
// replays both.
struct Q6KHalfWarpRow {
  using Act = BlockQ8_1;
  static constexpr int kBlockBytes = kQ6KBlockBytes;

  template <class Mem, class Shfl>
  QMV_HD static float partial(Mem& mem, Shfl& shfl, const std::uint8_t* row, const BlockQ8_1* xq,
                              std::int64_t nb, int lane) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    return Q6KHalfWarpRowOf<2>::partial(mem, shfl, row, xq, nb, lane);
#else
    return Q6KHalfWarpRowOf<3>::partial(mem, shfl, row, xq, nb, lane);
#endif
  }
};

// ---------------------------------------------------------------------------------
// Quarter-warp layout (quarterwarp_dp4a): 8 threads per super-block, 32 weights a
// thread, so every per-sub-block cost (the scale, the activation block's fp16 scale,
// the float conversion and multiply-add) is paid once per 8 weights instead of once
// per 4, and a lane's four scale words come in 4 shuffles per 32 weights. Thread
// u = 4h + c of a group of 8 takes l = 8c..8c+7 of all four sub-groups k of half h:
// 8-byte runs of ql at 64h + 8c (k = 0 low nibbles, k = 2 high) and 64h + 32 + 8c
// (k = 1, 3) and of qh at 128 + 32h + 8c; the eight bytes of sub-group k meet the
// quants at 8c of activation block 4h + k, all inside sub-block 8h + 2k + c / 2.
//
// Alignment: block b of a row starts at row + 210b, which is 4-aligned for every other
// b. The four groups of a warp take the aligned blocks of eight in one pass (two 32-bit
// loads per run) and the others in a second (16, 32, 16 bits, each byte still fetched
// once), so which loads run is the same for the whole warp.
// The -32 offset of the quants is two __dp4a against 0xE0 bytes (-32) per 8 weights.

// A lane's 8-byte runs (ql even, ql odd, qh) as two words each, its scale word and d.
struct Q6KQuarterWarpLoads {
  std::uint32_t run[3][2];
  std::uint16_t header;  // scales of sub-blocks 2u, 2u + 1
  std::uint16_t d;
};

struct Q6KQuarterWarpAct {
  std::uint32_t q[4][2];  // quants 8c..8c+7 of activation block 4h + k
  std::uint16_t d_own;    // fp16 scale of activation block u
};

struct Q6KQuarterWarpLane {
  int group, u, h, c;  // group: first lane of the 8
  QMV_HD explicit Q6KQuarterWarpLane(int lane) : group(lane & 24), u(lane & 7), h((lane & 7) >> 2), c(lane & 3) {}
};

// kAligned: the block starts 4-aligned (else 2 mod 4).
template <bool kAligned, class Mem>
QMV_HD Q6KQuarterWarpLoads q6k_quarter_warp_load(Mem& mem, const std::uint8_t* blk, int lane, bool valid) {
  const Q6KQuarterWarpLane at(lane);
  const std::uint8_t* ql = blk + 64 * at.h + 8 * at.c;
  const std::uint8_t* const runs[3] = {ql, ql + 32, blk + kQ6KQh + 32 * at.h + 8 * at.c};
  Q6KQuarterWarpLoads r;
  QMV_UNROLL
  for (int i = 0; i < 3; ++i) {
    const std::uint8_t* p = runs[i];
    if constexpr (kAligned) {
      r.run[i][0] = mem.weight_u32_if(valid, p);
      r.run[i][1] = mem.weight_u32_if(valid, p + 4);
    } else {
      const std::uint16_t first = mem.weight_u16_if(valid, p);
      const std::uint32_t middle = mem.weight_u32_if(valid, p + 2);
      const std::uint16_t last = mem.weight_u16_if(valid, p + 6);
      r.run[i][0] = join_u16(first, static_cast<std::uint16_t>(middle));
      r.run[i][1] = join_u16(static_cast<std::uint16_t>(middle >> 16), last);
    }
  }
  r.header = mem.weight_u16_if(valid, blk + kQ6KScales + 2 * at.u);
  r.d = mem.weight_u16_if(valid, blk + kQ6KD);
  return r;
}

template <class Mem>
QMV_HD Q6KQuarterWarpAct q6k_quarter_warp_load_q8_1(Mem& mem, const BlockQ8_1* xq, int lane, bool valid) {
  const Q6KQuarterWarpLane at(lane);
  Q6KQuarterWarpAct r;
  QMV_UNROLL
  for (int k = 0; k < 4; ++k) {
    const auto* quants = reinterpret_cast<const std::uint8_t*>(xq + 4 * at.h + k) + offsetof(BlockQ8_1, qs) + 8 * at.c;
    r.q[k][0] = mem.act_u32_if(valid, quants);
    r.q[k][1] = mem.act_u32_if(valid, quants + 4);
  }
  r.d_own = mem.act_u16_if(valid, reinterpret_cast<const std::uint8_t*>(xq + at.u));
  return r;
}

// The quants (0..63 per byte) of word i of sub-group k: low nibbles from the ql run of
// k's parity, the qh pair at bit 2k moved to bits 4-5.
QMV_HD std::uint32_t q6k_quarter_warp_quants(const Q6KQuarterWarpLoads& w, int k, int i) {
  const std::uint32_t low = (w.run[k & 1][i] >> (4 * (k >> 1))) & 0x0F0F0F0Fu;
  const std::uint32_t qh = w.run[2][i];
  const std::uint32_t high = k == 3 ? qh >> 2 : qh << (4 - 2 * k);
  return low | (high & 0x30303030u);
}

// |scale * dot| <= 128 * 8 * 32 * 128 = 2^22, which small_int_to_float takes exactly
// (its lower end, -2^22, included).
template <class Shfl>
QMV_HD float q6k_quarter_warp_dot(Shfl& shfl, const Q6KQuarterWarpLoads& w, const Q6KQuarterWarpAct& x, int lane) {
  const Q6KQuarterWarpLane at(lane);
  const std::uint32_t header = join_u16(w.header, x.d_own);
  constexpr int kMinus32 = static_cast<int>(0xE0E0E0E0u);
  float sum = 0.0f;
  QMV_UNROLL
  for (int k = 0; k < 4; ++k) {
    // bytes 0, 1: scales of sub-blocks 8h + 2k, +1; bits 16..31: d of activation block 4h + k
    const std::uint32_t scale = shfl(header, at.group + 4 * at.h + k);
    const int x0 = static_cast<int>(x.q[k][0]), x1 = static_cast<int>(x.q[k][1]);
    int dot = dp4a(kMinus32, x0, dp4a(kMinus32, x1, 0));
    dot = dp4a(static_cast<int>(q6k_quarter_warp_quants(w, k, 0)), x0, dot);
    dot = dp4a(static_cast<int>(q6k_quarter_warp_quants(w, k, 1)), x1, dot);
    const float dk = half_bits_to_float(static_cast<std::uint16_t>(scale >> 16));
    sum += dk * small_int_to_float(int8_byte(scale, at.c >> 1) * dot);
  }
  return half_bits_to_float(w.d) * sum;
}

// quarterwarp_dp4a: one warp per row; each step the four groups take eight super-blocks,
// the four 4-aligned ones, then the others. With kBothPasses the loads of both are
// issued before any arithmetic (eight super-blocks, 1680 bytes of weights per warp in
// flight); without, each pass loads and adds on its own (four), which keeps the
// registers of GPUs whose ptxas would otherwise spill. A full step has no predicates;
// only the row's last, partial step checks each block against the row's end.
template <bool kBothPasses>
struct Q6KQuarterWarpRowOf {
  using Act = BlockQ8_1;
  static constexpr int kBlockBytes = kQ6KBlockBytes;
  static constexpr int kBlocksPerStep = 8;

  template <bool kTail, class Mem, class Shfl>
  QMV_HD static float step(Mem& mem, Shfl& shfl, const std::uint8_t* row, const BlockQ8_1* xq, int b0, int blocks,
                           int first_aligned, int lane) {
    constexpr int kQ8PerSuper = kSuperBlock / kQ8_1Block;
    const int g = lane >> 3;
    const int b_aligned = b0 + first_aligned + 2 * g, b_other = b0 + (1 - first_aligned) + 2 * g;
    const bool valid_aligned = !kTail || b_aligned < blocks, valid_other = !kTail || b_other < blocks;
    // A block past the row's end loads nothing; its address stays inside the row.
    const int ba = valid_aligned ? b_aligned : 0, bo = valid_other ? b_other : 0;
    const Q6KQuarterWarpLoads wa = q6k_quarter_warp_load<true>(mem, row + ba * kQ6KBlockBytes, lane, valid_aligned);
    const Q6KQuarterWarpAct xa = q6k_quarter_warp_load_q8_1(mem, xq + ba * kQ8PerSuper, lane, valid_aligned);
    float va = 0.0f;
    if constexpr (!kBothPasses) va = q6k_quarter_warp_dot(shfl, wa, xa, lane);  // every lane shuffles
    const Q6KQuarterWarpLoads wo = q6k_quarter_warp_load<false>(mem, row + bo * kQ6KBlockBytes, lane, valid_other);
    const Q6KQuarterWarpAct xo = q6k_quarter_warp_load_q8_1(mem, xq + bo * kQ8PerSuper, lane, valid_other);
    if constexpr (kBothPasses) va = q6k_quarter_warp_dot(shfl, wa, xa, lane);
    const float vo = q6k_quarter_warp_dot(shfl, wo, xo, lane);
    return (valid_aligned ? va : 0.0f) + (valid_other ? vo : 0.0f);
  }

  template <class Mem, class Shfl>
  QMV_HD static float partial(Mem& mem, Shfl& shfl, const std::uint8_t* row, const BlockQ8_1* xq,
                              std::int64_t nb, int lane) {
    const int blocks = static_cast<int>(nb);  // a row's super-blocks fit an int
    // Block b starts 4-aligned when row / 2 + b is even (210 = 2 mod 4).
    const int first_aligned = static_cast<int>((reinterpret_cast<std::uintptr_t>(row) >> 1) & 1);
    float partial = 0.0f;
    int b0 = 0;
    for (; b0 + kBlocksPerStep <= blocks; b0 += kBlocksPerStep)
      partial += step<false>(mem, shfl, row, xq, b0, blocks, first_aligned, lane);
    if (b0 < blocks) partial += step<true>(mem, shfl, row, xq, b0, blocks, first_aligned, lane);
    return partial;
  }
};

// The kernel's row: both passes in flight on sm_90 and on sm_75/sm_80, one at a time on
// sm_86/sm_89, whose ptxas spills with both. As with Q6KHalfWarpRow, one type in every
// pass; the CPU test replays both.
struct Q6KQuarterWarpRow {
  using Act = BlockQ8_1;
  static constexpr int kBlockBytes = kQ6KBlockBytes;

  template <class Mem, class Shfl>
  QMV_HD static float partial(Mem& mem, Shfl& shfl, const std::uint8_t* row, const BlockQ8_1* xq,
                              std::int64_t nb, int lane) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 890)
    return Q6KQuarterWarpRowOf<false>::partial(mem, shfl, row, xq, nb, lane);
#else
    return Q6KQuarterWarpRowOf<true>::partial(mem, shfl, row, xq, nb, lane);
#endif
  }
};

// ---------------------------------------------------------------------------------
// tma_dp4a: the quarter-warp row code (both passes) on the chunks of a row that TMA
// copies brought into shared memory (tma_schedule.h, tma_kernels.cuh); a chunk of at
// most kChunkBlocks super-blocks is one quarter-warp step. Since 210 is not a multiple
// of 16, each copy is widened to the 16-byte boundaries around its chunk, so the
// matrix must be a multiple of 16 bytes long (rows * cols / 256 a multiple of 8: every
// Llama shape) for no copy to read past its end.
namespace q6k_tma {
inline constexpr int kStages = 5;
inline constexpr int kChunkBlocks = Q6KQuarterWarpRowOf<true>::kBlocksPerStep;
inline constexpr const char* kShapeRule = "rows >= 1, cols % 256 == 0, rows * cols / 256 % 8 == 0";
inline bool supports(Shape s) { return supports_superblock_cols(s) && s.rows * (s.cols / kSuperBlock) % 8 == 0; }
}  // namespace q6k_tma

}  // namespace qmv::cuda::q5q6
