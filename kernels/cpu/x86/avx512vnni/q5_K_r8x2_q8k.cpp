// Q5_K weights in the row-interleaved layout x Q8_K activations, AVX-512 VNNI: two and
// four weight streams per thread, and fused up+gate with four, on the copy the AVX2 r8
// kernels read, two chunks per 512-bit register, each sub-block's scale applied in int32
// (r8.h).
#include "r8.h"

namespace {
using Family = qmv::interleave::vnni::KQuant<qmv::interleave::BlockQ5_Kx8, qmv::WeightType::Q5_K>;
using qmv::interleave::kquant_r8_record;

// Records made at compile time: built at start-up, this file's flags let the compiler
// copy them with AVX-512 stores, which kill the process on a CPU without it.
constexpr qmv::KernelRecord kTwoStreams = kquant_r8_record<Family, 2>(
    "q5_K.cpu.avx512vnni_r8x2_q8k",
    "Q5_K x Q8_K, AVX-512 VNNI, eight-row interleaved super-blocks as avx2_r8_q8k, two chunks per "
    "vpdpbusd, two prefetched weight streams per thread sharing each activation permute",
    qmv::interleave::kAvx512VnniFeatures);
constexpr qmv::KernelRecord kFourStreams = kquant_r8_record<Family, 4>(
    "q5_K.cpu.avx512vnni_r8x4_q8k",
    "Q5_K x Q8_K, AVX-512 VNNI, eight-row interleaved super-blocks as avx2_r8_q8k, two chunks per "
    "vpdpbusd, four prefetched weight streams per thread",
    qmv::interleave::kAvx512VnniFeatures);
constexpr qmv::KernelRecord kFusedUpGate = qmv::interleave::kquant_r8_up_gate_record<Family, 2>(
    "q5_K.cpu.avx512vnni_r8x2_up_gate_q8k",
    "fused FFN up+gate (y = W x, y2 = W2 x), Q5_K x Q8_K, AVX512 VNNI, both matrices as "
    "avx2_r8_q8k interleaves them, two chunks per vpdpbusd: two groups of each per step, four "
    "prefetched weight streams sharing each activation permute",
    qmv::interleave::kAvx512VnniFeatures);
}  // namespace

QMV_REGISTER_KERNEL(kTwoStreams);
QMV_REGISTER_KERNEL(kFourStreams);
QMV_REGISTER_KERNEL(kFusedUpGate);
