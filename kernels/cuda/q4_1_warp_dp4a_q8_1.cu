// Q4_1 weights x Q8_1 activations on the GPU: one warp per row, four lanes per block of 32,
// __dp4a on the quants, the block's offset term from the Q8_1 sum (legacy_dp4a_lanes.h).
#include "kernels/cuda/legacy_kernels.cuh"

namespace {

constexpr const char* kName = "q4_1.cuda.warp_dp4a_q8_1";

qmv::Status run(const qmv::MatVecArgs& a) {
  return qmv::cuda::launch_legacy_matvec<qmv::BlockQ4_1, qmv::BlockQ8_1>(a, kName);
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cuda_matvec_kernel(kName, qmv::WeightType::Q4_1, qmv::ActFormat::Q8_1, run,
                                            "Q4_1 x Q8_1, one warp per row, 4 lanes per block, __dp4a, "
                                            "4 steps of 8 blocks in flight",
                                            61));
