// Q5_K weights in the row-interleaved layout x Q8_K activations, AVX-512 VNNI, on the
// loop of r8.h (two chunks per 512-bit register, on the copy the AVX2 r8 kernels
// read): two weight streams per thread.
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
}  // namespace

QMV_REGISTER_KERNEL(kTwoStreams);
