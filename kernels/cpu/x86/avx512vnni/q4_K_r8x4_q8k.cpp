// Q4_K weights in the row-interleaved layout x Q8_K activations, AVX-512 VNNI, on the
// loop of r8.h (two chunks per 512-bit register, on the copy the AVX2 r8 kernels
// read): four weight streams per thread.
#include "r8.h"

namespace {
using Family = qmv::interleave::vnni::KQuant<qmv::interleave::BlockQ4_Kx8, qmv::WeightType::Q4_K>;
using qmv::interleave::kquant_r8_record;

// Made at compile time, as every record of this folder (q4_K_r8x2_q8k.cpp says why).
constexpr qmv::KernelRecord kFourStreams = kquant_r8_record<Family, 4>(
    "q4_K.cpu.avx512vnni_r8x4_q8k",
    "Q4_K x Q8_K, AVX-512 VNNI, eight-row interleaved super-blocks as avx2_r8_q8k, two chunks per "
    "vpdpbusd, four prefetched weight streams per thread",
    qmv::interleave::kAvx512VnniFeatures);
}  // namespace

QMV_REGISTER_KERNEL(kFourStreams);
