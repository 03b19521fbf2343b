// Q5_K weights x f32 activations, AVX2 + FMA. Per super-block the 256 five-bit quants
// are assembled 32 at a time in registers (nibble | qh bit << 4, as in the integer
// kernels), zero-extended to 16 bits and stored to a 512-byte stack buffer, where
// each 16-bit q is the bit pattern of the fp16 subnormal q*2^-24: vcvtph2ps reads 8
// at a time and converts them exactly, with no shuffle (the register-only widening,
// vpmovzxbd + vcvtdq2ps, was shuffle-port bound and slower). They are FMA'd
// against the float activations; each sub-block's dot is scaled once by
// 2^24*d*sc_j, and the min term of the super-block is one FMA of dmin*m_j against
// the sub-block sums of x, computed once per call. One horizontal sum per row.
//
// Range: the products q*2^-24*x underflow to subnormals only for |x| < ~1e-31.
#include "kernels/cpu/x86/q5_K.h"

#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace {

// Software prefetch distance in bytes ahead of the block being read, and level:
// into L1 (T0); this kernel is bound by arithmetic more than by memory, so neither
// the distance (1-4 KB) nor the level changed its time much.
// One row is a sequential stream and rows are contiguous, so near a row's end this
// fetches the start of the next row.
constexpr std::int64_t kPrefetchBytes = 2048;
constexpr auto kPrefetchHint = _MM_HINT_T0;

// Fifth bits by table: `h_lo`/`h_hi` hold the low/high nibble of every qh byte, and
// the pshufb table for sub-block J maps a nibble n to ((n >> (J % 4)) & 1) << 4.
template <int J>
inline __m256i high_bit_to_4(__m256i h_lo, __m256i h_hi) {
  constexpr int k = J % 4;
  const __m256i table = _mm256_setr_epi8(
      ((0 >> k) & 1) << 4, ((1 >> k) & 1) << 4, ((2 >> k) & 1) << 4, ((3 >> k) & 1) << 4,
      ((4 >> k) & 1) << 4, ((5 >> k) & 1) << 4, ((6 >> k) & 1) << 4, ((7 >> k) & 1) << 4,
      ((8 >> k) & 1) << 4, ((9 >> k) & 1) << 4, ((10 >> k) & 1) << 4, ((11 >> k) & 1) << 4,
      ((12 >> k) & 1) << 4, ((13 >> k) & 1) << 4, ((14 >> k) & 1) << 4, ((15 >> k) & 1) << 4,
      ((0 >> k) & 1) << 4, ((1 >> k) & 1) << 4, ((2 >> k) & 1) << 4, ((3 >> k) & 1) << 4,
      ((4 >> k) & 1) << 4, ((5 >> k) & 1) << 4, ((6 >> k) & 1) << 4, ((7 >> k) & 1) << 4,
      ((8 >> k) & 1) << 4, ((9 >> k) & 1) << 4, ((10 >> k) & 1) << 4, ((11 >> k) & 1) << 4,
      ((12 >> k) & 1) << 4, ((13 >> k) & 1) << 4, ((14 >> k) & 1) << 4, ((15 >> k) & 1) << 4);
  return _mm256_shuffle_epi8(table, J < 4 ? h_lo : h_hi);
}

// Quants of sub-blocks 2G (low nibbles) and 2G+1 (high nibbles), zero-extended to 16
// bits, into q[64G .. 64G+63]. Per sub-block, unpacklo/hi_epi8 leave its weights
// in the order 0..7, 16..23 | 8..15, 24..31 (in-lane interleave), which the dot loop
// follows when it loads x.
template <int G>
inline void unpack_pair(const qmv::BlockQ5K& wb, __m256i h_lo, __m256i h_hi, __m256i m4,
                        std::uint16_t* q) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qs + 32 * G));
  const __m256i q0 = _mm256_or_si256(_mm256_and_si256(bits, m4),
                                     high_bit_to_4<2 * G>(h_lo, h_hi));
  const __m256i q1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4),
                                     high_bit_to_4<2 * G + 1>(h_lo, h_hi));
  const __m256i zero = _mm256_setzero_si256();
  auto* out = reinterpret_cast<__m256i*>(q + 64 * G);
  _mm256_store_si256(out + 0, _mm256_unpacklo_epi8(q0, zero));
  _mm256_store_si256(out + 1, _mm256_unpackhi_epi8(q0, zero));
  _mm256_store_si256(out + 2, _mm256_unpacklo_epi8(q1, zero));
  _mm256_store_si256(out + 3, _mm256_unpackhi_epi8(q1, zero));
}

// 8 quants as floats, scaled by 2^-24: a 16-bit q (0..31) is the bit pattern of the
// fp16 subnormal q*2^-24, which vcvtph2ps converts exactly (from memory: no shuffle).
inline __m256 quants8(const std::uint16_t* q) {
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(q)));
}

// One row; x_sums holds the sum of each 32-value sub-block of x (8 per super-block).
inline float dot_row(const qmv::BlockQ5K* __restrict w, const float* __restrict x,
                     const float* __restrict x_sums, std::int64_t n_blocks) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m128 two24 = _mm_setr_ps(16777216.0f, 1.0f, 0.0f, 0.0f);  // undo the 2^-24 on d
  const __m256i lane1 = _mm256_set1_epi32(1);
  alignas(32) std::uint16_t q[qmv::kSuperBlock];
  alignas(32) float dsc[8];
  __m256 acc = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < n_blocks; ++b) {
    const qmv::BlockQ5K& wb = w[b];
    qmv::q5k_x86::prefetch_block<kPrefetchHint>(reinterpret_cast<std::uintptr_t>(&wb) +
                                                kPrefetchBytes);
    const float* xb = x + b * qmv::kSuperBlock;
    const __m128i head = qmv::q5k_x86::load_head(wb);
    // 2^24*d, dmin (lanes 0, 1).
    const __m128 dd = _mm_mul_ps(qmv::q5k_x86::d_dmin(wb), two24);
    const __m128i sm = qmv::q5k_x86::unpack_scales_mins(head);
    const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(sm));
    const __m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(sm, sm)));
    _mm256_store_ps(dsc, _mm256_mul_ps(_mm256_broadcastss_ps(dd), sc));
    acc = _mm256_fnmadd_ps(
        _mm256_mul_ps(_mm256_permutevar8x32_ps(_mm256_castps128_ps256(dd), lane1), mn),
        _mm256_loadu_ps(x_sums + 8 * b), acc);

    const __m256i hbits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb.qh));
    const __m256i h_lo = _mm256_and_si256(hbits, m4);
    const __m256i h_hi = _mm256_and_si256(_mm256_srli_epi16(hbits, 4), m4);
    unpack_pair<0>(wb, h_lo, h_hi, m4, q);
    unpack_pair<1>(wb, h_lo, h_hi, m4, q);
    unpack_pair<2>(wb, h_lo, h_hi, m4, q);
    unpack_pair<3>(wb, h_lo, h_hi, m4, q);
    // Keep q in memory: the conversions must read it there (GCC would otherwise turn
    // the store and reloads into register shuffles).
    asm volatile("" : : "r"(q) : "memory");

#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const std::uint16_t* qj = q + 32 * j;
      const float* xj = xb + 32 * j;
      __m256 s = _mm256_mul_ps(quants8(qj), _mm256_loadu_ps(xj));
      s = _mm256_fmadd_ps(quants8(qj + 8), _mm256_loadu_ps(xj + 16), s);
      s = _mm256_fmadd_ps(quants8(qj + 16), _mm256_loadu_ps(xj + 8), s);
      s = _mm256_fmadd_ps(quants8(qj + 24), _mm256_loadu_ps(xj + 24), s);
      acc = _mm256_fmadd_ps(_mm256_broadcast_ss(dsc + j), s, acc);
    }
  }
  return qmv::q5k_x86::hsum(acc);
}

qmv::Status run(const qmv::MatVecArgs& a) {
  const std::int64_t n_blocks = a.shape.cols / qmv::kSuperBlock;
  const auto* w = static_cast<const qmv::BlockQ5K*>(a.w);
  const auto* x = static_cast<const float*>(a.x);
  float* y = a.y;
  // Sums of x per 32-value sub-block, once per call, shared by every row.
  const std::int64_t n_sums = a.shape.cols / 32;
  auto* x_sums = static_cast<float*>(qmv::thread_scratch(static_cast<std::size_t>(n_sums) * sizeof(float)));
  for (std::int64_t k = 0; k < n_sums; ++k) {
    const float* xk = x + 32 * k;
    const __m256 s =
        _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(xk), _mm256_loadu_ps(xk + 8)),
                      _mm256_add_ps(_mm256_loadu_ps(xk + 16), _mm256_loadu_ps(xk + 24)));
    x_sums[k] = qmv::q5k_x86::hsum(s);
  }
  const float* xs = x_sums;
  qmv::parallel_row_tiles(a.shape.rows, a.threads, [=](std::int64_t r0, std::int64_t r1) {
    const qmv::BlockQ5K* row = w + r0 * n_blocks;
    for (std::int64_t r = r0; r < r1; ++r, row += n_blocks) y[r] = dot_row(row, x, xs, n_blocks);
  });
  return qmv::Status::Ok();
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q5_K.cpu.avx2_f32", qmv::WeightType::Q5_K, qmv::ActFormat::F32, run,
    "Q5_K x f32, AVX2+FMA: 5-bit quants built in registers, to float via fp16 "
    "subnormals (vcvtph2ps), FMA; d*sc per sub-block, mins via per-call sums of x",
    qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA | qmv::CpuFeature::F16C));
