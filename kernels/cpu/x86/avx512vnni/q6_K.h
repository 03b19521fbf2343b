// The core the Q6_K x Q8_K AVX-512 VNNI kernels share. Only sources compiled with
// -mavx512f/bw/vl/vnni may include it.
//
// A super-block is four "batches" of 64 consecutive weights, and each is one 512-bit
// vector: half h (weights 128h..128h+127) loads its 64 ql bytes once; their low nibbles
// are weights 128h+0..63 and their high nibbles weights 128h+64..127, in order. The two
// high bits come from the half's 32 qh bytes broadcast to both 256-bit halves of a
// register and masked once (0x33 in the low half keeps the bit pairs of weights l and
// 64+l, 0xCC in the high half those of 32+l and 96+l); one variable 32-bit shift per
// batch (by 4/2 for the low-nibble batch, 0/2 for the high-nibble one) brings the
// right pair to bits 4-5 with zeros above, and one vpternlogd (bitwise select by
// 0x0F) takes bits 0-3 from the nibble and 4-7 from the shifted pair, so whatever the
// shifts left in bits 0-3 is dropped.
//
// _mm512_dpbusd_epi32 multiplies the unsigned quants (u8, q in [0,63]) with the int8
// activations, four products per int32 lane: lane i of batch j covers weights
// 64j+4i..+3, i.e. sub-block 4j+i/4. Each lane fits int16 (|4*63*128| < 2^15), so two
// batches are packed to int16 (vpackssdw, exact) and one vpdpwssd against the int8
// sub-block scales (vpermw into the packed order) applies the scales and sums into
// int32. The -32 centring comes from the Q8_K bsums: -32*sum_g scale_g*bsums[g], one
// vpmaddwd per super-block that starts the int32 sum (each kernel forms it its own way).
//
// Bounds: per super-block |sum| <= 256*63*128*128 + 32*128*16*2048 < 2^31.
#pragma once

#include "kernels/cpu/x86/q6_K.h"

#include <cstdint>

#include "kernel.h"

namespace qmv::q6k_vnni {
namespace {

struct Consts {
  __m512i m0F = _mm512_set1_epi8(0x0F);
  // qh bytes keep bit pairs 0-1 and 4-5 in the low 256 bits, 2-3 and 6-7 in the high.
  __m512i qh_keep =
      _mm512_inserti64x4(_mm512_set1_epi8(0x33), _mm256_set1_epi8(static_cast<char>(0xCC)), 1);
  // 32-bit shift counts moving pair 0-1 / 2-3 (low-nibble batch: left by 4 / 2) and
  // pair 4-5 / 6-7 (high-nibble batch: right by 0 / 2) to bits 4-5.
  __m512i shl_lo = _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 2, 2, 2, 2, 2, 2, 2, 2);
  __m512i shr_hi = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
  // vpermw indexes building the int16 scales of packs(batch a, batch b): in 128-bit
  // lane L, the first four int16 are batch a's sub-block, the next four batch b's.
  __m512i idx01 = make_idx(0, 4);
  __m512i idx23 = make_idx(8, 12);

  static __m512i make_idx(int a, int b) {
    alignas(64) std::int16_t idx[32];
    for (int p = 0; p < 32; ++p) idx[p] = static_cast<std::int16_t>((p % 8 < 4 ? a : b) + p / 8);
    return _mm512_load_si512(idx);
  }
};

// The 16 int8 sub-block scales of a super-block, widened to int16.
inline __m256i scales16(const BlockQ6K* w) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w->scales)));
}

// sumi (the centring term) plus the scaled dots of one super-block of one row, as int32
// (d*d_x still to apply). sc16 is scales16(w); xq(j) gives the 64 activation quants of
// batch j (qs[64j..64j+63]).
template <class XQ>
__attribute__((always_inline)) inline __m512i add_block_dots(const BlockQ6K* w, __m256i sc16,
                                                             __m512i sumi, XQ xq,
                                                             const Consts& c) {
  const __m512i sc = _mm512_castsi256_si512(sc16);
  __m512i r[4];
  for (int h = 0; h < 2; ++h) {
    const __m512i ql = _mm512_loadu_si512(w->ql + 64 * h);
    const __m512i qh = _mm512_broadcast_i64x4(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w->qh + 32 * h)));
    const __m512i qhm = _mm512_and_si512(qh, c.qh_keep);
    const __m512i hi_lo = _mm512_sllv_epi32(qhm, c.shl_lo);
    const __m512i hi_hi = _mm512_srlv_epi32(qhm, c.shr_hi);
    // vpternlogd 0xD8: m0F ? nibble : pair, bit by bit (the destination is the dying pair).
    const __m512i q_lo = _mm512_ternarylogic_epi32(hi_lo, ql, c.m0F, 0xD8);
    const __m512i q_hi = _mm512_ternarylogic_epi32(hi_hi, _mm512_srli_epi16(ql, 4), c.m0F, 0xD8);
    r[2 * h] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q_lo, xq(2 * h));
    r[2 * h + 1] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q_hi, xq(2 * h + 1));
  }
  sumi = _mm512_dpwssd_epi32(sumi, _mm512_packs_epi32(r[0], r[1]),
                             _mm512_permutexvar_epi16(c.idx01, sc));
  sumi = _mm512_dpwssd_epi32(sumi, _mm512_packs_epi32(r[2], r[3]),
                             _mm512_permutexvar_epi16(c.idx23, sc));
  return sumi;
}

}  // namespace
}  // namespace qmv::q6k_vnni
