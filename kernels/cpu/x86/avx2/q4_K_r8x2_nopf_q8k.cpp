// Q4_K weights in the row-interleaved layout x Q8_K activations, AVX2, on the loop of
// q4_K_r8.h without its software prefetch: two weight streams per thread.
#include "q4_K_r8.h"

QMV_REGISTER_KERNEL((qmv::interleave::kquant_r8_record<Q4KNoPrefetch, 2>(
    "q4_K.cpu.avx2_r8x2_nopf_q8k",
    "Q4_K x Q8_K, AVX2, eight-row interleaved super-blocks as avx2_r8x2_q8k, two weight streams "
    "per thread sharing each activation load, no software prefetch (the hardware prefetcher "
    "alone)")));
