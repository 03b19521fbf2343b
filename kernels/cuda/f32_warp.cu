// F32 weights x f32 activations on the GPU, simple and correct: one warp per row, lane i takes
// columns i, i+32, ... (coalesced) (legacy_lanes.h).
#include "kernels/cuda/legacy_kernels.cuh"

namespace {

constexpr const char* kName = "f32.cuda.warp";

qmv::Status run(const qmv::MatVecArgs& a) {
  return qmv::cuda::launch_float_matvec<float, qmv::WeightType::F32>(a, kName);
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cuda_matvec_kernel(kName, qmv::WeightType::F32, qmv::ActFormat::F32, run,
                                            "F32 x f32, one warp per row, coalesced columns, any cols"));
