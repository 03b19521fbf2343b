// Q5_K weights x Q8_K activations, AVX-512 VNNI, four rows at a time: the activation
// loads of each super-block (256 quants, bsums, scale) are shared by four rows, and
// every row's super-block kPrefetchBlocks ahead is prefetched (past the row's end,
// the same column of the row four further on, which the next group reads first).
// The per-row arithmetic is that of q5_K.cpu.avx512vnni_q8k (q5_K.h):
// a sub-block pair per 512-bit register, `_mm512_dpbusd_epi32` (u5 x s8), two pairs
// packed to int16 and multiplied by the sub-block scales with madd/dpwssd, mins via
// bsums.
#include "q5_K.h"

#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace {

// Software prefetch distance in super-blocks, per row, into L1 (into L2 made no clear
// difference). Without it the four streams stay well below a plain read on cold
// weights; the wrap to row r+4 past a row's end matters as much as the distance, and
// 4 to 16 blocks ahead are close, 8 the best.
constexpr std::int64_t kPrefetchBlocks = 8;

// NR (1..4) consecutive rows starting at w (stride n_blocks) into y[0..NR).
template <int NR>
inline void dot_rows(const qmv::BlockQ5K* __restrict w, const qmv::BlockQ8K* __restrict x,
                     std::int64_t n_blocks, float* __restrict y) {
  const qmv::q5k_vnni::Consts k;
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
      qmv::q5k_x86::prefetch_block<_MM_HINT_T0>(
          pf + static_cast<std::uintptr_t>(r * n_blocks) * sizeof(qmv::BlockQ5K));
      acc[r] = qmv::q5k_vnni::superblock(w[r * n_blocks + b], qx0, qx1, qx2, qx3, bsums, xd, k,
                                         acc[r]);
    }
  }
  for (int r = 0; r < NR; ++r) y[r] = qmv::q5k_vnni::hsum(acc[r]);
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
    "q5_K.cpu.avx512vnni_x4_q8k", qmv::WeightType::Q5_K, qmv::ActFormat::Q8_K, run,
    "Q5_K x Q8_K, AVX-512 VNNI, four rows share each activation load, software "
    "prefetch; dpbusd (u5 x s8), pairs packed to int16 and scaled by madd/dpwssd",
    qmv::CpuFeature::AVX512F | qmv::CpuFeature::AVX512BW | qmv::CpuFeature::AVX512VL |
        qmv::CpuFeature::AVX512VNNI | qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA |
        qmv::CpuFeature::F16C));
