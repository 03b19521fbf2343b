// The core the Q5_K x Q8_K AVX-512 VNNI kernels share. Only sources compiled with
// -mavx512f/bw/vl/vnni may include it.
//
// A 512-bit register holds the unsigned 5-bit quants of one sub-block pair: the pair's
// 32 qs bytes are broadcast to both halves, the upper half shifted right by 4 (low
// nibbles: sub-block 2g, high nibbles: 2g+1), and the fifth bits from the broadcast
// qh merged in at bit 4 (vpternlogd). That lines up with 64 consecutive activation
// quants, so `_mm512_dpbusd_epi32` (u8 weights x s8 activations) gives 16 int32
// partial dots, 8 per sub-block. Each partial dot (4 products, |.| <= 4*31*128) fits
// in int16, so two pairs' dots pack into one vector (vpackssdw, exact) and one
// madd/dpwssd against the int16 sub-block scales scales and sums them. The 6-bit
// scales and mins are unpacked with pshufb once per super-block; the min term comes
// from the Q8_K bsums. One float accumulator, one horizontal sum per row.
#pragma once

#include "kernels/cpu/x86/q5_K.h"

#include <cstdint>

#include "kernel.h"

namespace qmv::q5k_vnni {
namespace {

// The scales (bytes 0..7) and mins (bytes 8..15) of a super-block from its first 16
// bytes, AVX-512 instructions (the layout: x86/q5_K.h).
inline __m128i unpack_scales_mins(__m128i v) {
  const auto [a, b] = q5k_x86::scale_min_bytes(v);
  // Mins 4..7 take the high nibble: shift bytes 12..15 (16-bit words 6, 7) right by 4.
  const __m128i a_low = _mm_mask_srli_epi16(a, 0xC0, a, 4);
  const __m128i lo_mask = _mm_setr_epi8(0x3f, 0x3f, 0x3f, 0x3f, 0x0f, 0x0f, 0x0f, 0x0f, 0x3f, 0x3f,
                                        0x3f, 0x3f, 0x0f, 0x0f, 0x0f, 0x0f);
  const __m128i hi = q5k_x86::top_bits(b);
  return _mm_ternarylogic_epi32(a_low, lo_mask, hi, 0xEA);  // (a & lo_mask) | hi
}

constexpr __mmask32 kUpperWords = 0xFFFF0000u;  // the upper 256 bits, as 16-bit lanes

// pshufb controls: int16 lanes holding the scales of the sub-blocks that
// _mm512_packs_epi32(D_a, D_b) puts there, for the pairs a = 2P, b = 2P+1 (P = 0, 1).
// Each 128-bit lane of the pack holds 4 dwords of D_a then 4 of D_b; dwords 0..7 of
// D_g belong to sub-block 2g, dwords 8..15 to 2g+1. Scales are bytes 0..7 of each lane.
template <int P>
inline __m512i scale_control() {
  constexpr char a0 = 4 * P, b0 = 4 * P + 2, a1 = 4 * P + 1, b1 = 4 * P + 3;
  return _mm512_set_epi8(
      -1, b1, -1, b1, -1, b1, -1, b1, -1, a1, -1, a1, -1, a1, -1, a1,   // lane 3
      -1, b1, -1, b1, -1, b1, -1, b1, -1, a1, -1, a1, -1, a1, -1, a1,   // lane 2
      -1, b0, -1, b0, -1, b0, -1, b0, -1, a0, -1, a0, -1, a0, -1, a0,   // lane 1
      -1, b0, -1, b0, -1, b0, -1, b0, -1, a0, -1, a0, -1, a0, -1, a0);  // lane 0
}

// The 64 unsigned 5-bit quants of sub-blocks 2G (low 256 bits) and 2G+1 (high):
// the pair's 32 qs bytes in both halves, the high half shifted right by 4; bits 0..3
// are taken from there and bits 4..7 from `hb`, which must hold the fifth bit at bit 4
// and zeros at bits 5..7 (bits 0..3 are ignored).
template <int G>
inline __m512i pair_quants(const std::uint8_t* qs, __m512i hb, __m512i m4) {
  __m512i bits = _mm512_broadcast_i64x4(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * G)));
  bits = _mm512_mask_srli_epi16(bits, kUpperWords, bits, 4);
  return _mm512_ternarylogic_epi32(m4, bits, hb, 0xCA);  // m4 ? bits : hb, bitwise
}

// Constants of the super-block loop, made once per row (or row group).
struct Consts {
  __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512i even = _mm512_set1_epi8(0x11);  // fifth bits of pairs 0 (bit 0) and 2 (bit 4)
  __m512i odd = _mm512_set1_epi8(0x44);   // fifth bits of pairs 1 (bit 2) and 3 (bit 6)
  __m512i sc01 = scale_control<0>();
  __m512i sc23 = scale_control<1>();
  __m256i min_pairs = q5k_x86::min_pair_control();
  __m512i lane1 = _mm512_set1_epi32(1);
};

// One super-block of one row against the activation block whose quants are qx0..qx3
// (64 each) and whose scale is xd (in every lane): acc += d*sum_j sc_j*dot_j -
// dmin*sum_j m_j*(bsums[2j]+bsums[2j+1]), spread over the 16 lanes.
inline __m512 superblock(const BlockQ5K& wb, __m512i qx0, __m512i qx1, __m512i qx2,
                         __m512i qx3, __m256i bsums, __m128 xd, const Consts& k, __m512 acc) {
  const __m128i head = q5k_x86::load_head(wb);
  // d_w*d_x, dmin_w*d_x (lanes 0, 1).
  const __m128 dd = _mm_mul_ps(q5k_x86::d_dmin(wb), xd);
  // The unpacked scales (bytes 0..7) and mins (8..15) in every 128-bit lane.
  const __m512i sc_mn = _mm512_broadcast_i32x4(unpack_scales_mins(head));

  // Min term: dmin*d_x*m_j*(bsums[2j]+bsums[2j+1]) off the accumulator.
  const __m256i prod_m = q5k_x86::min_sums(bsums, _mm512_castsi512_si256(sc_mn), k.min_pairs);
  acc = _mm512_fnmadd_ps(_mm512_permutexvar_ps(k.lane1, _mm512_castps128_ps512(dd)),
                         _mm512_cvtepi32_ps(_mm512_zextsi256_si512(prod_m)), acc);

  // qh in both halves, the high half shifted right by 1: bit 2g of every byte is then
  // the fifth bit of sub-block 2g (low half) or 2g+1 (high half). Keep bits 0, 4 and
  // bits 2, 6 apart and shift each to bit 4: bits 5..7 stay clear.
  __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qh)));
  h = _mm512_mask_srli_epi16(h, kUpperWords, h, 1);
  const __m512i h_even = _mm512_and_si512(h, k.even);
  const __m512i h_odd = _mm512_and_si512(h, k.odd);
  const __m512i q0 = pair_quants<0>(wb.qs, _mm512_slli_epi16(h_even, 4), k.m4);
  const __m512i q1 = pair_quants<1>(wb.qs, _mm512_slli_epi16(h_odd, 2), k.m4);
  const __m512i q2 = pair_quants<2>(wb.qs, h_even, k.m4);
  const __m512i q3 = pair_quants<3>(wb.qs, _mm512_srli_epi16(h_odd, 2), k.m4);

  // u5 x s8 dots, 4 products per int32 lane: |.| <= 4*31*128 fits in int16, so two
  // pairs pack into one vector whose int16 pairs madd/dpwssd multiply by the scales.
  const __m512i d0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q0, qx0);
  const __m512i d1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q1, qx1);
  const __m512i d2 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q2, qx2);
  const __m512i d3 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q3, qx3);
  __m512i sumi = _mm512_madd_epi16(_mm512_packs_epi32(d0, d1), _mm512_shuffle_epi8(sc_mn, k.sc01));
  sumi = _mm512_dpwssd_epi32(sumi, _mm512_packs_epi32(d2, d3), _mm512_shuffle_epi8(sc_mn, k.sc23));
  return _mm512_fmadd_ps(_mm512_broadcastss_ps(dd), _mm512_cvtepi32_ps(sumi), acc);
}

// The sum of the 16 lanes.
inline float hsum(__m512 acc) {
  return q5k_x86::hsum(
      _mm256_add_ps(_mm512_castps512_ps256(acc),
                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1))));
}

}  // namespace
}  // namespace qmv::q5k_vnni
