// Q5_K x f32 on the GPU, multi-warp vectorized: a block of N warps per row, warp w
// taking super-blocks w, w+N, ..., four at a time with their weight loads in flight
// together. A lane takes 8 weights (a 32-bit qs word, its qh word from a neighbour)
// and two float4 activation loads; twelve lanes load the qh words and the header, which
// shuffles broadcast. Warps meet in shared memory. N = 2, 3, 4.
#include "kernels/cuda/q5_K_lanes.h"
#include "kernels/cuda/q5_K_q6_K_kernels.cuh"

namespace {

template <int kWarps>
constexpr const char* kName = kWarps == 2 ? "q5_K.cuda.warpx2_f32" : kWarps == 3 ? "q5_K.cuda.warpx3_f32" : "q5_K.cuda.warpx4_f32";

template <int kWarps>
qmv::Status run(const qmv::MatVecArgs& a) {
  using namespace qmv::cuda;
  using namespace qmv::cuda::q5q6;
  return launch_warpxN<Q5KWarpxNRow<kWarps>>(a, kName<kWarps>);
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cuda_matvec_kernel(kName<2>, qmv::WeightType::Q5_K, qmv::ActFormat::F32, run<2>,
                                            "Q5_K x f32, 2 warps per row, 4 super-blocks per warp in flight"));
QMV_REGISTER_KERNEL(qmv::cuda_matvec_kernel(kName<3>, qmv::WeightType::Q5_K, qmv::ActFormat::F32, run<3>,
                                            "Q5_K x f32, 3 warps per row, 4 super-blocks per warp in flight"));
QMV_REGISTER_KERNEL(qmv::cuda_matvec_kernel(kName<4>, qmv::WeightType::Q5_K, qmv::ActFormat::F32, run<4>,
                                            "Q5_K x f32, 4 warps per row, 4 super-blocks per warp in flight"));
