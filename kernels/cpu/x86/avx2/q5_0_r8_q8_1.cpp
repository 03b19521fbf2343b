// Q5_0 weights in the row-interleaved layout x Q8_1 activations, AVX2, on the loop of
// legacy_r8.h: one weight stream per thread.
#include "legacy_r8.h"

namespace {
using Layout = qmv::interleave::BlockQ5_0x8;
}  // namespace

QMV_REGISTER_KERNEL((qmv::interleave::r8_record<Layout, 1>(qmv::WeightType::Q5_0,
    "q5_0.cpu.avx2_r8_q8_1",
    "Q5_0 x Q8_1, AVX2, weights repacked once into eight-row interleaved blocks (each byte one "
    "5-bit quant whole and three bits of another): one float "
    "lane per row, eight rows' scales in one conversion, one weight stream per thread")));
