// Q8_0 weights in the row-interleaved layout x Q8_1 activations, AVX2, on the loop of
// q8_0_r8.h: one weight stream per thread, the int16 path.
#include "q8_0_r8.h"

QMV_REGISTER_KERNEL(record<1>("q8_0.cpu.avx2_r8_q8_1",
                              "Q8_0 x Q8_1, AVX2, weights repacked once into eight-row interleaved blocks: int16 "
                              "vpmaddwd, one float lane per row, one weight stream per thread"));
