// Q4_K weights x Q8_K activations, AVX2, four rows at a time: the math of
// q4_K.cpu.avx2_q8k (kquant.h's q4k_dot_rows) over four weight streams, one
// per quarter of each row tile (run_row_groups), each with its own software prefetch.
// The activation block's d and bsums are read once per four rows, its quants from L1
// (see kquant.h for why not from registers). Rows left over (n % 4, tiles or
// calls under four rows) take the one-row dot.
#include "kquant.h"

namespace {

// Per stream, as the one-row kernel.
constexpr std::int64_t kPrefetchBytes = 16 * sizeof(qmv::BlockQ4K);
constexpr auto kPrefetchHint = _MM_HINT_T0;

constexpr auto dot4 = qmv::kq_avx2::q4k_dot_rows<4, kPrefetchBytes, kPrefetchHint>;
constexpr auto dot1 = qmv::kq_avx2::q4k_dot_rows<1, kPrefetchBytes, kPrefetchHint>;

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q4_K.cpu.avx2_x4_q8k", qmv::WeightType::Q4_K, qmv::ActFormat::Q8_K,
    qmv::kq_avx2::run_row_groups<qmv::BlockQ4K, 4, dot4, dot1>,
    "Q4_K x Q8_K, AVX2, four rows (one per tile quarter) per step, maddubs + madd by "
    "sub-block scales, offsets via bsums, software prefetch of the four weight streams; "
    "rows % 4 by the one-row path",
    qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA | qmv::CpuFeature::F16C));
