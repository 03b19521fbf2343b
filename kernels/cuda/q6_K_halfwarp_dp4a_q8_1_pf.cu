// Q6_K x Q8_1, the half-warp DP4A row code (Q6KHalfWarpRow) on chunks of 12
// super-blocks, each warp prefetching into L2 the chunks 1, 2 or 4 ahead of the one it
// computes (.pf1, .pf2, .pf4; prefetch_rows.cuh).
#include "kernels/cuda/prefetch_rows.cuh"
#include "kernels/cuda/q6_K_lanes.h"

namespace qmv::cuda::q5q6 {
namespace {

struct HalfwarpDot {
  static constexpr int kBlockBytes = kQ6KBlockBytes;
  static constexpr int kActBytes = (kSuperBlock / kQ8_1Block) * static_cast<int>(sizeof(BlockQ8_1));
  static constexpr int kChunkBlocks = kQ6KHalfWarpChunkBlocks;
  static constexpr int kMinBlocksPerSm = 8;  // 64 registers, as the plain kernel
  static constexpr std::size_t kWeightAlign = 2, kActAlign = 4;
  __device__ static float partial(const std::uint8_t* w, const std::uint8_t* x, int nb, int lane) {
    GlobalReads mem;
    WarpShuffle shfl;
    return Q6KHalfWarpRow::partial(mem, shfl, w, reinterpret_cast<const BlockQ8_1*>(x), nb, lane);
  }
};

constexpr const char* kPf1 = "q6_K.cuda.halfwarp_dp4a_q8_1.pf1";
constexpr const char* kPf2 = "q6_K.cuda.halfwarp_dp4a_q8_1.pf2";
constexpr const char* kPf4 = "q6_K.cuda.halfwarp_dp4a_q8_1.pf4";

Status run_pf1(const MatVecArgs& a) { return run_prefetch_rows<HalfwarpDot, 1>(a, kPf1); }
Status run_pf2(const MatVecArgs& a) { return run_prefetch_rows<HalfwarpDot, 2>(a, kPf2); }
Status run_pf4(const MatVecArgs& a) { return run_prefetch_rows<HalfwarpDot, 4>(a, kPf4); }

}  // namespace

QMV_REGISTER_KERNEL(cuda_matvec_kernel(kPf1, WeightType::Q6_K, ActFormat::Q8_1, run_pf1,
                                       "halfwarp_dp4a_q8_1 on 12-super-block chunks, the next chunk prefetched "
                                       "into L2, one wave of warps striding over rows",
                                       61));
QMV_REGISTER_KERNEL(cuda_matvec_kernel(kPf2, WeightType::Q6_K, ActFormat::Q8_1, run_pf2,
                                       "halfwarp_dp4a_q8_1 on 12-super-block chunks, 2 chunks prefetched ahead "
                                       "into L2, one wave of warps striding over rows",
                                       61));
QMV_REGISTER_KERNEL(cuda_matvec_kernel(kPf4, WeightType::Q6_K, ActFormat::Q8_1, run_pf4,
                                       "halfwarp_dp4a_q8_1 on 12-super-block chunks, 4 chunks prefetched ahead "
                                       "into L2, one wave of warps striding over rows",
                                       61));

}  // namespace qmv::cuda::q5q6
