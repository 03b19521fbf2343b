// Q8_0 weights x f32 activations, AVX2 + FMA + F16C. Per block of 32 the quants are
// decoded in registers to int8 (a plain load), widened to float in four groups of eight and
// FMA'd against the activations; the block's eight partial sums are scaled by d with
// one FMA into the row's accumulator. One horizontal sum per row.
#include "legacy_f32.h"

#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace {

namespace lx = qmv::legacy_x86;

lx::Quants32 decode(const qmv::BlockQ8_0& blk) { return lx::load_int8(blk.qs); }

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q8_0.cpu.avx2_f32", qmv::WeightType::Q8_0, qmv::ActFormat::F32,
    qmv::run_rows<qmv::BlockQ8_0, float, lx::dot_row_symmetric<qmv::BlockQ8_0, decode>>,
    "Q8_0 x f32, AVX2+FMA: int8 -> float in registers, FMA, d per block",
    qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA | qmv::CpuFeature::F16C));
