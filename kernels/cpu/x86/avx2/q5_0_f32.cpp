// Q5_0 weights x f32 activations, AVX2 + FMA + F16C. Per block of 32 the quants are
// decoded in registers to int8 (nibbles plus the fifth bits from qh, centred, q - 16), widened to float in four groups of eight and
// FMA'd against the activations; the block's eight partial sums are scaled by d with
// one FMA into the row's accumulator. One horizontal sum per row.
#include "legacy_f32.h"

#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace {

namespace lx = qmv::legacy_x86;

lx::Quants32 decode(const qmv::BlockQ5_0& blk) {
  return lx::centred(lx::unpack_nibbles(blk.qs) | lx::fifth_bits(blk.qh), 16);
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q5_0.cpu.avx2_f32", qmv::WeightType::Q5_0, qmv::ActFormat::F32,
    qmv::run_rows<qmv::BlockQ5_0, float, lx::dot_row_symmetric<qmv::BlockQ5_0, decode>>,
    "Q5_0 x f32, AVX2+FMA: nibbles + qh bits -> int8 -> float in registers, FMA, d per block",
    qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA | qmv::CpuFeature::F16C));
