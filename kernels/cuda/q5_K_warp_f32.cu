// Q5_K x f32 on the GPU, the plain layout: one warp per row walks the super-blocks one
// at a time, each lane taking the 8 weights at its l (byte loads of qs and qh), the
// lanes' sums meeting in a warp shuffle reduction. The baseline of the Q5_K GPU variants.
#include <cstdint>

#include "kernels/cuda/q5_K_lanes.h"
#include "kernels/cuda/q5_K_q6_K_kernels.cuh"

namespace {

constexpr const char* kName = "q5_K.cuda.warp_f32";

qmv::Status run(const qmv::MatVecArgs& a) {
  using namespace qmv::cuda;
  using namespace qmv::cuda::q5q6;
  return launch_warp_per_row<Q5KLegacyRow>(a, warp_per_row_grid(a.shape.rows), kName);
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cuda_matvec_kernel(kName, qmv::WeightType::Q5_K, qmv::ActFormat::F32, run,
                                            "Q5_K x f32, one warp per row, byte loads, warp-shuffle sum"));
