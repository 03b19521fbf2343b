// Q6_K weights in the row-interleaved layout x Q8_K activations, AVX2, on the loop of
// q6_K_r8.h: two weight streams per thread, each prefetched far ahead (far_prefetch.h).
#include "far_prefetch.h"
#include "q6_K_r8.h"

QMV_REGISTER_KERNEL((qmv::interleave::kquant_r8_record<Q6KWithPrefetch<kFarPrefetchBytes>, 2>(
    "q6_K.cpu.avx2_r8x2_pf4k_q8k",
    "Q6_K x Q8_K, AVX2, eight-row interleaved super-blocks as avx2_r8x2_q8k, two weight streams "
    "per thread sharing each activation load, each prefetched 4096 bytes ahead (not 2048): more "
    "bytes in flight where a core has a path to memory of its own")));
