// Q8_0 weights x Q8_1 activations, AVX-512 VNNI, four rows at a time: each activation
// group (four blocks, loaded once per step) feeds the vpdpbusd of four rows, one from
// each quarter of the row tile, whose weight streams are prefetched in software (each
// quarter's start at the tile's start, as the rows of small models are short). The
// math per row is that of q8_0.cpu.avx512vnni_q8_1 (legacy.h);
// rows left over (tile rows % 4) take the one-row path.
#include "legacy.h"

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q8_0.cpu.avx512vnni_x4_q8_1", qmv::WeightType::Q8_0, qmv::ActFormat::Q8_1,
    qmv::legacy_vnni::run_x4<qmv::legacy_vnni::Q8_0>,
    "Q8_0 x Q8_1, AVX-512 VNNI, four rows (one per tile quarter) share each activation "
    "load: q^0x80 (q+128 via -128*sum(q_x)), four weight streams prefetched",
    qmv::legacy_vnni::kFeatures));
