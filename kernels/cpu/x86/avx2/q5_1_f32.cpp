// Q5_1 weights x f32 activations, AVX2 + FMA + F16C. With w = d*q + m, a block's dot is
// d * sum(q*x) + m * sum(x). Per block of 32 the quants are decoded in registers to
// int8 (nibbles plus the fifth bits from qh), widened to float in four groups of eight and FMA'd against the
// activations, then scaled by d with one FMA; the offset term is one more FMA with
// the block's sums of x, computed once per call (they do not depend on the row).
// One horizontal sum per row.
#include "legacy_f32.h"

#include <cstdint>

#include "kernel.h"

namespace {

namespace lx = qmv::legacy_x86;

lx::Quants32 decode(const qmv::BlockQ5_1& blk) { return lx::unpack_nibbles(blk.qs) | lx::fifth_bits(blk.qh); }

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q5_1.cpu.avx2_f32", qmv::WeightType::Q5_1, qmv::ActFormat::F32,
    lx::run_with_offset<qmv::BlockQ5_1, decode>,
    "Q5_1 x f32, AVX2+FMA: nibbles + qh bits -> int8 -> float in registers, FMA, d and m per block (per-call sums of x)",
    qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA | qmv::CpuFeature::F16C));
