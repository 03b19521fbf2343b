// Q8_0 weights in the row-interleaved layout x Q8_1 activations, AVX-512 VNNI, on the
// loop of r8.h (two chunks per 512-bit register, on the copy the AVX2 r8 kernels
// read): four weight streams per thread.
#include "r8.h"

namespace {
using Layout = qmv::interleave::BlockQ8_0x8;
using qmv::interleave::vnni::legacy_record;

// Made at compile time, as every record of this folder (q4_K_r8x2_q8k.cpp says why).
constexpr qmv::KernelRecord kFourStreams = legacy_record<Layout, 4>(
    qmv::WeightType::Q8_0, "q8_0.cpu.avx512vnni_r8x4_q8_1",
    "Q8_0 x Q8_1, AVX-512 VNNI, eight-row interleaved blocks as avx2_r8_q8_1, two chunks per "
    "vpdpbusd, four prefetched weight streams per thread");
}  // namespace

QMV_REGISTER_KERNEL(kFourStreams);
