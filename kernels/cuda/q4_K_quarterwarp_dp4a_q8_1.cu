// Q4_K x Q8_1, quarter-warp per super-block: a warp works on one row at a time (grid-
// stride over rows), its four groups of eight lanes on four neighbouring super-blocks;
// lane t of a group reads qs words 4t..4t + 3 in one 16-byte load and the header in
// another, and each group keeps 3 super-blocks of loads in flight (12 per warp). Per
// 16 weights of a sub-block one scale, min and activation scale, where the half-warp
// kernel has them per 8. Per-lane arithmetic: grouped_lane_row with quarterwarp_dp4a's
// constants (q4_K_lanes.h); kernel and launch: run_grouped_dp4a (q4_K_kernels.cuh).
#include "kernels/cuda/q4_K_kernels.cuh"

namespace qmv::cuda::q4k {
namespace {

constexpr const char* kName = "q4_K.cuda.quarterwarp_dp4a_q8_1";

Status run(const MatVecArgs& a) {
  using namespace quarterwarp_dp4a;
  return run_grouped_dp4a<kGroups, kUnroll, kWordsPerLane>(a, kName);
}

}  // namespace

QMV_REGISTER_KERNEL(cuda_matvec_kernel(kName, WeightType::Q4_K, ActFormat::Q8_1, run,
                                       "Q4_K x Q8_1, quarter-warp per super-block (four per warp, x3 unrolled), "
                                       "16-byte weight loads, grid-stride over rows, __dp4a byte sums",
                                       61));

}  // namespace qmv::cuda::q4k
