// Q4_0 weights x f32 activations on the GPU, simple and correct: one warp per row, eight lanes per
// block of 32 weights, d * sum((q - 8) * x) per lane's four weights (legacy_lanes.h).
#include "kernels/cuda/legacy_kernels.cuh"

namespace {

constexpr const char* kName = "q4_0.cuda.warp_f32";

qmv::Status run(const qmv::MatVecArgs& a) { return qmv::cuda::launch_legacy_matvec<qmv::BlockQ4_0>(a, kName); }

}  // namespace

QMV_REGISTER_KERNEL(qmv::cuda_matvec_kernel(kName, qmv::WeightType::Q4_0, qmv::ActFormat::F32, run,
                                            "Q4_0 x f32, one warp per row, 8 lanes per block: d * sum((q-8)*x)"));
