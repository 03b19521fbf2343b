// Q4_0 weights in the row-interleaved layout x 1 to 8 Q8_1 activations per call (the
// batch op), AVX-512 VNNI on 256-bit registers as r8x2_ymm_batch, its prefetches to L2
// (x86.h, PrefetchTo; legacy_r8.h).
#include "legacy_r8.h"

namespace {
// Made at compile time, as every record of this folder (q4_K_r8x2_q8k.cpp says why).
constexpr qmv::KernelRecord kBatch = ymm_batch_record<qmv::interleave::BlockQ4_0x8, 2, qmv::x86::PrefetchTo::L2>(
    qmv::WeightType::Q4_0, "q4_0.cpu.avx512vnni_r8x2_ymm_batch_l2pf_q8_1",
    "Q4_0 x 1-8 Q8_1 vectors (batch) as avx512vnni_r8x2_ymm_batch_q8_1, its software prefetches to "
    "L2: L2's miss buffers keep more of the read in flight while the vectors' arithmetic runs");
}  // namespace

QMV_REGISTER_KERNEL(kBatch);
