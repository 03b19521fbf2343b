// Q6_K x f32 on the GPU, multi-warp vectorized: a block of N warps per row, warp w
// taking super-blocks w, w+N, ..., three at a time with their weight loads in flight
// together. A lane takes 8 weights (one joined 32-bit word of low nibbles, half a qh
// word swapped with its neighbour), two float4 activation loads; the scales and d are
// nine 16-bit loads broadcast by shuffles. Warps meet in shared memory. N = 2, 3, 4.
#include "kernels/cuda/q5_K_q6_K_kernels.cuh"
#include "kernels/cuda/q6_K_lanes.h"

namespace {

template <int kWarps>
constexpr const char* kName = kWarps == 2 ? "q6_K.cuda.warpx2_f32" : kWarps == 3 ? "q6_K.cuda.warpx3_f32" : "q6_K.cuda.warpx4_f32";

template <int kWarps>
qmv::Status run(const qmv::MatVecArgs& a) {
  using namespace qmv::cuda;
  using namespace qmv::cuda::q5q6;
  return launch_warpxN<Q6KWarpxNRow<kWarps>>(a, kName<kWarps>);
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cuda_matvec_kernel(kName<2>, qmv::WeightType::Q6_K, qmv::ActFormat::F32, run<2>,
                                            "Q6_K x f32, 2 warps per row, 3 super-blocks per warp in flight"));
QMV_REGISTER_KERNEL(qmv::cuda_matvec_kernel(kName<3>, qmv::WeightType::Q6_K, qmv::ActFormat::F32, run<3>,
                                            "Q6_K x f32, 3 warps per row, 3 super-blocks per warp in flight"));
QMV_REGISTER_KERNEL(qmv::cuda_matvec_kernel(kName<4>, qmv::WeightType::Q6_K, qmv::ActFormat::F32, run<4>,
                                            "Q6_K x f32, 4 warps per row, 3 super-blocks per warp in flight"));
