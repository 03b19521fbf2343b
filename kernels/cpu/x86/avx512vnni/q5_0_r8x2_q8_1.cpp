// Q5_0 weights in the row-interleaved layout x Q8_1 activations, AVX-512 VNNI, on the
// loop of r8.h (two chunks per 512-bit register, on the copy the AVX2 r8 kernels
// read): two weight streams per thread.
#include "r8.h"

namespace {
using Layout = qmv::interleave::BlockQ5_0x8;
using qmv::interleave::vnni::legacy_record;

// Records made at compile time: built at start-up, this file's flags let the compiler
// copy them with AVX-512 stores, which kill the process on a CPU without it.
constexpr qmv::KernelRecord kTwoStreams = legacy_record<Layout, 2>(
    qmv::WeightType::Q5_0, "q5_0.cpu.avx512vnni_r8x2_q8_1",
    "Q5_0 x Q8_1, AVX-512 VNNI, eight-row interleaved blocks as avx2_r8_q8_1, two chunks per "
    "vpdpbusd, two prefetched weight streams per thread sharing each activation permute");
}  // namespace

QMV_REGISTER_KERNEL(kTwoStreams);
