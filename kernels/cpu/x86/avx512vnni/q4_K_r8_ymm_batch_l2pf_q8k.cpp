// Q4_K weights in the row-interleaved layout x 1 to 8 Q8_K activations per call (the
// batch op), AVX-512 VNNI on 256-bit registers as r8_ymm_batch, its prefetches to L2
// (x86.h, PrefetchTo; q4_K_r8.h).
#include "q4_K_r8.h"

namespace {
// Made at compile time, as every record of this folder (q4_K_r8x2_q8k.cpp says why).
constexpr qmv::KernelRecord kBatch = ymm_batch_record<1, qmv::x86::PrefetchTo::L2>(
    "q4_K.cpu.avx512vnni_r8_ymm_batch_l2pf_q8k",
    "Q4_K x 1-8 Q8_K vectors (batch) as avx512vnni_r8_ymm_batch_q8k, its software prefetches "
    "to L2, further ahead: L2's miss buffers keep more of the read in flight while the "
    "vectors' arithmetic runs");
}  // namespace

QMV_REGISTER_KERNEL(kBatch);
