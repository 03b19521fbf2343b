// Q4_K weights in the row-interleaved layout x Q8_K activations, AVX2, on the loop of
// q4_K_r8.h without its software prefetch: one weight stream per thread.
#include "q4_K_r8.h"

QMV_REGISTER_KERNEL((qmv::interleave::kquant_r8_record<Q4KNoPrefetch, 1>(
    "q4_K.cpu.avx2_r8_nopf_q8k",
    "Q4_K x Q8_K, AVX2, eight-row interleaved super-blocks as avx2_r8_q8k, one weight stream per "
    "thread, no software prefetch (the hardware prefetcher alone)")));
