// Q4_0 weights in the row-interleaved layout x Q8_1 activations, AVX2, on the loop of
// legacy_r8.h: the fused FFN up+gate, two weight streams.
#include "legacy_r8.h"

namespace {
using Layout = qmv::interleave::BlockQ4_0x8;
}  // namespace

QMV_REGISTER_KERNEL((qmv::interleave::r8_up_gate_record<Layout, 1>(
    qmv::WeightType::Q4_0, "q4_0.cpu.avx2_r8_up_gate_q8_1",
    "fused FFN up+gate (y = W x, y2 = W2 x), Q4_0 x Q8_1, AVX2, both matrices repacked once "
    "into eight-row interleaved blocks: group g of each per step, two weight streams sharing "
    "each activation load, both outputs in one parallel region")));
