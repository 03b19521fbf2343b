// Q6_K weights x Q8_K activations, AVX2, integer dot in the ggml style.
//
// Per half super-block (128 weights: 64 bytes of ql, 32 of qh) four 32-byte vectors of
// unsigned quants q in [0,63] are rebuilt (low or high nibble | two qh bits << 4) and
// multiplied with the int8 activations by _mm256_maddubs_epi16 (u8 x s8, pairs summed
// to int16; |2*63*128| < 2^15, so it never saturates). _mm256_madd_epi16 then applies
// the int8 sub-block scales and sums pairs into int32. The -32 centring is not paid per
// weight: sum_{i in g} (q_i-32)*qx_i = sum q_i*qx_i - 32*bsums[g], so one madd of the
// scales (times -32) with the Q8_K bsums per super-block starts the int32 sum.
// The float scales are applied once per super-block into a __m256 accumulator, and
// each row ends with one horizontal sum. The inner loop walks raw block pointers with
// no per-row set-up beyond the constants; a software prefetch runs kPrefetch
// super-blocks ahead.
//
// Bounds: per super-block |sum| <= 256*63*128*128 + 32*128*16*2048 < 2^31.
#include "q6_K_x86.h"

#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace {

// pshufb control that puts i16 lane m of each 128-bit lane into all eight i16 lanes.
inline __m256i lane_broadcast_ctrl(int m) {
  return _mm256_set1_epi16(static_cast<short>((2 * m) | ((2 * m + 1) << 8)));
}

using qmv::q6k_x86::load;

// int32 partial sums of one half super-block: 64 bytes of ql, 32 of qh, 128 activation
// quants; s0..s3 are the int16 scale vectors of its four 32-weight vectors.
inline __m256i half_dot(const std::uint8_t* ql, const std::uint8_t* qh, const std::int8_t* q8,
                        __m256i s0, __m256i s1, __m256i s2, __m256i s3) {
  __m256i q[4];
  qmv::q6k_x86::unpack_half(ql, qh, q, [](__m256i v) { return v; });
  const __m256i p0 = _mm256_maddubs_epi16(q[0], load(q8));
  const __m256i p1 = _mm256_maddubs_epi16(q[1], load(q8 + 32));
  const __m256i p2 = _mm256_maddubs_epi16(q[2], load(q8 + 64));
  const __m256i p3 = _mm256_maddubs_epi16(q[3], load(q8 + 96));
  return _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(p0, s0), _mm256_madd_epi16(p1, s1)),
                          _mm256_add_epi32(_mm256_madd_epi16(p2, s2), _mm256_madd_epi16(p3, s3)));
}

// Super-blocks ahead that the software prefetch fetches. Rows are contiguous and
// computed in order, so the stream runs on into the next row: w + kPrefetch is always
// what this loop reads next. Without it each new 4 KiB page, where the hardware
// streamer stops, stalls on a demand miss; 8 blocks ahead is the best distance, with
// shorter ones not hiding the miss and longer ones losing again.
constexpr int kPrefetch = 8;

// Constants of the loop, set up once per tile of rows.
struct Consts {
  __m256i neg32 = _mm256_set1_epi16(-32);
  // Scale bytes reordered to even sub-blocks then odd ones: after the int16 widening,
  // 128-bit lane 0 holds the scales of even sub-blocks and lane 1 the odd ones, which
  // is how a 32-weight vector splits (bytes 0-15: sub-block 2k, 16-31: 2k+1).
  __m128i even_odd = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  __m256i sel[8] = {lane_broadcast_ctrl(0), lane_broadcast_ctrl(1), lane_broadcast_ctrl(2),
                    lane_broadcast_ctrl(3), lane_broadcast_ctrl(4), lane_broadcast_ctrl(5),
                    lane_broadcast_ctrl(6), lane_broadcast_ctrl(7)};
};

inline __attribute__((always_inline)) float dot_row(const qmv::BlockQ6K* w, const qmv::BlockQ8K* x,
                                                    const qmv::BlockQ6K* const end,
                                                    const Consts& c) {
  __m256 acc = _mm256_setzero_ps();
  for (; w != end; ++w, ++x) {
    qmv::q6k_x86::prefetch_block(w, kPrefetch);
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w->scales));
    // Centring: -32 * sum_g scale_g * bsums[g] starts the int32 sum.
    __m256i sumi =
        _mm256_madd_epi16(_mm256_mullo_epi16(_mm256_cvtepi8_epi16(sc8), c.neg32), load(x->bsums));
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, c.even_odd));
    sumi = _mm256_add_epi32(
        sumi, half_dot(w->ql, w->qh, x->qs, _mm256_shuffle_epi8(sc, c.sel[0]),
                       _mm256_shuffle_epi8(sc, c.sel[1]), _mm256_shuffle_epi8(sc, c.sel[2]),
                       _mm256_shuffle_epi8(sc, c.sel[3])));
    sumi = _mm256_add_epi32(
        sumi, half_dot(w->ql + 64, w->qh + 32, x->qs + 128, _mm256_shuffle_epi8(sc, c.sel[4]),
                       _mm256_shuffle_epi8(sc, c.sel[5]), _mm256_shuffle_epi8(sc, c.sel[6]),
                       _mm256_shuffle_epi8(sc, c.sel[7])));
    const float dd = _cvtsh_ss(w->d) * x->d;
    acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(sumi), acc);
  }
  return qmv::q6k_x86::hsum(acc);
}

// Rows of a tile walk one block pointer straight through (rows are contiguous), with
// the constants set up once per tile: no per-row work beyond the horizontal sum.
qmv::Status run(const qmv::MatVecArgs& a) {
  const std::int64_t n_blocks = a.shape.cols / qmv::kSuperBlock;
  const auto* w = static_cast<const qmv::BlockQ6K*>(a.w);
  const auto* x = static_cast<const qmv::BlockQ8K*>(a.x);
  qmv::parallel_row_tiles(a.shape.rows, a.threads, [&](std::int64_t r0, std::int64_t r1) {
    const Consts c;
    const qmv::BlockQ6K* row = w + r0 * n_blocks;
    for (float *y = a.y + r0, *const y_end = a.y + r1; y != y_end; ++y, row += n_blocks)
      *y = dot_row(row, x, row + n_blocks, c);
  });
  return qmv::Status::Ok();
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q6_K.cpu.avx2_q8k", qmv::WeightType::Q6_K, qmv::ActFormat::Q8_K, run,
    "Q6_K x Q8_K, AVX2: 6-bit quants rebuilt as u8, maddubs + madd(int8 scales), "
    "-32 centring via bsums once per block, float accumulator, one hsum per row, prefetch",
    qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA | qmv::CpuFeature::F16C));
