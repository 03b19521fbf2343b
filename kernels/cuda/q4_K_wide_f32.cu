// Q4_K x f32, 8 warps (256 threads) per row: warp w takes super-blocks w, w + 8, ...
// byte per lane, and the eight warp sums meet in shared memory. More threads per
// row than legacy, to keep more loads in flight. Per-lane arithmetic: wide::lane_row
// (q4_K_lanes.h).
#include "kernels/cuda/q4_K_kernels.cuh"

namespace qmv::cuda::q4k {
namespace {

constexpr const char* kName = "q4_K.cuda.wide_f32";

__global__ void __launch_bounds__(wide::kThreads)
    wide_kernel(const std::uint8_t* __restrict__ w, const float* __restrict__ x, float* __restrict__ y, int nb) {
  __shared__ float warp_sums[wide::kWarps];
  const int row = blockIdx.x;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float acc = wide::lane_row(Q4KLoads{}, row_bytes_of(w, row, nb), x, nb, warp, lane);
  acc = block_sum_to_thread_0<wide::kWarps>(acc, warp_sums);
  if (threadIdx.x == 0) y[row] = acc;
}

Status run(const MatVecArgs& a) {
  if (Status s = check_launch(kName, a, 2, 4); !s.ok()) return s;
  const int nb = static_cast<int>(a.shape.cols / kSuperBlock);
  return launch_checked(kName, [&] {
    wide_kernel<<<static_cast<unsigned>(wide::grid(a.shape.rows)), wide::kThreads, 0, stream_of(a)>>>(
        static_cast<const std::uint8_t*>(a.w), static_cast<const float*>(a.x), a.y, nb);
  });
}

}  // namespace

QMV_REGISTER_KERNEL(cuda_matvec_kernel(kName, WeightType::Q4_K, ActFormat::F32, run,
                                       "Q4_K x f32, 8 warps per row striding over super-blocks, byte per "
                                       "lane, cross-warp sum in shared memory"));

}  // namespace qmv::cuda::q4k
