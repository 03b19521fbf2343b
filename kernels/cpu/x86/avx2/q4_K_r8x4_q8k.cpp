// Q4_K weights in the row-interleaved layout x Q8_K activations, AVX2, on the loop of
// q4_K_r8.h: four weight streams per thread.
#include "q4_K_r8.h"

// Four streams per thread keep more misses in flight than two
// (results/intel-xeon-2c/r8x4-prefetch.csv, results/amd-zen3-2c/q4_K-r8x4.csv).
QMV_REGISTER_KERNEL((qmv::interleave::kquant_r8_record<Q4K, 4>(
    "q4_K.cpu.avx2_r8x4_q8k",
    "Q4_K x Q8_K, AVX2, eight-row interleaved super-blocks as avx2_r8_q8k, four weight "
    "streams per thread (the four quarters of its rows) sharing each activation load")));
