// Q4_K weights in the row-interleaved layout x Q8_K activations, AVX-512 VNNI, on the
// loop of r8.h (two chunks per 512-bit register, on the copy the AVX2 r8 kernels
// read): the fused FFN up+gate, four weight streams.
#include "r8.h"

namespace {
using Family = qmv::interleave::vnni::KQuant<qmv::interleave::BlockQ4_Kx8, qmv::WeightType::Q4_K>;

// Made at compile time, as every record of this folder (q4_K_r8x2_q8k.cpp says why).
constexpr qmv::KernelRecord kFusedUpGate = qmv::interleave::kquant_r8_up_gate_record<Family, 2>(
    "q4_K.cpu.avx512vnni_r8x2_up_gate_q8k",
    "fused FFN up+gate (y = W x, y2 = W2 x), Q4_K x Q8_K, AVX512 VNNI, both matrices as "
    "avx2_r8_q8k interleaves them, two chunks per vpdpbusd: two groups of each per step, four "
    "prefetched weight streams sharing each activation permute",
    qmv::interleave::kAvx512VnniFeatures);
}  // namespace

QMV_REGISTER_KERNEL(kFusedUpGate);
