// Q4_K weights in the row-interleaved layout (row_interleaved.h) x Q8_K activations,
// AVX2: eight rows per step, one 32-bit lane per row. Per pair of sub-blocks, eight
// 32-byte loads hold four weights of each of the eight rows per lane: low nibbles
// (sub-block 2g) meet a broadcast of the four matching activation quants in
// vpmaddubsw, high nibbles (sub-block 2g+1) the four quants 32 further on. Each
// sub-block's eight int16 pair sums add up in int16, and one vpmaddwd against the
// eight rows' 6-bit scales, each repeated in both int16 halves of its lane by one
// vpshufb, gives the scaled sub-block dots in int32. The min term takes one vpmaddwd
// per two sub-blocks: the rows' mins, stored in pairs by the repack and widened to
// int16, against the two sub-blocks' activation sums (made once per call from the
// Q8_K block sums). The rows' d and dmin convert in one vcvtph2ps each.
//
// Bounds: a vpmaddubsw pair is at most 2 * 15 * 128 = 3840 in size and eight of them
// at most 30720 < 2^15; a sub-block dot (<= 61440) times a scale (<= 63), over eight
// sub-blocks, is far inside int32; a sub-block's activation sum is at most
// 32 * 128 = 4096 in size (int16), times a min (<= 63) over eight sub-blocks likewise.
// The float conversion loses nothing that matters next to the Q8_K rounding.
#include "kquant_r8_avx2.h"

namespace {

using qmv::interleave::BlockQ4_Kx8;
using qmv::interleave::XMinSums;

// How far ahead of the super-block being read each weight stream is prefetched, in
// bytes (the hardware prefetcher alone leaves a single stream short of the peak):
// 2048 beat 1024 and 4096 (results/intel-xeon-2c/r8-prefetch-chunked-pages.csv).
constexpr int kPrefetchBytes = 2048;

// NG groups of eight rows against the activation, into out[i][0..7]: each group a
// weight stream of its own, each activation quad loaded once for all of them. Each
// quarter of a super-block prefetches a quarter of the block kPrefetchBytes ahead:
// the same lines as one burst per block, but spread so the misses queue evenly.
template <int NG>
void dot_groups(const BlockQ4_Kx8* const w[NG], const qmv::BlockQ8K* x, const XMinSums* xm, std::int64_t nb,
                float* const out[NG]) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i pick = qmv::interleave::scale_pair_control();
  __m256 acc[NG];
  for (int i = 0; i < NG; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    const qmv::BlockQ8K& xb = x[b];
    const __m256 dx = _mm256_set1_ps(xb.d);
    for (int i = 0; i < NG; ++i) {
      const BlockQ4_Kx8& wb = w[i][b];
      const std::uintptr_t ahead = reinterpret_cast<std::uintptr_t>(&wb) + kPrefetchBytes;
      __m256i isum = _mm256_setzero_si256(), imin = _mm256_setzero_si256();
      for (int g = 0; g < 4; ++g) {
        for (int line = 5 * g; line < 5 * g + 5; ++line) qmv::x86::prefetch_line(ahead + 64 * line);
        __m256i lo16 = _mm256_setzero_si256(), hi16 = _mm256_setzero_si256();
        const std::int8_t* xq = xb.qs + 64 * g;
        for (int c = 0; c < 8; ++c) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs[g][c]));
          lo16 = _mm256_add_epi16(lo16, _mm256_maddubs_epi16(_mm256_and_si256(v, m4), qmv::interleave::broadcast_quad(xq + 4 * c)));
          hi16 = _mm256_add_epi16(
              hi16, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4), qmv::interleave::broadcast_quad(xq + 32 + 4 * c)));
        }
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(lo16, qmv::interleave::scale_pairs(wb.scales[2 * g], pick)));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(hi16, qmv::interleave::scale_pairs(wb.scales[2 * g + 1], pick)));
        imin = _mm256_add_epi32(imin, qmv::interleave::min_term(wb.min_pairs[g], xm[b].pair[g]));
      }
      acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(qmv::interleave::fp16x8(wb.d), dx), acc[i]);
      acc[i] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(imin), _mm256_mul_ps(qmv::interleave::fp16x8(wb.dmin), dx), acc[i]);
    }
  }
  for (int i = 0; i < NG; ++i) _mm256_storeu_ps(out[i], acc[i]);
}

// The family's entry for the runs and records of kquant_r8_avx2.h.
struct Q4K {
  using Layout = BlockQ4_Kx8;
  static constexpr qmv::WeightType kType = qmv::WeightType::Q4_K;
  template <int NG>
  static void dot_groups(const Layout* const w[NG], const qmv::BlockQ8K* x, const XMinSums* xm, std::int64_t nb,
                         float* const out[NG]) {
    ::dot_groups<NG>(w, x, xm, nb, out);
  }
};

}  // namespace

QMV_REGISTER_KERNEL((qmv::interleave::kquant_r8_record<Q4K, 1>(
    "q4_K.cpu.avx2_r8_q8k",
    "Q4_K x Q8_K, AVX2, weights repacked once into eight-row interleaved super-blocks "
    "(scales and mins a byte each): one float lane per row, one weight stream per thread")));
QMV_REGISTER_KERNEL((qmv::interleave::kquant_r8_record<Q4K, 2>(
    "q4_K.cpu.avx2_r8x2_q8k",
    "Q4_K x Q8_K, AVX2, eight-row interleaved super-blocks as avx2_r8_q8k, two weight "
    "streams per thread (the two halves of its rows) sharing each activation load")));
QMV_REGISTER_KERNEL(qmv::interleave::kquant_r8_up_gate_record<Q4K>(
    "q4_K.cpu.avx2_r8_up_gate_q8k",
    "fused FFN up+gate (y = W x, y2 = W2 x), Q4_K x Q8_K, AVX2, both matrices repacked once into "
    "eight-row interleaved super-blocks: group g of each per step, two weight streams sharing "
    "each activation load, both outputs in one parallel region"));
