// Q5_0 weights in the row-interleaved layout x 1 to 8 Q8_1 activations per call (the
// batch op), AVX2, on the batch loop of legacy_r8.h: one weight stream per thread, each
// chunk loaded and unpacked once for all the vectors.
#include "legacy_r8.h"

namespace {
// Built at compile time: nothing of this file runs before main.
constexpr qmv::KernelRecord kBatch = qmv::interleave::r8_batch_record<qmv::interleave::BlockQ5_0x8>(
    qmv::WeightType::Q5_0, "q5_0.cpu.avx2_r8_batch_q8_1",
    "Q5_0 x 1-8 Q8_1 vectors (batch), AVX2, eight-row interleaved blocks as avx2_r8_q8_1: each weight "
    "chunk loaded and unpacked once, then dotted with every vector");
}  // namespace

QMV_REGISTER_KERNEL(kBatch);
