// Q5_K weights x Q8_K activations, AVX-512 VNNI, one row at a time: a sub-block pair
// per 512-bit register, `_mm512_dpbusd_epi32` (u5 x s8), two pairs packed to int16 and
// multiplied by the sub-block scales with madd/dpwssd, mins via bsums
// (q5_K.h). One float accumulator, one horizontal sum per row.
#include "q5_K.h"

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

inline float dot_row(const qmv::BlockQ5K* __restrict w, const qmv::BlockQ8K* __restrict x,
                     std::int64_t n_blocks) {
  const qmv::q5k_vnni::Consts k;
  __m512 acc = _mm512_setzero_ps();
  for (std::int64_t b = 0; b < n_blocks; ++b) {
    const qmv::BlockQ5K& wb = w[b];
    qmv::q5k_x86::prefetch_block<kPrefetchHint>(reinterpret_cast<std::uintptr_t>(&wb) +
                                                kPrefetchBytes);
    const qmv::BlockQ8K& xb = x[b];
    const auto* qx = reinterpret_cast<const __m512i*>(xb.qs);
    acc = qmv::q5k_vnni::superblock(wb, _mm512_loadu_si512(qx), _mm512_loadu_si512(qx + 1),
                                    _mm512_loadu_si512(qx + 2), _mm512_loadu_si512(qx + 3),
                                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.bsums)),
                                    _mm_set1_ps(xb.d), k, acc);
  }
  return qmv::q5k_vnni::hsum(acc);
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
    "q5_K.cpu.avx512vnni_q8k", qmv::WeightType::Q5_K, qmv::ActFormat::Q8_K, run,
    "Q5_K x Q8_K, AVX-512 VNNI, one row: sub-block pair per zmm, dpbusd (u5 x s8), "
    "pairs packed to int16 and scaled by madd/dpwssd, mins via bsums",
    qmv::CpuFeature::AVX512F | qmv::CpuFeature::AVX512BW | qmv::CpuFeature::AVX512VL |
        qmv::CpuFeature::AVX512VNNI | qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA |
        qmv::CpuFeature::F16C));
