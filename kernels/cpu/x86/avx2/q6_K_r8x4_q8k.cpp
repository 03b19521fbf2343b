// Q6_K weights in the row-interleaved layout x Q8_K activations, AVX2, on the loop of
// q6_K_r8.h: four weight streams per thread.
#include "q6_K_r8.h"

// Four streams, one after another through each super-block as two are. Q6_K's
// arithmetic runs closest to the read rate, so more misses in flight gain it least of
// the types (results/intel-xeon-2c/r8x4-prefetch.csv).
QMV_REGISTER_KERNEL((qmv::interleave::kquant_r8_record<Q6K, 4>(
    "q6_K.cpu.avx2_r8x4_q8k",
    "Q6_K x Q8_K, AVX2, eight-row interleaved super-blocks as avx2_r8_q8k, four prefetched weight "
    "streams per thread (the four quarters of its rows)")));
