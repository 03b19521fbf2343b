// Q4_0 weights in the row-interleaved layout x Q8_1 activations, AVX2, on the loop of
// legacy_r8.h: two weight streams per thread.
#include "legacy_r8.h"

namespace {
using Layout = qmv::interleave::BlockQ4_0x8;
}  // namespace

QMV_REGISTER_KERNEL((qmv::interleave::r8_record<Layout, 2>(qmv::WeightType::Q4_0,
    "q4_0.cpu.avx2_r8x2_q8_1",
    "Q4_0 x Q8_1, AVX2, eight-row interleaved blocks as avx2_r8_q8_1, two weight streams "
    "per thread (the two halves of its rows) sharing each activation load")));
