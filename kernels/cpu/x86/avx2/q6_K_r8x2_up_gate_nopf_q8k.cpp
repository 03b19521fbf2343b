// Q6_K weights in the row-interleaved layout x Q8_K activations, AVX2, on the loop of
// q6_K_r8.h without its software prefetch: the fused FFN up+gate, four weight streams.
#include "q6_K_r8.h"

QMV_REGISTER_KERNEL((qmv::interleave::kquant_r8_up_gate_record<Q6KNoPrefetch, 2>(
    "q6_K.cpu.avx2_r8x2_up_gate_nopf_q8k",
    "fused FFN up+gate (y = W x, y2 = W2 x), Q6_K x Q8_K, AVX2, as avx2_r8x2_up_gate_q8k: two "
    "groups of each matrix per step, four weight streams, no software prefetch")));
