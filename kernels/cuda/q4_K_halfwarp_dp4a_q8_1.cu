// Q4_K x Q8_1, half-warp per super-block: a warp works on one row at a time (grid-
// stride over rows), its two half-warps on alternate super-blocks; lane t of a half
// reads qs words 2t and 2t + 1 in one 8-byte load and the header in one 16-byte load,
// and each half keeps 4 super-blocks of loads in flight. Byte sums by __dp4a, min
// terms from the Q8_1 block sums. Per-lane arithmetic: grouped_lane_row with
// halfwarp_dp4a's constants (q4_K_lanes.h); kernel and launch: run_grouped_dp4a
// (q4_K_kernels.cuh).
#include "kernels/cuda/q4_K_kernels.cuh"

namespace qmv::cuda::q4k {
namespace {

constexpr const char* kName = "q4_K.cuda.halfwarp_dp4a_q8_1";

Status run(const MatVecArgs& a) {
  using namespace halfwarp_dp4a;
  return run_grouped_dp4a<kGroups, kUnroll, kWordsPerLane>(a, kName);
}

}  // namespace

QMV_REGISTER_KERNEL(cuda_matvec_kernel(kName, WeightType::Q4_K, ActFormat::Q8_1, run,
                                       "Q4_K x Q8_1, half-warp per super-block (two per warp in flight, x4 "
                                       "unrolled), grid-stride over rows, __dp4a byte sums",
                                       61));

}  // namespace qmv::cuda::q4k
