// Q4_K weights in the row-interleaved layout x 1 to 8 Q8_K activations per call (the
// batch op), AVX-512 VNNI: the copy the AVX2 r8 kernels read, each chunk pair loaded and
// unpacked once for all the vectors, one vpdpbusd per half and vector (r8.h).
#include "r8.h"

namespace {
// Made at compile time, as every record of this folder (q4_K_r8x2_q8k.cpp says why).
constexpr qmv::KernelRecord kBatch = qmv::interleave::kquant_r8_batch_record<
    qmv::interleave::vnni::KQuant<qmv::interleave::BlockQ4_Kx8, qmv::WeightType::Q4_K>>(
    "q4_K.cpu.avx512vnni_r8_batch_q8k",
    "Q4_K x 1-8 Q8_K vectors (batch), AVX-512 VNNI, eight-row interleaved super-blocks as avx2_r8_q8k: "
    "each chunk pair loaded and unpacked once, one vpdpbusd per half and vector",
    qmv::interleave::kAvx512VnniFeatures);
}  // namespace

QMV_REGISTER_KERNEL(kBatch);
