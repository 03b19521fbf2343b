// Q8_0 weights x Q8_1 activations, AVX2, four rows at a time: each activation pair (two
// blocks, loaded once per step) feeds the dot products of four rows, one from each
// quarter of the row tile, whose weight streams are prefetched in software (each
// quarter's start at the tile's start, as the rows of small models are short). The math
// per row is that of q8_0.cpu.avx2_q8_1 (legacy_q8_1.h); rows left over
// (tile rows % 4) take the one-row path.
#include "legacy_q8_1.h"

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q8_0.cpu.avx2_x4_q8_1", qmv::WeightType::Q8_0, qmv::ActFormat::Q8_1,
    qmv::legacy_avx2_int8::run_x4<qmv::legacy_avx2_int8::Q8_0>,
    "Q8_0 x Q8_1, AVX2 integer dot, four rows (one per tile quarter) share each activation load: "
    "int8 widened to int16, vpmaddwd (exact for -128), four weight streams prefetched",
    qmv::legacy_avx2_int8::kFeatures));
