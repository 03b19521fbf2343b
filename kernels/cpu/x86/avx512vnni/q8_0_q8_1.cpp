// Q8_0 weights x Q8_1 activations, AVX-512 VNNI, one row at a time. Per group of four
// blocks: the group's bytes in at most four loads, 16-bit permutes into one 128-bit
// lane per block, two vpdpbusd, one int -> float conversion and one FMA with d_w * d_x
// for all four blocks (legacy.h). w = d*q, q signed: bit 7
// flipped (q+128) for the unsigned operand, -128*sum(q_x) per block starts the int32
// dot. The weight stream is prefetched in software; q8_0.cpu.avx512vnni_x4_q8_1 adds row
// sharing.
#include "legacy.h"

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q8_0.cpu.avx512vnni_q8_1", qmv::WeightType::Q8_0, qmv::ActFormat::Q8_1,
    qmv::legacy_vnni::run_one_row<qmv::legacy_vnni::Q8_0>,
    "Q8_0 x Q8_1, AVX-512 VNNI, one row at a time: four blocks per vpdpbusd pair, "
    "q^0x80 (q+128 via -128*sum(q_x)), weight stream prefetched",
    qmv::legacy_vnni::kFeatures));
