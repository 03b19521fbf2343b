// F16 weights x f32 activations on the GPU, simple and correct: one warp per row, lane i takes
// columns i, i+32, ... (coalesced), each weight widened exactly to f32 (legacy_lanes.h).
#include "kernels/cuda/legacy_kernels.cuh"

namespace {

constexpr const char* kName = "f16.cuda.warp";

qmv::Status run(const qmv::MatVecArgs& a) {
  return qmv::cuda::launch_float_matvec<std::uint16_t, qmv::WeightType::F16>(a, kName);
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cuda_matvec_kernel(kName, qmv::WeightType::F16, qmv::ActFormat::F32, run,
                                            "F16 x f32, one warp per row, coalesced columns, any cols"));
