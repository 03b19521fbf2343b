// Q4_K weights x f32 activations, AVX2 + FMA. The weights are dequantized on the fly
// in registers: 8 packed bytes -> 8 int32 (vpmovzxbd), low nibbles by a mask and high
// nibbles by a shift (16 weights), converted to float and FMA'd against the float
// activations. Per sub-block the eight-lane partial sum of q*x is multiplied by
// d*scale_j (broadcast from a small stack array, so the broadcasts are plain loads).
// The min term dmin*sum_j m_j*sum(x_j) uses the per-sub-block sums of x, computed once
// per call (they do not depend on the row): one FMA per super-block. One horizontal
// sum per row. The weight stream is prefetched kPrefetchBlocks super-blocks ahead.
#include "kernels/cpu/x86/q4_K.h"

#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace {

// In super-blocks (144 bytes). The hardware prefetchers alone leave a single weight
// stream far below the read bandwidth, so a software prefetch pays off markedly on
// cold weights; 8 to 32 blocks ahead are close, 16 the best of them.
constexpr int kPrefetchBlocks = 16;

// One row. xsum holds sum(x) of each sub-block of 32 (8 per super-block).
float dot_row(const qmv::BlockQ4K* blocks, const float* x, const float* xsum, std::int64_t nb) {
  const __m256i m4 = _mm256_set1_epi32(0xF);
  __m256 acc = _mm256_setzero_ps();
  __m256 acc_min = _mm256_setzero_ps();
  alignas(32) float dsc[8];
  for (std::int64_t b = 0; b < nb; ++b) {
    qmv::q4k_x86::prefetch_block(reinterpret_cast<std::uintptr_t>(blocks + b) +
                                 kPrefetchBlocks * sizeof(qmv::BlockQ4K));
    const qmv::BlockQ4K& blk = blocks[b];
    const __m128i head = qmv::q4k_x86::load_head(blk);
    const __m128i scm = qmv::q4k_x86::unpack_scales_mins(head);  // scales, then mins
    const __m128 dm = qmv::q4k_x86::d_dmin(head);
    const __m256 vd = _mm256_broadcastss_ps(dm);
    const __m256 vdmin = _mm256_broadcastss_ps(_mm_movehdup_ps(dm));
    _mm256_store_ps(dsc, _mm256_mul_ps(vd, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(scm))));
    const __m256 mins = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(scm, scm)));
    acc_min = _mm256_fmadd_ps(_mm256_mul_ps(vdmin, mins), _mm256_loadu_ps(xsum + 8 * b), acc_min);

    const float* xb = x + b * qmv::kSuperBlock;
    for (int g = 0; g < 4; ++g) {
      const std::uint8_t* q = blk.qs + 32 * g;
      const float* xl = xb + 64 * g;  // sub-block 2g (low nibbles)
      const float* xh = xl + 32;      // sub-block 2g+1 (high nibbles)
      __m256 tl, th;
      {
        const __m256i w = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)));
        tl = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(w, m4)), _mm256_loadu_ps(xl));
        th = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(w, 4)), _mm256_loadu_ps(xh));
      }
      for (int k = 1; k < 4; ++k) {
        const __m256i w =
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8 * k)));
        tl = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_and_si256(w, m4)), _mm256_loadu_ps(xl + 8 * k), tl);
        th = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(w, 4)), _mm256_loadu_ps(xh + 8 * k), th);
      }
      acc = _mm256_fmadd_ps(tl, _mm256_broadcast_ss(dsc + 2 * g), acc);
      acc = _mm256_fmadd_ps(th, _mm256_broadcast_ss(dsc + 2 * g + 1), acc);
    }
  }
  return qmv::q4k_x86::hsum(_mm256_sub_ps(acc, acc_min));
}

qmv::Status run(const qmv::MatVecArgs& a) {
  const std::int64_t nb = a.shape.cols / qmv::kSuperBlock;
  const auto* w = static_cast<const qmv::BlockQ4K*>(a.w);
  const auto* x = static_cast<const float*>(a.x);
  // Sums of x per sub-block of 32: shared by every row, so computed once per call
  // (into a buffer of the calling thread, reused across calls).
  auto* xsum = static_cast<float*>(qmv::thread_scratch(static_cast<std::size_t>(nb) * 8 * sizeof(float)));
  for (std::int64_t s = 0; s < nb * 8; ++s) {
    const float* xs = x + 32 * s;
    const __m256 v = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(xs), _mm256_loadu_ps(xs + 8)),
                                   _mm256_add_ps(_mm256_loadu_ps(xs + 16), _mm256_loadu_ps(xs + 24)));
    xsum[s] = qmv::q4k_x86::hsum(v);
  }
  qmv::parallel_row_tiles(a.shape.rows, a.threads, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) a.y[r] = dot_row(w + r * nb, x, xsum, nb);
  });
  return qmv::Status::Ok();
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q4_K.cpu.avx2_f32", qmv::WeightType::Q4_K, qmv::ActFormat::F32, run,
    "Q4_K x f32, AVX2+FMA: nibbles -> int32 -> float in registers, FMA per sub-block, "
    "mins via per-call sub-block sums of x",
    qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA | qmv::CpuFeature::F16C));
