// Q4_K weights in the row-interleaved layout x 1 to 8 Q8_K activations per call (the
// batch op), AVX2, as r8_batch with its prefetches to L2 (x86.h, PrefetchTo;
// q4_K_r8.h).
#include "q4_K_r8.h"

namespace {
// Built at compile time: nothing of this file runs before main.
constexpr qmv::KernelRecord kBatch = qmv::interleave::kquant_r8_batch_record<Q4KBatchL2>(
    "q4_K.cpu.avx2_r8_batch_l2pf_q8k",
    "Q4_K x 1-8 Q8_K vectors (batch) as avx2_r8_batch_q8k, its software prefetches to L2, "
    "further ahead: L2's miss buffers keep more of the read in flight while the vectors' "
    "arithmetic runs");
}  // namespace

QMV_REGISTER_KERNEL(kBatch);
