// Q6_K weights in the row-interleaved layout x Q8_K activations, AVX2, on the loop of
// q6_K_r8.h: one weight stream per thread.
#include "q6_K_r8.h"

QMV_REGISTER_KERNEL((qmv::interleave::kquant_r8_record<Q6K, 1>(
    "q6_K.cpu.avx2_r8_q8k",
    "Q6_K x Q8_K, AVX2, weights repacked once into eight-row interleaved super-blocks "
    "(whole 6-bit quants, three per four chunks, scales paired): one float lane per row, one weight stream per "
    "thread")));
