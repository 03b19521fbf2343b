// Q5_K weights in the row-interleaved layout x Q8_K activations, AVX2, on the loop of
// q5_K_r8.h: the fused FFN up+gate, two weight streams.
#include "q5_K_r8.h"

QMV_REGISTER_KERNEL((qmv::interleave::kquant_r8_up_gate_record<Q5K, 1>(
    "q5_K.cpu.avx2_r8_up_gate_q8k",
    "fused FFN up+gate (y = W x, y2 = W2 x), Q5_K x Q8_K, AVX2, both matrices repacked once into "
    "eight-row interleaved super-blocks: group g of each per step, two weight streams sharing "
    "each activation load, both outputs in one parallel region")));
