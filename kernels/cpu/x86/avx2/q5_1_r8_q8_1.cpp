// Q5_1 weights in the row-interleaved layout x Q8_1 activations, AVX2, one, two or
// four weight streams per thread, and fused up+gate (legacy_r8.h).
#include "legacy_r8.h"

namespace {
using Layout = qmv::interleave::BlockQ5_1x8;
}  // namespace

QMV_REGISTER_KERNEL((qmv::interleave::r8_record<Layout, 1>(qmv::WeightType::Q5_1,
    "q5_1.cpu.avx2_r8_q8_1",
    "Q5_1 x Q8_1, AVX2, weights repacked once into eight-row interleaved blocks (each byte one "
    "5-bit quant whole and three bits of another, m by one FMA): one float "
    "lane per row, eight rows' scales in one conversion, one weight stream per thread")));
QMV_REGISTER_KERNEL((qmv::interleave::r8_record<Layout, 2>(qmv::WeightType::Q5_1,
    "q5_1.cpu.avx2_r8x2_q8_1",
    "Q5_1 x Q8_1, AVX2, eight-row interleaved blocks as avx2_r8_q8_1, two weight streams "
    "per thread (the two halves of its rows) sharing each activation load")));
// Four streams, chunk by chunk, each prefetching a line per chunk (legacy_r8.h;
// results/amd-zen3-2c/legacy-r8x4-chunk-major.csv, results/intel-xeon-2c/r8x4-prefetch.csv).
QMV_REGISTER_KERNEL((qmv::interleave::r8_record<Layout, 4>(qmv::WeightType::Q5_1,
    "q5_1.cpu.avx2_r8x4_q8_1",
    "Q5_1 x Q8_1, AVX2, eight-row interleaved blocks as avx2_r8_q8_1, four weight streams "
    "per thread (the four quarters of its rows), chunk by chunk: each activation quad "
    "broadcast once for all four, each stream prefetched a line per chunk")));
QMV_REGISTER_KERNEL((qmv::interleave::r8_up_gate_record<Layout, 1>(
    qmv::WeightType::Q5_1, "q5_1.cpu.avx2_r8_up_gate_q8_1",
    "fused FFN up+gate (y = W x, y2 = W2 x), Q5_1 x Q8_1, AVX2, both matrices repacked once "
    "into eight-row interleaved blocks: group g of each per step, two weight streams sharing "
    "each activation load, both outputs in one parallel region")));
QMV_REGISTER_KERNEL((qmv::interleave::r8_up_gate_record<Layout, 2>(
    qmv::WeightType::Q5_1, "q5_1.cpu.avx2_r8x2_up_gate_q8_1",
    "fused FFN up+gate (y = W x, y2 = W2 x), Q5_1 x Q8_1, AVX2, both matrices repacked once "
    "into eight-row interleaved blocks: two groups of each per step (the halves of each "
    "thread's rows), four weight streams sharing each activation load chunk by chunk, each "
    "prefetched a line per chunk")));
