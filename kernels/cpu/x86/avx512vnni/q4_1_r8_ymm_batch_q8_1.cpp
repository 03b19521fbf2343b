// Q4_1 weights in the row-interleaved layout x 1 to 8 Q8_1 activations per call (the
// batch op), AVX-512 VNNI on 256-bit registers, one weight stream per thread (legacy_r8.h).
#include "legacy_r8.h"

namespace {
// Made at compile time, as every record of this folder (q4_K_r8x2_q8k.cpp says why).
constexpr qmv::KernelRecord kBatch = ymm_batch_record<qmv::interleave::BlockQ4_1x8, 1>(
    qmv::WeightType::Q4_1, "q4_1.cpu.avx512vnni_r8_ymm_batch_q8_1",
    "Q4_1 x 1-8 Q8_1 vectors (batch), AVX-512 VNNI on 256-bit registers, eight-row interleaved "
    "blocks as avx2_r8_q8_1: each chunk loaded and unpacked once, one vpdpbusd per half and vector "
    "against its quad broadcast from memory");
}  // namespace

QMV_REGISTER_KERNEL(kBatch);
