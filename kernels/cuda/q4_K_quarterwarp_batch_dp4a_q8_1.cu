// Q4_K x Q8_1 for 1 to 8 activation vectors per call: quarterwarp_dp4a's layout (a warp
// per row, grid-stride; its four groups of eight lanes on neighbouring super-blocks;
// lane t of a group reads qs words 4t..4t + 3 in one 16-byte load), each super-block's
// weights loaded and its scales decoded once and multiplied with every vector, whose
// activation words come in 16-byte loads too. Per-lane arithmetic:
// grouped_lane_row_batch (q4_K_lanes.h); kernel and launch, one per vector count:
// run_grouped_dp4a_batch (q4_K_kernels.cuh).
#include "kernels/cuda/q4_K_kernels.cuh"

namespace qmv::cuda::q4k {
namespace {

constexpr const char* kName = "q4_K.cuda.quarterwarp_batch_dp4a_q8_1";

Status run(const MatVecArgs& a) {
  using namespace quarterwarp_batch_dp4a;
  return run_grouped_dp4a_batch<kGroups, kUnroll, kWordsPerLane>(a, kName);
}

constexpr KernelRecord record() {
  KernelRecord r = cuda_matvec_kernel(kName, WeightType::Q4_K, ActFormat::Q8_1, run,
                                      "Q4_K x Q8_1, 1-8 vectors per call: quarter-warp per super-block, 16-byte "
                                      "weight and activation loads, the weights read once for every vector, "
                                      "grid-stride over rows, __dp4a byte sums",
                                      61);
  r.op = OpKind::MatVecBatch;
  r.max_n = quarterwarp_batch_dp4a::kMaxN;
  return r;
}

}  // namespace

QMV_REGISTER_KERNEL(record());

}  // namespace qmv::cuda::q4k
