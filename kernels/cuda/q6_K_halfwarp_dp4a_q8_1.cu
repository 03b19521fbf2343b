// Q6_K x Q8_1 on the GPU, half-warp layout: 16 threads per super-block, 16 weights a
// thread (four __dp4a against four Q8_1 words), the two half-warps on neighbouring
// super-blocks and three such pairs per step (two below sm_90), so each warp has six
// super-blocks of loads in flight. One warp per row over a grid-stride loop, on a grid
// the device keeps resident at once, sized so every warp has the same number of rows.
#include <cstdint>

#include "kernels/cuda/q5_K_q6_K_kernels.cuh"
#include "kernels/cuda/q6_K_lanes.h"

namespace {

constexpr const char* kName = "q6_K.cuda.halfwarp_dp4a_q8_1";

qmv::Status run(const qmv::MatVecArgs& a) {
  using namespace qmv::cuda::q5q6;
  return run_resident_warp_per_row<Q6KHalfWarpRow>(a, kName);
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cuda_matvec_kernel(kName, qmv::WeightType::Q6_K, qmv::ActFormat::Q8_1, run,
                                            "Q6_K x Q8_1, half-warp per super-block, __dp4a, 6 super-blocks per warp in flight (4 below sm_90)",
                                            61));
