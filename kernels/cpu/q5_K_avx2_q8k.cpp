// Q5_K weights x Q8_K activations, AVX2 integer dot in the ggml style. Per pair of
// sub-blocks (32 bytes of qs): the low and high nibbles are the low 4 bits of
// sub-blocks 2g and 2g+1; their fifth bits (bits 2g, 2g+1 of the 32 qh bytes) are
// shifted to bit 4 and or-ed in, giving 32 unsigned 5-bit quants per sub-block.
// `_mm256_maddubs_epi16` (u8 quant x s8 activation, pairs summed to int16) and
// `_mm256_madd_epi16` with the sub-block scale (pairs summed to int32) give the
// scaled sub-block dot; the float scales are applied once per super-block.
#include "q5_K_x86.h"

#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace {

// Software prefetch distance in bytes ahead of the block being read, and level:
// into L2 (T1), as into L1 it evicts the activations on long rows. Without it the
// kernel stays far below the read bandwidth on cold weights; 1 to 3 KB ahead all help.
// One row is a sequential stream and rows are contiguous, so near a row's end this
// fetches the start of the next row.
constexpr std::int64_t kPrefetchBytes = 3072;
constexpr auto kPrefetchHint = _MM_HINT_T1;

// Bit J of every byte of `h` moved to bit 4, other bits cleared. 16-bit shifts by at
// most 4 never carry bit 4 of a byte in from the other byte of the lane.
template <int J>
inline __m256i high_bit_to_4(__m256i h, __m256i m16) {
  if constexpr (J < 4) return _mm256_and_si256(_mm256_slli_epi16(h, 4 - J), m16);
  else if constexpr (J == 4) return _mm256_and_si256(h, m16);
  else return _mm256_and_si256(_mm256_srli_epi16(h, J - 4), m16);
}

// pshufb control that zero-extends byte J (scale J) of each 128-bit lane to all its int16.
template <int J>
inline __m256i scale_shuffle() {
  return _mm256_set1_epi16(static_cast<short>(0x8000 | J));
}

// Sub-blocks 2G and 2G+1: sumi += sc_2G*dot(q_2G, qx_2G) + sc_2G+1*dot(q_2G+1, qx_2G+1).
template <int G>
inline __m256i pair_dot(const std::uint8_t* qs, const std::int8_t* qx, __m256i hbits,
                        __m256i scales, __m256i m4, __m256i m16, __m256i sumi) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * G));
  const __m256i q0 = _mm256_or_si256(_mm256_and_si256(bits, m4),
                                     high_bit_to_4<2 * G>(hbits, m16));
  const __m256i q1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4),
                                     high_bit_to_4<2 * G + 1>(hbits, m16));
  const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + 64 * G));
  const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx + 64 * G + 32));
  // |q*qx + q*qx| <= 2*31*128 < 32767: maddubs cannot saturate.
  const __m256i p0 = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, scale_shuffle<2 * G>()),
                                       _mm256_maddubs_epi16(q0, x0));
  const __m256i p1 = _mm256_madd_epi16(_mm256_shuffle_epi8(scales, scale_shuffle<2 * G + 1>()),
                                       _mm256_maddubs_epi16(q1, x1));
  return _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
}

// One row: float accumulation across super-blocks in one __m256 (scaled dots added,
// min terms subtracted), one horizontal sum at the end.
inline float dot_row(const qmv::BlockQ5K* __restrict w, const qmv::BlockQ8K* __restrict x,
                     std::int64_t n_blocks) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m16 = _mm256_set1_epi8(0x10);
  const __m256i min_pairs = qmv::q5k_x86::min_pair_control();
  const __m256i lane1 = _mm256_set1_epi32(1);
  __m256 acc = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < n_blocks; ++b) {
    const qmv::BlockQ5K& wb = w[b];
    qmv::q5k_x86::prefetch_block<kPrefetchHint>(reinterpret_cast<std::uintptr_t>(&wb) +
                                                kPrefetchBytes);
    const qmv::BlockQ8K& xb = x[b];
    const __m128i head = qmv::q5k_x86::load_head(wb);
    // d*d_x, dmin*d_x (lanes 0, 1).
    const __m128 dd = _mm_mul_ps(qmv::q5k_x86::d_dmin(wb), _mm_set1_ps(xb.d));
    // Scales (bytes 0..7) and mins (8..15) of the block in both 128-bit lanes.
    const __m256i scales = _mm256_broadcastsi128_si256(qmv::q5k_x86::unpack_scales_mins(head));
    // Min term: dmin*d_x*m_j*(bsums[2j]+bsums[2j+1]) off the accumulator.
    const __m256i prod_m = qmv::q5k_x86::min_sums(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.bsums)), scales, min_pairs);
    acc = _mm256_fnmadd_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(dd), lane1),
                           _mm256_cvtepi32_ps(prod_m), acc);

    const __m256i hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qh));
    __m256i sumi = _mm256_setzero_si256();
    sumi = pair_dot<0>(wb.qs, xb.qs, hbits, scales, m4, m16, sumi);
    sumi = pair_dot<1>(wb.qs, xb.qs, hbits, scales, m4, m16, sumi);
    sumi = pair_dot<2>(wb.qs, xb.qs, hbits, scales, m4, m16, sumi);
    sumi = pair_dot<3>(wb.qs, xb.qs, hbits, scales, m4, m16, sumi);
    acc = _mm256_fmadd_ps(_mm256_broadcastss_ps(dd), _mm256_cvtepi32_ps(sumi), acc);
  }
  return qmv::q5k_x86::hsum(acc);
}

qmv::Status run(const qmv::MatVecArgs& a) {
  const std::int64_t n_blocks = a.shape.cols / qmv::kSuperBlock;
  const auto* w = static_cast<const qmv::BlockQ5K*>(a.w);
  const auto* x = static_cast<const qmv::BlockQ8K*>(a.x);
  float* y = a.y;
  qmv::parallel_row_tiles(a.shape.rows, a.threads, [=](std::int64_t r0, std::int64_t r1) {
    const qmv::BlockQ5K* row = w + r0 * n_blocks;
    for (std::int64_t r = r0; r < r1; ++r, row += n_blocks) y[r] = dot_row(row, x, n_blocks);
  });
  return qmv::Status::Ok();
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q5_K.cpu.avx2_q8k", qmv::WeightType::Q5_K, qmv::ActFormat::Q8_K, run,
    "Q5_K x Q8_K, AVX2: 5-bit quants (nibble + 16*qh bit), maddubs + madd by sub-block "
    "scale, mins via bsums, one horizontal sum per row",
    qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA | qmv::CpuFeature::F16C));
