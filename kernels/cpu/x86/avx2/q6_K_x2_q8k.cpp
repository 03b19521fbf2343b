// Q6_K weights x Q8_K activations, AVX2, two rows at a time: the math of
// q6_K.cpu.avx2_q8k (kquant.h's q6k_dot_rows) over two weight streams, one
// per half of each row tile (run_row_groups), each prefetched 8 super-blocks ahead.
// Why two and not four: on the AVX2 path two Q6_K streams measured faster than four,
// on one thread and two (q6_K.cpu.avx2_x4_q8k is kept for the comparison). A likely
// reason, not verified: a Q6_K block spans 3.3 cache lines, so four streams with their
// prefetch distance keep more lines in flight than the core's L1 miss buffers hold, and
// the prefetches then queue behind (or are dropped for) demand misses; registers are
// not the limit, as the rows of a step run one after the other (kquant.h).
// Rows left over (an odd tile) take the one-row dot.
#include "kquant.h"

namespace {

constexpr std::int64_t kPrefetchBytes = 8 * sizeof(qmv::BlockQ6K);
constexpr auto kPrefetchHint = _MM_HINT_T0;

constexpr auto dot2 = qmv::kq_avx2::q6k_dot_rows<2, kPrefetchBytes, kPrefetchHint>;
constexpr auto dot1 = qmv::kq_avx2::q6k_dot_rows<1, kPrefetchBytes, kPrefetchHint>;

}  // namespace

QMV_REGISTER_KERNEL(qmv::cpu_matvec_kernel(
    "q6_K.cpu.avx2_x2_q8k", qmv::WeightType::Q6_K, qmv::ActFormat::Q8_K,
    qmv::kq_avx2::run_row_groups<qmv::BlockQ6K, 2, dot2, dot1>,
    "Q6_K x Q8_K, AVX2, two rows (one per tile half) per step, maddubs + madd(int8 "
    "scales), -32 centring via bsums, software prefetch of the two weight streams; "
    "an odd row by the one-row path",
    qmv::CpuFeature::AVX2 | qmv::CpuFeature::FMA | qmv::CpuFeature::F16C));
