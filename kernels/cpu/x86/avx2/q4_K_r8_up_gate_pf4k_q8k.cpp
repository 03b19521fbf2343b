// Fused FFN up+gate of two Q4_K matrices in the row-interleaved layout x Q8_K
// activations, AVX2, on the loop of q4_K_r8.h, each weight stream prefetched far ahead
// (far_prefetch.h).
#include "far_prefetch.h"
#include "q4_K_r8.h"

QMV_REGISTER_KERNEL((qmv::interleave::kquant_r8_up_gate_record<Q4KWithPrefetch<kFarPrefetchBytes>, 1>(
    "q4_K.cpu.avx2_r8_up_gate_pf4k_q8k",
    "fused FFN up+gate (y = W x, y2 = W2 x), Q4_K x Q8_K, AVX2, as avx2_r8_up_gate_q8k: group g of "
    "each matrix per step, two weight streams sharing each activation load, each prefetched 4096 "
    "bytes ahead (not 2048)")));
