// Q4_K x Q8_1, the multi-warp vectorized layout (N warps per row striding over
// super-blocks, a 32-bit qs word per lane, header from lanes 0..3 by shuffle, 4
// super-blocks in flight per warp, warp sums met in shared memory) with the __dp4a
// inner product of q4_K.cuda.dp4a_q8_1. Registers warpx2, warpx3 and warpx4. Per-lane arithmetic:
// warpxN_dp4a::lane_row (q4_K_lanes.h).
#include "kernels/cuda/q4_K_kernels.cuh"

namespace qmv::cuda::q4k {
namespace {

template <int kWarps>
__global__ void __launch_bounds__(kWarps* kWarp)
    warpxN_dp4a_kernel(const std::uint32_t* __restrict__ w, const std::uint32_t* __restrict__ x, float* __restrict__ y,
                    int nb) {
  __shared__ float warp_sums[kWarps];
  const int row = blockIdx.x;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float acc = warpxN_dp4a::lane_row<kWarps>(Q4KLoads{}, row_words_of(w, row, nb), x, nb, warp, lane);
  acc = block_sum_to_thread_0<kWarps>(acc, warp_sums);
  if (threadIdx.x == 0) y[row] = acc;
}

template <int kWarps>
Status run(const MatVecArgs& a, const char* name) {
  if (Status s = check_launch(name, a, 4, 4); !s.ok()) return s;
  const int nb = static_cast<int>(a.shape.cols / kSuperBlock);
  return launch_checked(name, [&] {
    warpxN_dp4a_kernel<kWarps><<<static_cast<unsigned>(warpxN_dp4a::grid(a.shape.rows)), kWarps * kWarp, 0, stream_of(a)>>>(
        static_cast<const std::uint32_t*>(a.w), static_cast<const std::uint32_t*>(a.x), a.y, nb);
  });
}

constexpr const char* kNameX2 = "q4_K.cuda.warpx2_dp4a_q8_1";
constexpr const char* kNameX3 = "q4_K.cuda.warpx3_dp4a_q8_1";
constexpr const char* kNameX4 = "q4_K.cuda.warpx4_dp4a_q8_1";
Status run_x2(const MatVecArgs& a) { return run<2>(a, kNameX2); }
Status run_x3(const MatVecArgs& a) { return run<3>(a, kNameX3); }
Status run_x4(const MatVecArgs& a) { return run<4>(a, kNameX4); }

}  // namespace

QMV_REGISTER_KERNEL(cuda_matvec_kernel(kNameX2, WeightType::Q4_K, ActFormat::Q8_1, run_x2,
                                       "Q4_K x Q8_1, 2 warps per row striding over super-blocks, 32-bit "
                                       "loads, header by shuffle, __dp4a, 4 super-blocks in flight per warp",
                                       61));
QMV_REGISTER_KERNEL(cuda_matvec_kernel(kNameX3, WeightType::Q4_K, ActFormat::Q8_1, run_x3,
                                       "Q4_K x Q8_1, 3 warps per row striding over super-blocks, 32-bit "
                                       "loads, header by shuffle, __dp4a, 4 super-blocks in flight per warp",
                                       61));
QMV_REGISTER_KERNEL(cuda_matvec_kernel(kNameX4, WeightType::Q4_K, ActFormat::Q8_1, run_x4,
                                       "Q4_K x Q8_1, 4 warps per row striding over super-blocks, 32-bit "
                                       "loads, header by shuffle, __dp4a, 4 super-blocks in flight per warp",
                                       61));

}  // namespace qmv::cuda::q4k
