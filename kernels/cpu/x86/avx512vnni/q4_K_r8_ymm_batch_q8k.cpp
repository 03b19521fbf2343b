// Q4_K weights in the row-interleaved layout x 1 to 8 Q8_K activations per call (the
// batch op), AVX-512 VNNI on 256-bit registers, one weight stream per thread (q4_K_r8.h).
#include "q4_K_r8.h"

namespace {
// Made at compile time, as every record of this folder (q4_K_r8x2_q8k.cpp says why).
constexpr qmv::KernelRecord kBatch = ymm_batch_record<1>(
    "q4_K.cpu.avx512vnni_r8_ymm_batch_q8k",
    "Q4_K x 1-8 Q8_K vectors (batch), AVX-512 VNNI on 256-bit registers, eight-row interleaved "
    "super-blocks as avx2_r8_q8k: each chunk loaded and unpacked once, one vpdpbusd per half and "
    "vector against its quad broadcast from memory, no permute");
}  // namespace

QMV_REGISTER_KERNEL(kBatch);
