// Q5_1 weights x f32 activations on the GPU, simple and correct: one warp per row, eight lanes per
// block of 32 weights, d * sum(q*x) + m * sum(x) with the fifth bit from qh (legacy_lanes.h).
#include "kernels/cuda/legacy_kernels.cuh"

namespace {

constexpr const char* kName = "q5_1.cuda.warp_f32";

qmv::Status run(const qmv::MatVecArgs& a) { return qmv::cuda::launch_legacy_matvec<qmv::BlockQ5_1>(a, kName); }

}  // namespace

QMV_REGISTER_KERNEL(qmv::cuda_matvec_kernel(kName, qmv::WeightType::Q5_1, qmv::ActFormat::F32, run,
                                            "Q5_1 x f32, one warp per row, 8 lanes per block: d * sum(q*x) + m * sum(x)"));
