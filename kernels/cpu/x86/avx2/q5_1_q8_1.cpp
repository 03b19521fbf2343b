// Q5_1 weights x Q8_1 activations, AVX2, one row at a time. Two blocks per step share
// one register (one per 128-bit lane), so one int -> float conversion and one FMA apply
// both blocks' scales: nibbles plus fifth bits spread from qh (vpshufb + compare), the
// m term as m_w * d_x * sum(q_x) (legacy_q8_1.h). The weight stream is
// prefetched in software; q5_1.cpu.avx2_x4_q8_1 adds row sharing.
#include "legacy_q8_1.h"

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q5_1.cpu.avx2_q8_1", qmv::WeightType::Q5_1, qmv::ActFormat::Q8_1,
    qmv::legacy_avx2_int8::run_one_row<qmv::legacy_avx2_int8::Q5_1>,
    "Q5_1 x Q8_1, AVX2 integer dot, one row at a time: "
    "two blocks per step, nibbles + qh bits, m via exact d_x*sum(q_x), weight stream prefetched",
    qmv::legacy_avx2_int8::kFeatures));
