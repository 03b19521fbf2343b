// Q4_K x Q8_1 for 1 to 8 activation vectors per call: quarterwarp_dp4a's layout (a warp
// per row, grid-stride; its four groups of eight lanes on neighbouring super-blocks;
// lane t of a group reads qs words 4t..4t + 3 in one 16-byte load), each super-block's
// weights loaded and its scales decoded once and multiplied with every vector, each
// vector's block scales read once per 16 weights; with more than kFewVectors vectors, two
// super-blocks in flight per quarter-warp (q4_K_lanes.h says why). Per-lane arithmetic:
// grouped_lane_row_batch (q4_K_lanes.h); kernel, one per vector count:
// launch_grouped_dp4a_batch (q4_K_kernels.cuh).
#include "kernels/cuda/q4_K_kernels.cuh"

namespace qmv::cuda::q4k {
namespace {

constexpr const char* kName = "q4_K.cuda.quarterwarp_batch_dp4a_q8_1";

Status run(const MatVecArgs& a) {
  using namespace quarterwarp_batch_dp4a;
  if (Status s = check_launch(kName, a, 16, 4); !s.ok()) return s;
  return for_vector_count(kName, a.n, [&](auto n) {
    constexpr int kN = decltype(n)::value;
    if constexpr (kN <= kFewVectors)
      return launch_grouped_dp4a_batch<kGroups, kUnrollFew, kWordsPerLane, kN, kMinBlocksFew>(a, kName);
    else
      return launch_grouped_dp4a_batch<kGroups, kUnrollMany, kWordsPerLane, kN, kMinBlocksMany>(a, kName);
  });
}

constexpr KernelRecord record() {
  KernelRecord r = cuda_matvec_kernel(kName, WeightType::Q4_K, ActFormat::Q8_1, run,
                                      "Q4_K x Q8_1, 1-8 vectors per call: quarter-warp per super-block, 16-byte "
                                      "weight loads, the weights read once for every vector, grid-stride over "
                                      "rows, __dp4a byte sums",
                                      61);
  r.op = OpKind::MatVecBatch;
  r.max_n = quarterwarp_batch_dp4a::kMaxN;
  return r;
}

}  // namespace

QMV_REGISTER_KERNEL(record());

}  // namespace qmv::cuda::q4k
