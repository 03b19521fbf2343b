// Q6_K weights in the row-interleaved layout x 1 to 8 Q8_K activations per call (the
// batch op), AVX2, on the loop of q6_K_r8.h: one weight stream per thread, each triple
// of loads unpacked once for all the vectors.
#include "q6_K_r8.h"

namespace {
// Built at compile time: nothing of this file runs before main.
constexpr qmv::KernelRecord kBatch = qmv::interleave::kquant_r8_batch_record<Q6K>(
    "q6_K.cpu.avx2_r8_batch_q8k",
    "Q6_K x 1-8 Q8_K vectors (batch), AVX2, eight-row interleaved super-blocks as avx2_r8_q8k: each "
    "triple of loads unpacked once, then dotted with every vector");
}  // namespace

QMV_REGISTER_KERNEL(kBatch);
