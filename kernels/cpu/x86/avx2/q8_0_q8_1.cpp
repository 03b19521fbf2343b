// Q8_0 weights x Q8_1 activations, AVX2, one row at a time. Two blocks per step share
// one register (one per 128-bit lane), so one int -> float conversion and one FMA apply
// both blocks' scales: signed quants widened to int16 (vpmovsxbw) against the
// activation widened once per call, vpmaddwd: exact where maddubs would saturate or the
// sign trick would fail on -128 (legacy_q8_1.h). The weight stream is
// prefetched in software; q8_0.cpu.avx2_x4_q8_1 adds row sharing.
#include "legacy_q8_1.h"

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q8_0.cpu.avx2_q8_1", qmv::WeightType::Q8_0, qmv::ActFormat::Q8_1,
    qmv::legacy_avx2_int8::run_one_row<qmv::legacy_avx2_int8::Q8_0>,
    "Q8_0 x Q8_1, AVX2 integer dot, one row at a time: "
    "two blocks per step, int8 widened to int16, vpmaddwd (exact for -128), weight stream prefetched",
    qmv::legacy_avx2_int8::kFeatures));
