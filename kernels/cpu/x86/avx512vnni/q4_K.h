// The core the Q4_K x Q8_K AVX-512 VNNI kernels share. Only sources compiled with
// -mavx512f/bw/vl/vnni may include it.
//
// Per super-block and row the work is two 64-byte weight loads, and/shift for the low
// and high nibbles, four vpdpbusd against the four activation vectors, two vpackssdw
// + two vpdpwssd to apply the eight sub-block scales in int16 x int16 -> int32, and
// the float step d*dx*sumi - dmin*dx*summins, with summins from the bsums.
//
// Layout. Weight bytes 0..63 hold sub-blocks 0 and 2 in their low nibbles (bytes 0..31
// and 32..63) and sub-blocks 1 and 3 in their high nibbles; bytes 64..127 the same for
// 4/6 and 5/7. The activation is therefore re-ordered once per call (XBlock) so that
// each of its four 64-byte vectors lines up with one nibble half of one weight load:
// [sb0|sb2], [sb1|sb3], [sb4|sb6], [sb5|sb7].
//
// Bounds: a vpdpbusd lane sums 4 products |q*qx| <= 15*128, so |lane| <= 7680 fits
// int16 and vpackssdw never saturates; times a scale <= 63, summed over the
// super-block, int32 is far from overflow.
#pragma once

#include "kernels/cpu/x86/q4_K.h"

#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace qmv::q4k_vnni {
namespace {

// One super-block of the prepared activation: 320 bytes, five cache lines.
struct alignas(64) XBlock {
  std::int8_t q[kSuperBlock];  // [sb0|sb2] [sb1|sb3] [sb4|sb6] [sb5|sb7]
  std::int16_t bs[8];          // per sub-block sum of the quants (two bsums each)
  float d;
};

// Re-orders a Q8_K row for the kernels; nb super-blocks.
inline void prepare_activation(const BlockQ8K* x, std::int64_t nb, XBlock* out) {
  static constexpr int kSrc[8] = {0, 2, 1, 3, 4, 6, 5, 7};  // sub-block at each 32-byte slot
  for (std::int64_t b = 0; b < nb; ++b) {
    for (int s = 0; s < 8; ++s)
      _mm256_store_si256(reinterpret_cast<__m256i*>(out[b].q + 32 * s),
                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs + 32 * kSrc[s])));
    for (int j = 0; j < 8; ++j)
      out[b].bs[j] = static_cast<std::int16_t>(x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
    out[b].d = x[b].d;
  }
}

// The call's Q8_K activation re-ordered for the kernels, in a per-thread buffer
// reused across calls; nb super-blocks.
inline const XBlock* prepared_activation(const MatVecArgs& a, std::int64_t nb) {
  auto* out = static_cast<XBlock*>(thread_scratch(static_cast<std::size_t>(nb) * sizeof(XBlock)));
  prepare_activation(static_cast<const BlockQ8K*>(a.x), nb, out);
  return out;
}

// vpshufb controls for the int16 scale vectors that match vpackssdw(P0, P1): in each
// 128-bit lane words 0..3 come from P0 and 4..7 from P1; lanes 0-1 of P hold the first
// sub-block of the pair, lanes 2-3 the second. Scale bytes are broadcast to every qword.
inline __m512i scale_control(int a0, int a1, int b0, int b1) {
  // Lanes 0-1: (a0 x4, a1 x4) words; lanes 2-3: (b0 x4, b1 x4). 0x80 zeroes the high byte.
  alignas(64) std::uint8_t c[64];
  for (int lane = 0; lane < 4; ++lane) {
    const int lo = lane < 2 ? a0 : b0, hi = lane < 2 ? a1 : b1;
    for (int w = 0; w < 8; ++w) {
      c[16 * lane + 2 * w] = static_cast<std::uint8_t>(w < 4 ? lo : hi);
      c[16 * lane + 2 * w + 1] = 0x80;
    }
  }
  return _mm512_load_si512(c);
}

struct Consts {
  __m512i m4 = _mm512_set1_epi8(0xF);
  // P0=[sb0|sb2], P1=[sb1|sb3] -> packed words (sb0 x4, sb1 x4 | sb2, sb3); P2/P3: 4..7.
  __m512i ctl01 = scale_control(0, 1, 2, 3);
  __m512i ctl23 = scale_control(4, 5, 6, 7);
};

// Per-row state: the float accumulator of d*dx*sumi and that of dmin*dx*summins.
struct RowAcc {
  __m512 acc = _mm512_setzero_ps();
  __m128 acc_min = _mm_setzero_ps();
};

// One super-block of one row against the four activation vectors xv[0..3].
__attribute__((always_inline)) inline void superblock(const BlockQ4K& wb, const XBlock& xb,
                                                       const __m512i xv[4], const Consts& k,
                                                       RowAcc& r) {
  const __m128i head = q4k_x86::load_head(wb);
  const __m128i scm = q4k_x86::unpack_scales_mins(head);
  const __m512i wa = _mm512_loadu_si512(wb.qs);
  const __m512i wbits = _mm512_loadu_si512(wb.qs + 64);
  const __m512i z = _mm512_setzero_si512();
  const __m512i p0 = _mm512_dpbusd_epi32(z, _mm512_and_si512(wa, k.m4), xv[0]);
  const __m512i p1 = _mm512_dpbusd_epi32(z, _mm512_and_si512(_mm512_srli_epi16(wa, 4), k.m4), xv[1]);
  const __m512i p2 = _mm512_dpbusd_epi32(z, _mm512_and_si512(wbits, k.m4), xv[2]);
  const __m512i p3 = _mm512_dpbusd_epi32(z, _mm512_and_si512(_mm512_srli_epi16(wbits, 4), k.m4), xv[3]);
  // The scale bytes in every qword, then the int16 scale of each packed word.
  const __m512i scb = _mm512_broadcastq_epi64(scm);
  __m512i sumi = _mm512_dpwssd_epi32(z, _mm512_packs_epi32(p0, p1), _mm512_shuffle_epi8(scb, k.ctl01));
  sumi = _mm512_dpwssd_epi32(sumi, _mm512_packs_epi32(p2, p3), _mm512_shuffle_epi8(scb, k.ctl23));
  // Min term: m_j * (sum of the sub-block's quants), as four int32 pair sums.
  const __m128i summ = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_unpackhi_epi64(scm, scm)),
                                      _mm_load_si128(reinterpret_cast<const __m128i*>(xb.bs)));
  const __m128 dm = _mm_mul_ps(q4k_x86::d_dmin(head), _mm_set1_ps(xb.d));
  r.acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_broadcastss_ps(dm), r.acc);
  r.acc_min = _mm_fmadd_ps(_mm_cvtepi32_ps(summ), _mm_permute_ps(dm, 0x55), r.acc_min);
}

// The row's result: one horizontal sum of the scale accumulator minus that of the mins.
inline float finish(const RowAcc& r) {
  const __m512 all = _mm512_sub_ps(r.acc, _mm512_zextps128_ps512(r.acc_min));
  return _mm512_reduce_add_ps(all);
}

// Software prefetch distance of the weight streams, in super-blocks (144 bytes) ahead
// of the one being read, into L1 (_MM_HINT_T0). With four streams the prefetch still
// pays on cold weights; distances of 4 to 16 blocks are within noise of each other, and
// prefetching into L1 beats prefetching into L2 (_MM_HINT_T1).
inline constexpr int kPrefetchBlocks = 8;

// NR rows (weights w[i], nb super-blocks each) against the prepared activation: every
// 64-byte activation vector is loaded once per super-block and used by all NR rows.
// With Prefetch, each row's stream is prefetched kPrefetchBlocks super-blocks ahead;
// the callers hand over consecutive rows in each stream, so past a row's end that is
// the start of the stream's next row.
template <int NR, bool Prefetch>
inline void dot_rows(const BlockQ4K* const w[NR], const XBlock* x, std::int64_t nb, float out[NR]) {
  const Consts k;
  RowAcc r[NR];
  for (std::int64_t b = 0; b < nb; ++b) {
    if constexpr (Prefetch) {
      for (int i = 0; i < NR; ++i)
        q4k_x86::prefetch_block(reinterpret_cast<std::uintptr_t>(w[i] + b) +
                                kPrefetchBlocks * sizeof(BlockQ4K));
    }
    __m512i xv[4];
    for (int v = 0; v < 4; ++v) xv[v] = _mm512_load_si512(x[b].q + 64 * v);
    for (int i = 0; i < NR; ++i) superblock(w[i][b], x[b], xv, k, r[i]);
  }
  for (int i = 0; i < NR; ++i) out[i] = finish(r[i]);
}

// The matvec that takes NR rows at a time (for_rows_in_parts): one row from each of NR
// contiguous parts of a row tile, so each weight stream walks consecutive rows, its
// prefetch runs on into the stream's next row, and the streams lie in different pages.
// Rows left over take the one-row path.
template <int NR>
Status run_rows_in_parts(const MatVecArgs& a) {
  const std::int64_t nb = a.shape.cols / kSuperBlock;
  const auto* w = static_cast<const BlockQ4K*>(a.w);
  const XBlock* x = prepared_activation(a, nb);
  parallel_row_tiles(a.shape.rows, a.threads, [&](std::int64_t r0, std::int64_t r1) {
    for_rows_in_parts<NR>(
        r0, r1,
        [&](const std::int64_t (&r)[NR]) {
          const BlockQ4K* rows[NR];
          for (int i = 0; i < NR; ++i) rows[i] = w + r[i] * nb;
          float out[NR];
          dot_rows<NR, true>(rows, x, nb, out);
          for (int i = 0; i < NR; ++i) a.y[r[i]] = out[i];
        },
        [&](std::int64_t r) {
          const BlockQ4K* rows[1] = {w + r * nb};
          dot_rows<1, true>(rows, x, nb, a.y + r);
        });
  });
  return Status::Ok();
}

inline constexpr std::uint32_t kFeatures = CpuFeature::AVX512F | CpuFeature::AVX512BW | CpuFeature::AVX512VL |
                                           CpuFeature::AVX512VNNI | CpuFeature::F16C;

}  // namespace
}  // namespace qmv::q4k_vnni
