// Q5_K weights in the row-interleaved layout x Q8_K activations, AVX2, on the loop of
// q5_K_r8.h: one weight stream per thread.
#include "q5_K_r8.h"

QMV_REGISTER_KERNEL((qmv::interleave::kquant_r8_record<Q5K, 1>(
    "q5_K.cpu.avx2_r8_q8k",
    "Q5_K x Q8_K, AVX2, weights repacked once into eight-row interleaved super-blocks "
    "(scales and mins a byte each, low weights whole in a byte): one float lane per row, "
    "one weight stream per thread")));
