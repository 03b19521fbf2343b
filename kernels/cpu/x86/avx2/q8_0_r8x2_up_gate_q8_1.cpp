// Q8_0 weights in the row-interleaved layout x Q8_1 activations, AVX2, on the loop of
// q8_0_r8.h: the fused FFN up+gate, four weight streams, the sign-trick path
// (the int16 one for an activation holding -128).
#include "q8_0_r8.h"

QMV_REGISTER_KERNEL(qmv::interleave::interleaved_record<BlockQ8_0x8>(
    qmv::OpKind::FusedUpGate, "q8_0.cpu.avx2_r8x2_up_gate_q8_1", qmv::WeightType::Q8_0, qmv::ActFormat::Q8_1,
    (run_up_gate<2, true>),
    "fused FFN up+gate (y = W x, y2 = W2 x), Q8_0 x Q8_1, AVX2, both matrices repacked once into "
    "eight-row interleaved blocks: two groups of each per step, four weight streams sharing each "
    "activation quad, each prefetched a line per chunk: the sign-trick path of avx2_r8x4_q8_1"));
