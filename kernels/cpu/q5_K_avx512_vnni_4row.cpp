// Q5_K weights x Q8_K activations, AVX-512 VNNI, four rows at a time: the activation
// loads of each super-block (256 quants, bsums, scale) are shared by four rows, and
// every row's super-block kPrefetchBlocks ahead is prefetched (past the row's end,
// the same column of the row four further on, which the next group reads first).
// The per-row arithmetic is that of q5_K.cpu.avx512_vnni: a sub-block pair per
// 512-bit register, `_mm512_dpbusd_epi32` (u5 x s8), two pairs packed to int16 and
// multiplied by the sub-block scales with madd/dpwssd, mins via bsums.
#include <immintrin.h>

#include <cstdint>

#include "kernel.h"

// GCC 12's AVX-512 headers build their "undefined" pass-through operands from a
// self-initialised variable, which -Wuninitialized reports wherever the intrinsics
// are inlined (GCC bug 105593): a false positive, silenced for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace {

// Software prefetch distance in super-blocks, per row, into L1. Measured on the
// development machine (Sapphire Rapids VM, cold weights, one thread, 4096x4096, p25
// of 48 calls against 14.4-14.9 GB/s for a plain read): no prefetch 8.1 GB/s; 4
// blocks ahead without the wrap to row r+4 10.3 GB/s; with it 4 blocks 12.4, 8
// blocks 12.3-13.0, 12-16 blocks 12.2-12.6. On 4096x14336, 8 blocks: 15-15.9 GB/s,
// the plain read's rate. L2 (T1) instead of L1: no clear difference.
constexpr std::int64_t kPrefetchBlocks = 8;

// The 8 six-bit scales (bytes 0..7) and 8 six-bit mins (bytes 8..15) of a super-block,
// as qmv::unpack_scale_min_k4 gives them, from `v`: the block's first 16 bytes (d, dmin,
// then the 12 packed bytes s[0..11] at bytes 4..15). Scale j < 4 is s[j] & 63, min
// j < 4 is s[j+4] & 63; for j >= 4 the low 4 bits come from a nibble of s[j+4] and
// the top 2 bits from bits 6..7 of s[j-4] (scale) or s[j] (min).
inline __m128i unpack_scales_mins(__m128i v) {
  // A: the byte with the low bits of each output; B: the byte with its top 2 bits.
  const __m128i a = _mm_shuffle_epi8(v, _mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11,
                                                      12, 13, 14, 15));
  const __m128i b = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1,
                                                      8, 9, 10, 11));
  // Mins 4..7 take the high nibble: shift bytes 12..15 (16-bit words 6, 7) right by 4.
  const __m128i a_low = _mm_mask_srli_epi16(a, 0xC0, a, 4);
  const __m128i lo_mask = _mm_setr_epi8(0x3f, 0x3f, 0x3f, 0x3f, 0x0f, 0x0f, 0x0f, 0x0f, 0x3f, 0x3f,
                                        0x3f, 0x3f, 0x0f, 0x0f, 0x0f, 0x0f);
  const __m128i hi_mask = _mm_setr_epi8(0, 0, 0, 0, 0x30, 0x30, 0x30, 0x30, 0, 0, 0, 0, 0x30, 0x30,
                                        0x30, 0x30);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 2), hi_mask);  // bits 6..7 to 4..5
  return _mm_ternarylogic_epi32(a_low, lo_mask, hi, 0xEA);          // (a & lo_mask) | hi
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

// pshufb control that makes int16 pairs (m_j, m_j) for j = 0..3 (low lane), 4..7
// (high lane) from the mins at bytes 8..15 of each lane.
inline __m256i min_pair_control() {
  return _mm256_setr_epi8(8, -1, 8, -1, 9, -1, 9, -1, 10, -1, 10, -1, 11, -1, 11, -1,
                          12, -1, 12, -1, 13, -1, 13, -1, 14, -1, 14, -1, 15, -1, 15, -1);
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
  __m256i min_pairs = min_pair_control();
  __m512i lane1 = _mm512_set1_epi32(1);
};

// One super-block of one row against the activation block whose quants are qx0..qx3
// (64 each) and whose scale is xd (in every lane): acc += d*sum_j sc_j*dot_j -
// dmin*sum_j m_j*(bsums[2j]+bsums[2j+1]), spread over the 16 lanes.
inline __m512 superblock(const qmv::BlockQ5K& wb, __m512i qx0, __m512i qx1, __m512i qx2,
                         __m512i qx3, __m256i bsums, __m128 xd, const Consts& k, __m512 acc) {
  const __m128i head = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&wb));
  // d_w*d_x, dmin_w*d_x (lanes 0, 1) from the block's first 4 bytes.
  const __m128 dd =
      _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(*reinterpret_cast<const int*>(&wb))), xd);
  // The unpacked scales (bytes 0..7) and mins (8..15) in every 128-bit lane.
  const __m512i sc_mn = _mm512_broadcast_i32x4(unpack_scales_mins(head));

  // Min term: lane j of bsums (as int32) holds the int16 pair bsums[2j], bsums[2j+1].
  const __m256i prod_m =
      _mm256_madd_epi16(bsums, _mm256_shuffle_epi8(_mm512_castsi512_si256(sc_mn), k.min_pairs));
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

inline float hsum(__m512 acc) {
  const __m256 s8 =
      _mm256_add_ps(_mm512_castps512_ps256(acc),
                    _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// NR (1..4) consecutive rows starting at w (stride n_blocks) into y[0..NR).
template <int NR>
inline void dot_rows(const qmv::BlockQ5K* __restrict w, const qmv::BlockQ8K* __restrict x,
                     std::int64_t n_blocks, float* __restrict y) {
  const Consts k;
  __m512 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
  for (std::int64_t b = 0; b < n_blocks; ++b) {
    const qmv::BlockQ8K& xb = x[b];
    const auto* qx = reinterpret_cast<const __m512i*>(xb.qs);
    const __m512i qx0 = _mm512_loadu_si512(qx);
    const __m512i qx1 = _mm512_loadu_si512(qx + 1);
    const __m512i qx2 = _mm512_loadu_si512(qx + 2);
    const __m512i qx3 = _mm512_loadu_si512(qx + 3);
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.bsums));
    const __m128 xd = _mm_set1_ps(xb.d);
    // Block b + kPrefetchBlocks of each row; past the row's end, the same column of
    // the row 4 further on (which the next group starts with). Integer arithmetic:
    // the address may lie past the matrix, which a prefetch may name.
    const std::int64_t pb = b + kPrefetchBlocks;
    const std::int64_t pf_block = pb + (pb >= n_blocks ? 3 * n_blocks : 0);
    const std::uintptr_t pf = reinterpret_cast<std::uintptr_t>(w) +
                              static_cast<std::uintptr_t>(pf_block) * sizeof(qmv::BlockQ5K);
#pragma GCC unroll 4
    for (int r = 0; r < NR; ++r) {
      {  // 176 bytes: three lines from the block's start cover it wherever it lies
        const char* p = reinterpret_cast<const char*>(
            pf + static_cast<std::uintptr_t>(r * n_blocks) * sizeof(qmv::BlockQ5K));
        _mm_prefetch(p, _MM_HINT_T0);
        _mm_prefetch(p + 64, _MM_HINT_T0);
        _mm_prefetch(p + 128, _MM_HINT_T0);
      }
      acc[r] = superblock(w[r * n_blocks + b], qx0, qx1, qx2, qx3, bsums, xd, k, acc[r]);
    }
  }
  for (int r = 0; r < NR; ++r) y[r] = hsum(acc[r]);
}

qmv::Status run(const qmv::MatVecArgs& a) {
  const std::int64_t n_blocks = a.shape.cols / qmv::kSuperBlock;
  const auto* w = static_cast<const qmv::BlockQ5K*>(a.w);
  const auto* x = static_cast<const qmv::BlockQ8K*>(a.x);
  float* y = a.y;
  qmv::parallel_row_tiles(a.shape.rows, a.threads, [=](std::int64_t r0, std::int64_t r1) {
    std::int64_t r = r0;
    for (; r + 4 <= r1; r += 4) dot_rows<4>(w + r * n_blocks, x, n_blocks, y + r);
    switch (r1 - r) {  // the rows left over in this tile (all of them when rows < 4)
      case 3: dot_rows<3>(w + r * n_blocks, x, n_blocks, y + r); break;
      case 2: dot_rows<2>(w + r * n_blocks, x, n_blocks, y + r); break;
      case 1: dot_rows<1>(w + r * n_blocks, x, n_blocks, y + r); break;
      default: break;
    }
  });
  return qmv::Status::Ok();
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q5_K.cpu.avx512_vnni_4row", qmv::WeightType::Q5_K, qmv::ActFormat::Q8_K, run,
    "Q5_K x Q8_K, AVX-512 VNNI, four rows share each activation load, software "
    "prefetch; dpbusd (u5 x s8), pairs packed to int16 and scaled by madd/dpwssd",
    qmv::CpuFeature::AVX512F | qmv::CpuFeature::AVX512BW | qmv::CpuFeature::AVX512VL |
        qmv::CpuFeature::AVX512VNNI | qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA |
        qmv::CpuFeature::F16C));
