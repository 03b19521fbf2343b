// Q8_0 weights in the row-interleaved layout x Q8_1 activations, AVX2, on the loop of
// q8_0_r8.h: four weight streams per thread, the sign-trick path (the int16 one
// for an activation holding -128).
#include "q8_0_r8.h"

QMV_REGISTER_KERNEL(
    (record<4, true>("q8_0.cpu.avx2_r8x4_q8_1",
                     "Q8_0 x Q8_1, AVX2, eight-row interleaved blocks as avx2_r8_q8_1, four weight streams "
                     "per thread, each prefetched a line per chunk: vpmaddubsw of |w| against x * sign(w) (an "
                     "activation holding -128 takes the int16 path)")));
