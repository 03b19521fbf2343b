// Q6_K x Q8_1 on the GPU with integer dots: one warp per row, 32 lanes per super-block,
// three super-blocks per step. A lane turns 8 quants into two words of signed bytes
// (q - 32, re-biased inside the word) and takes two __dp4a against Q8_1 activation
// words; the sub-block scale multiplies the integer dot, the activation block's d and
// the super-block's d the float sum.
#include "kernels/cuda/q5_K_q6_K_kernels.cuh"
#include "kernels/cuda/q6_K_lanes.h"

namespace {

constexpr const char* kName = "q6_K.cuda.dp4a_q8_1";

qmv::Status run(const qmv::MatVecArgs& a) {
  using namespace qmv::cuda;
  using namespace qmv::cuda::q5q6;
  return launch_warp_per_row<Q6KDp4aRow>(a, warp_per_row_grid(a.shape.rows), kName);
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cuda_matvec_kernel(kName, qmv::WeightType::Q6_K, qmv::ActFormat::Q8_1, run,
                                            "Q6_K x Q8_1, one warp per row, __dp4a, 3 super-blocks in flight",
                                            61));
