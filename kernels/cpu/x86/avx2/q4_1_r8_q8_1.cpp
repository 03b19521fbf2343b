// Q4_1 weights in the row-interleaved layout x Q8_1 activations, AVX2, on the loop of
// legacy_r8.h: one weight stream per thread.
#include "legacy_r8.h"

namespace {
using Layout = qmv::interleave::BlockQ4_1x8;
}  // namespace

QMV_REGISTER_KERNEL((qmv::interleave::r8_record<Layout, 1>(qmv::WeightType::Q4_1,
    "q4_1.cpu.avx2_r8_q8_1",
    "Q4_1 x Q8_1, AVX2, weights repacked once into eight-row interleaved blocks (the m term "
    "one FMA per block for eight rows): one float "
    "lane per row, eight rows' scales in one conversion, one weight stream per thread")));
