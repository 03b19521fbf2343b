// Q8_0 weights in the row-interleaved layout x Q8_1 activations, AVX2, on the loop of
// q8_0_r8.h: two weight streams per thread, the int16 path.
#include "q8_0_r8.h"

QMV_REGISTER_KERNEL(record<2>("q8_0.cpu.avx2_r8x2_q8_1",
                              "Q8_0 x Q8_1, AVX2, eight-row interleaved blocks as avx2_r8_q8_1, two weight streams "
                              "per thread (the two halves of its rows) sharing each activation load"));
