// Q5_0 weights x f32 activations, AVX2 + FMA + F16C. Per block of 32 the quants are
// decoded in registers to int8 (nibbles plus the fifth bits from qh, centred, q - 16), widened to float in four groups of eight and
// FMA'd against the activations; the block's eight partial sums are scaled by d with
// one FMA into the row's accumulator. One horizontal sum per row.
#include "legacy_quants_x86.h"

#include <cstdint>

#include "kernel.h"

namespace {

namespace lx = qmv::legacy_x86;

float dot_row(const qmv::BlockQ5_0* blocks, const float* x, std::int64_t n_blocks) {
  __m256 acc = _mm256_setzero_ps();
  for (std::int64_t b = 0; b < n_blocks; ++b) {
    const qmv::BlockQ5_0& blk = blocks[b];
    lx::prefetch_ahead(&blk);
    const lx::Quants32 q = lx::centred(lx::unpack_nibbles(blk.qs) | lx::fifth_bits(blk.qh), 16);
    acc = _mm256_fmadd_ps(lx::dot32(q, x + b * qmv::kLegacyBlock), lx::broadcast_fp16(blk.d), acc);
  }
  return qmv::x86::hsum(acc);
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q5_0.cpu.avx2_f32", qmv::WeightType::Q5_0, qmv::ActFormat::F32,
    qmv::run_rows<qmv::BlockQ5_0, float, dot_row>,
    "Q5_0 x f32, AVX2+FMA: nibbles + qh bits -> int8 -> float in registers, FMA, d per block",
    qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA | qmv::CpuFeature::F16C));
