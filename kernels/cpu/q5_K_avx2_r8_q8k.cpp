// Q5_K weights in the row-interleaved layout (row_interleaved.h) x Q8_K activations,
// AVX2: eight rows per step, one 32-bit lane per row, as the Q4_K kernel
// (q4_K_avx2_r8_q8k.cpp) with the fifth bits added. Per pair of sub-blocks, eight
// 32-byte loads hold four weights of each of the eight rows per lane; each 32-byte
// load of fifth bits serves four of them: for chunk c its bits 2c and 2c+1 of every
// byte, moved to bit 4 by constant shifts and masked, are OR'd into the low and the
// high nibbles before they meet the activation quads in vpmaddubsw. The scale and min
// terms are the Q4_K kernel's: one vpmaddwd against the rows' scales per sub-block
// and half, one against the paired mins per two sub-blocks.
//
// Bounds: a vpmaddubsw pair is at most 2 * 31 * 128 = 7936 in size, so the int16 sums
// take four pairs (31744 < 2^15) before each vpmaddwd; a sub-block dot (<= 126976)
// times a scale (<= 63), over eight sub-blocks, is inside int32 (< 2^26), and so is
// the min term (4096 * 63 * 8). The float conversion of the int32 sums rounds far
// below the Q8_K activation's own rounding.
#include "kquant_r8_avx2.h"

namespace {

using qmv::interleave::BlockQ5_Kx8;
using qmv::interleave::XMinSums;

// How far ahead of the super-block being read each weight stream is prefetched, in
// bytes: a little over two super-blocks, which beat 1536 once the prepared copies lay
// wholly in huge pages (r8-prefetch-chunked-pages.csv in results/intel-xeon-2c; in
// ordinary pages 512 was slower and 2048 and 3072 no faster than 1536,
// q5_K-r8-prefetch.csv). Each quarter of the 1440-byte
// super-block prefetches six lines: four quarters cover it at any alignment.
constexpr int kPrefetchBytes = 3072;
constexpr int kLinesPerQuarter = 6;

// Chunk 4h+C of a quarter: its 5-bit low- and high-nibble weights against their
// activation quads, added into lo16 and hi16.
template <int C>
inline void chunk(const std::uint8_t* qs32, __m256i qh, const std::int8_t* xq, __m256i& lo16, __m256i& hi16) {
  const __m256i m4 = _mm256_set1_epi8(0x0f), bit4 = _mm256_set1_epi8(0x10);
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs32));
  const __m256i lo = _mm256_or_si256(_mm256_and_si256(v, m4), qmv::interleave::bits_to_4<2 * C>(qh, bit4));
  const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), qmv::interleave::bits_to_4<2 * C + 1>(qh, bit4));
  lo16 = _mm256_add_epi16(lo16, _mm256_maddubs_epi16(lo, qmv::interleave::broadcast_quad(xq)));
  hi16 = _mm256_add_epi16(hi16, _mm256_maddubs_epi16(hi, qmv::interleave::broadcast_quad(xq + 32)));
}

// NG groups of eight rows against the activation, into out[i][0..7]: each group a
// weight stream of its own, each activation quad loaded once for all of them, each
// quarter of a super-block prefetching a quarter of the block kPrefetchBytes ahead.
template <int NG>
void dot_groups(const BlockQ5_Kx8* const w[NG], const qmv::BlockQ8K* x, const XMinSums* xm, std::int64_t nb,
                float* const out[NG]) {
  const __m256i pick = qmv::interleave::scale_pair_control();
  __m256 acc[NG];
  for (int i = 0; i < NG; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const qmv::BlockQ8K& xb = x[b];
    const __m256 dx = _mm256_set1_ps(xb.d);
    for (int i = 0; i < NG; ++i) {
      const BlockQ5_Kx8& wb = w[i][b];
      const std::uintptr_t ahead = reinterpret_cast<std::uintptr_t>(&wb) + kPrefetchBytes;
      __m256i isum = _mm256_setzero_si256(), imin = _mm256_setzero_si256();
      for (int g = 0; g < 4; ++g) {
        for (int line = kLinesPerQuarter * g; line < kLinesPerQuarter * (g + 1); ++line)
          qmv::x86::prefetch_line(ahead + 64 * line);
        const BlockQ5_Kx8::Quarter& q = wb.quarter[g];
        const __m256i scale_lo = qmv::interleave::scale_pairs(wb.scales[2 * g], pick);
        const __m256i scale_hi = qmv::interleave::scale_pairs(wb.scales[2 * g + 1], pick);
        for (int h = 0; h < 2; ++h) {
          const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q.qh[h]));
          const std::int8_t* xq = xb.qs + 64 * g + 16 * h;
          __m256i lo16 = _mm256_setzero_si256(), hi16 = _mm256_setzero_si256();
          chunk<0>(q.qs[4 * h], qh, xq, lo16, hi16);
          chunk<1>(q.qs[4 * h + 1], qh, xq + 4, lo16, hi16);
          chunk<2>(q.qs[4 * h + 2], qh, xq + 8, lo16, hi16);
          chunk<3>(q.qs[4 * h + 3], qh, xq + 12, lo16, hi16);
          isum = _mm256_add_epi32(isum, _mm256_madd_epi16(lo16, scale_lo));
          isum = _mm256_add_epi32(isum, _mm256_madd_epi16(hi16, scale_hi));
        }
        imin = _mm256_add_epi32(imin, qmv::interleave::min_term(wb.min_pairs[g], xm[b].pair[g]));
      }
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(qmv::interleave::fp16x8(wb.d), dx), acc[i]);
      acc[i] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_mul_ps(qmv::interleave::fp16x8(wb.dmin), dx), acc[i]);
    }
  }
  for (int i = 0; i < NG; ++i) _mm256_storeu_ps(out[i], acc[i]);
}

// The family's entry for the runs and records of kquant_r8_avx2.h.
struct Q5K {
  using Layout = BlockQ5_Kx8;
  static constexpr qmv::WeightType kType = qmv::WeightType::Q5_K;
  template <int NG>
  static void dot_groups(const Layout* const w[NG], const qmv::BlockQ8K* x, const XMinSums* xm, std::int64_t nb,
                         float* const out[NG]) {
    ::dot_groups<NG>(w, x, xm, nb, out);
  }
};

}  // namespace

QMV_REGISTER_KERNEL((qmv::interleave::kquant_r8_record<Q5K, 1>(
    "q5_K.cpu.avx2_r8_q8k",
    "Q5_K x Q8_K, AVX2, weights repacked once into eight-row interleaved super-blocks "
    "(scales and mins a byte each, fifth bits four chunks per load): one float lane per row, "
    "one weight stream per thread")));
QMV_REGISTER_KERNEL((qmv::interleave::kquant_r8_record<Q5K, 2>(
    "q5_K.cpu.avx2_r8x2_q8k",
    "Q5_K x Q8_K, AVX2, eight-row interleaved super-blocks as avx2_r8_q8k, two weight "
    "streams per thread (the two halves of its rows) sharing each activation load")));
QMV_REGISTER_KERNEL(qmv::interleave::kquant_r8_up_gate_record<Q5K>(
    "q5_K.cpu.avx2_r8_up_gate_q8k",
    "fused FFN up+gate (y = W x, y2 = W2 x), Q5_K x Q8_K, AVX2, both matrices repacked once into "
    "eight-row interleaved super-blocks: group g of each per step, two weight streams sharing "
    "each activation load, both outputs in one parallel region"));
