// Q5_0 weights in the row-interleaved layout x Q8_1 activations, AVX-512 VNNI, on the
// loop of r8.h (two chunks per 512-bit register, on the copy the AVX2 r8 kernels
// read): the fused FFN up+gate, four weight streams.
#include "r8.h"

namespace {
using Layout = qmv::interleave::BlockQ5_0x8;

// Made at compile time, as every record of this folder (q4_K_r8x2_q8k.cpp says why).
constexpr qmv::KernelRecord kFusedUpGate = qmv::interleave::vnni::legacy_up_gate_record<Layout, 2>(
    qmv::WeightType::Q5_0, "q5_0.cpu.avx512vnni_r8x2_up_gate_q8_1",
    "fused FFN up+gate (y = W x, y2 = W2 x), Q5_0 x Q8_1, AVX512 VNNI, both matrices as "
    "avx2_r8_q8_1 interleaves them, two chunks per vpdpbusd: two groups of each per step, four "
    "prefetched weight streams sharing each activation permute");
}  // namespace

QMV_REGISTER_KERNEL(kFusedUpGate);
