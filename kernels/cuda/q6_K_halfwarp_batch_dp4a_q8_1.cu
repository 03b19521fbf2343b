// Q6_K x Q8_1 for 1 to 8 activation vectors per call: halfwarp_dp4a's layout (16
// threads per super-block, 16 weights a thread, the two half-warps on neighbouring
// super-blocks; one warp per row over a grid-stride loop on a resident grid), two pairs
// of super-blocks per step (one for more than two vectors), each step's weights loaded
// once and multiplied with every vector. Per-lane arithmetic: Q6KHalfWarpBatchRowOf (q6_K_lanes.h); kernel and launch,
// one per vector count: run_resident_warp_per_row_batch (q5_K_q6_K_kernels.cuh).
#include <cstdint>

#include "kernels/cuda/q5_K_q6_K_kernels.cuh"
#include "kernels/cuda/q6_K_lanes.h"

namespace {

constexpr const char* kName = "q6_K.cuda.halfwarp_batch_dp4a_q8_1";

qmv::Status run(const qmv::MatVecArgs& a) {
  using namespace qmv::cuda::q5q6;
  return run_resident_warp_per_row_batch<Q6KHalfWarpBatchRow>(a, kName);
}

constexpr qmv::KernelRecord record() {
  qmv::KernelRecord r = qmv::cuda_matvec_kernel(
      kName, qmv::WeightType::Q6_K, qmv::ActFormat::Q8_1, run,
      "Q6_K x Q8_1, 1-8 vectors per call: half-warp per super-block, the weights read once for every vector, "
      "__dp4a, 4 super-blocks per warp in flight (2 for more than 2 vectors)",
      61);
  r.op = qmv::OpKind::MatVecBatch;
  r.max_n = qmv::cuda::q5q6::Q6KHalfWarpBatchRow::kMaxN;
  return r;
}

}  // namespace

QMV_REGISTER_KERNEL(record());
