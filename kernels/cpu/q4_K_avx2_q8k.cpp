// Q4_K weights x Q8_K activations, AVX2, the integer dot product in the ggml style:
// per 32 weights, vpmaddubsw (unsigned nibbles x signed int8 -> int16 pair sums) then
// vpmaddwd against the sub-block scale (int16 -> int32, the scale applied by the same
// instruction that widens). The 6-bit scales and mins are unpacked once per
// super-block, in vector registers; the min term is the mins (duplicated per pair)
// times the Q8_K bsums by one vpmaddwd. Per super-block one float accumulator takes
// d*dx*sumi - dmin*dx*summins, so a row ends with one horizontal sum. The inner loop
// works on raw pointers: a row costs its pointer set-up and the final sum, nothing
// else. The weight stream is prefetched kPrefetchBlocks super-blocks ahead (rows are
// consecutive, so near a row's end that is the start of the next row).
//
// Bounds: a maddubs pair is at most 2*15*128 = 3840 (no int16 saturation), times a
// scale <= 63 and summed over 256 weights it stays far inside int32.
#include "q4_K_x86.h"

#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace {

// In super-blocks (144 bytes), for the reason given in q4_K_avx2_f32.cpp; 8 to 32
// blocks ahead are close, and 16 is among the best.
constexpr int kPrefetchBlocks = 16;

// vpshufb controls that turn the eight scale bytes (in both halves' low qword) into
// the int16 scale of sub-block j in every word: bytes (j, zero) repeated.
alignas(32) constexpr std::uint8_t kScaleShuffle[8][32] = {
#define QMV_ROW(j)                                                         \
  {j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80, \
   j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80, j, 0x80}
    QMV_ROW(0), QMV_ROW(1), QMV_ROW(2), QMV_ROW(3), QMV_ROW(4), QMV_ROW(5), QMV_ROW(6), QMV_ROW(7)
#undef QMV_ROW
};

float dot_row(const qmv::BlockQ4K* __restrict w, const qmv::BlockQ8K* __restrict x, std::int64_t nb) {
  const __m256i m4 = _mm256_set1_epi8(0xF);
  const auto* shuf = reinterpret_cast<const __m256i*>(kScaleShuffle);
  __m256 acc = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < nb; ++b) {
    qmv::q4k_x86::prefetch_block(reinterpret_cast<std::uintptr_t>(w + b) +
                                 kPrefetchBlocks * sizeof(qmv::BlockQ4K));
    const qmv::BlockQ4K& wb = w[b];
    const qmv::BlockQ8K& xb = x[b];
    const __m128i head = qmv::q4k_x86::load_head(wb);
    const __m128i scm = qmv::q4k_x86::unpack_scales_mins(head);  // scales, then mins
    const __m128 dm = _mm_mul_ps(qmv::q4k_x86::d_dmin(head), _mm_set1_ps(xb.d));

    // Min term: words (m0,m0,m1,m1,..,m7,m7) x bsums -> m_j*(bsums[2j]+bsums[2j+1]).
    const __m256i mins2 = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(scm, scm));
    const __m256i summ = _mm256_madd_epi16(
        mins2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.bsums)));

    const __m256i scales = _mm256_broadcastsi128_si256(scm);
    const std::uint8_t* q4 = wb.qs;
    const std::int8_t* q8 = xb.qs;
    __m256i sumi = _mm256_setzero_si256();
    for (int g = 0; g < 4; ++g) {
      // Group g: 32 bytes, sub-block 2g in the low nibbles, 2g+1 in the high ones.
      const __m256i q4bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q4 + 32 * g));
      const __m256i q4l = _mm256_and_si256(q4bits, m4);
      const __m256i q4h = _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4);
      const __m256i q8l = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 64 * g));
      const __m256i q8h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 64 * g + 32));
      const __m256i pl = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, shuf[2 * g]),
                                           _mm256_maddubs_epi16(q4l, q8l));
      const __m256i ph = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, shuf[2 * g + 1]),
                                           _mm256_maddubs_epi16(q4h, q8h));
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(pl, ph));
    }
    acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(dm), _mm256_cvtepi32_ps(sumi), acc);
    acc = _mm256_fnmadd_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dm)), _mm256_cvtepi32_ps(summ), acc);
  }
  return qmv::q4k_x86::hsum(acc);
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q4_K.cpu.avx2_q8k", qmv::WeightType::Q4_K, qmv::ActFormat::Q8_K,
    qmv::run_rows<qmv::BlockQ4K, qmv::BlockQ8K, dot_row>,
    "Q4_K x Q8_K, AVX2 ggml-style: maddubs nibbles x int8, madd with sub-block scales, "
    "mins via bsums, one float accumulator and one horizontal sum per row",
    qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA | qmv::CpuFeature::F16C));
