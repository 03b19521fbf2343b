// Q4_0 weights x Q8_1 activations, AVX2, one row at a time. Two blocks per step share
// one register (one per 128-bit lane), so one int -> float conversion and one FMA apply
// both blocks' scales: nibbles as stored (q+8), the -8 as -8*sum(q_x) per block added
// to the int32 dot (legacy_q8_1.h). The weight stream is prefetched in
// software; q4_0.cpu.avx2_x4_q8_1 adds row sharing.
#include "legacy_q8_1.h"

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q4_0.cpu.avx2_q8_1", qmv::WeightType::Q4_0, qmv::ActFormat::Q8_1,
    qmv::legacy_avx2_int8::run_one_row<qmv::legacy_avx2_int8::Q4_0>,
    "Q4_0 x Q8_1, AVX2 integer dot, one row at a time: "
    "two blocks per step, stored nibbles (q-8 via -8*sum(q_x)), weight stream prefetched",
    qmv::legacy_avx2_int8::kFeatures));
