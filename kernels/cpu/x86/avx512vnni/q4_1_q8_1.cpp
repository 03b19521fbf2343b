// Q4_1 weights x Q8_1 activations, AVX-512 VNNI, one row at a time. Per group of four
// blocks: the group's bytes in at most four loads, 16-bit permutes into one 128-bit
// lane per block, two vpdpbusd, one int -> float conversion and one FMA with d_w * d_x
// for all four blocks (legacy.h). w = d*q + m: the nibbles as
// the unsigned operand, the m term one FMA per four blocks with per-call d_x*sum(q_x).
// The weight stream is prefetched in software; q4_1.cpu.avx512vnni_x4_q8_1 adds row
// sharing.
#include "legacy.h"

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q4_1.cpu.avx512vnni_q8_1", qmv::WeightType::Q4_1, qmv::ActFormat::Q8_1,
    qmv::legacy_vnni::run_one_row<qmv::legacy_vnni::Q4_1>,
    "Q4_1 x Q8_1, AVX-512 VNNI, one row at a time: four blocks per vpdpbusd pair, "
    "nibbles, m via per-call d_x*sum(q_x), weight stream prefetched",
    qmv::legacy_vnni::kFeatures));
