// Q4_1 weights x f32 activations, AVX2 + FMA + F16C. With w = d*q + m, a block's dot is
// d * sum(q*x) + m * sum(x). Per block of 32 the quants are decoded in registers to
// int8 (the nibbles, split), widened to float in four groups of eight and FMA'd against the
// activations, then scaled by d with one FMA; the offset term is one more FMA with
// the block's sums of x, computed once per call (they do not depend on the row).
// One horizontal sum per row.
#include "legacy_quants_x86.h"

#include <cstdint>

#include "kernel.h"

namespace {

namespace lx = qmv::legacy_x86;

// x_sums: eight lanes per block summing to the block's sum of x.
float dot_row(const qmv::BlockQ4_1* blocks, const float* x, const float* x_sums, std::int64_t n_blocks) {
  __m256 acc = _mm256_setzero_ps();
  __m256 acc_offset = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < n_blocks; ++b) {
    const qmv::BlockQ4_1& blk = blocks[b];
    lx::prefetch_ahead(&blk);
    const lx::Quants32 q = lx::unpack_nibbles(blk.qs);
    acc = _mm256_fmadd_ps(lx::dot32(q, x + b * qmv::kLegacyBlock), lx::broadcast_fp16(blk.d), acc);
    acc_offset = _mm256_fmadd_ps(_mm256_load_ps(x_sums + 8 * b), lx::broadcast_fp16(blk.m), acc_offset);
  }
  return qmv::x86::hsum(_mm256_add_ps(acc, acc_offset));
}

qmv::Status run(const qmv::MatVecArgs& a) {
  const std::int64_t n_blocks = a.shape.cols / qmv::kLegacyBlock;
  const auto* w = static_cast<const qmv::BlockQ4_1*>(a.w);
  const auto* x = static_cast<const float*>(a.x);
  auto* x_sums = static_cast<float*>(
      qmv::thread_scratch(static_cast<std::size_t>(n_blocks) * 8 * sizeof(float)));
  lx::block_sums_of_x(x, n_blocks, x_sums);
  qmv::parallel_row_tiles(a.shape.rows, a.threads, [&](std::int64_t r0, std::int64_t r1) {
    for (std::int64_t r = r0; r < r1; ++r) a.y[r] = dot_row(w + r * n_blocks, x, x_sums, n_blocks);
  });
  return qmv::Status::Ok();
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q4_1.cpu.avx2_f32", qmv::WeightType::Q4_1, qmv::ActFormat::F32, run,
    "Q4_1 x f32, AVX2+FMA: nibbles -> int8 -> float in registers, FMA, d and m per block (per-call sums of x)",
    qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA | qmv::CpuFeature::F16C));
