// Q4_K weights in the row-interleaved layout x Q8_K activations, AVX2, on the loop of
// q4_K_r8.h without its software prefetch: the fused FFN up+gate, four weight streams.
#include "q4_K_r8.h"

QMV_REGISTER_KERNEL((qmv::interleave::kquant_r8_up_gate_record<Q4KNoPrefetch, 2>(
    "q4_K.cpu.avx2_r8x2_up_gate_nopf_q8k",
    "fused FFN up+gate (y = W x, y2 = W2 x), Q4_K x Q8_K, AVX2, as avx2_r8x2_up_gate_q8k: two "
    "groups of each matrix per step, four weight streams sharing each activation load, no "
    "software prefetch")));
