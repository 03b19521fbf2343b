// Q5_1 weights in the row-interleaved layout x Q8_1 activations, AVX2, on the loop of
// legacy_r8.h: four weight streams per thread, chunk by chunk.
#include "legacy_r8.h"

namespace {
using Layout = qmv::interleave::BlockQ5_1x8;
}  // namespace

// Four streams, chunk by chunk, each prefetching a line per chunk (legacy_r8.h;
// results/amd-zen3-2c/legacy-r8x4-chunk-major.csv, results/intel-xeon-2c/r8x4-prefetch.csv).
QMV_REGISTER_KERNEL((qmv::interleave::r8_record<Layout, 4>(qmv::WeightType::Q5_1,
    "q5_1.cpu.avx2_r8x4_q8_1",
    "Q5_1 x Q8_1, AVX2, eight-row interleaved blocks as avx2_r8_q8_1, four weight streams "
    "per thread (the four quarters of its rows), chunk by chunk: each activation quad "
    "broadcast once for all four, each stream prefetched a line per chunk")));
