// Q5_K weights in the row-interleaved layout x Q8_K activations, AVX2, on the loop of
// q5_K_r8.h: four weight streams per thread.
#include "q5_K_r8.h"

// Four streams: more than the 16 registers hold, so part of their state goes through
// the stack; the extra misses in flight outweigh that (results/intel-xeon-2c/r8x4-prefetch.csv).
QMV_REGISTER_KERNEL((qmv::interleave::kquant_r8_record<Q5K, 4>(
    "q5_K.cpu.avx2_r8x4_q8k",
    "Q5_K x Q8_K, AVX2, eight-row interleaved super-blocks as avx2_r8_q8k, four prefetched weight "
    "streams per thread (the four quarters of its rows) sharing each activation load")));
