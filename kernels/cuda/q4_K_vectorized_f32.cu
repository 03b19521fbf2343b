// Q4_K x f32, one warp per row (4 rows per 128-thread block) with 32-bit coalesced
// weight loads: lane k reads qs word k, 8 nibbles, and its two float4s of
// activations; 4 super-blocks are loaded before any is used. Per-lane arithmetic:
// vectorized::lane_row (q4_K_lanes.h).
#include "kernels/cuda/q4_K_kernels.cuh"

namespace qmv::cuda::q4k {
namespace {

constexpr const char* kName = "q4_K.cuda.vectorized_f32";

__global__ void __launch_bounds__(vectorized::kThreads, 8)
    vectorized_kernel(const std::uint32_t* __restrict__ w, const float* __restrict__ x, float* __restrict__ y, int rows,
                      int nb) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const std::int64_t row = vectorized::row_of(blockIdx.x, warp);
  if (row >= rows) return;
  float acc = vectorized::lane_row(Q4KLoads{}, row_words_of(w, row, nb), x, nb, lane);
  acc = warp_sum(acc);
  if (lane == 0) y[row] = acc;
}

Status run(const MatVecArgs& a) {
  if (Status s = check_launch(kName, a, 16, 16); !s.ok()) return s;
  const int nb = static_cast<int>(a.shape.cols / kSuperBlock);
  return launch_checked(kName, [&] {
    vectorized_kernel<<<static_cast<unsigned>(vectorized::grid(a.shape.rows)), vectorized::kThreads, 0, stream_of(a)>>>(
        static_cast<const std::uint32_t*>(a.w), static_cast<const float*>(a.x), a.y, static_cast<int>(a.shape.rows), nb);
  });
}

}  // namespace

QMV_REGISTER_KERNEL(cuda_matvec_kernel(kName, WeightType::Q4_K, ActFormat::F32, run,
                                       "Q4_K x f32, warp per row, 32-bit coalesced weight loads (8 nibbles "
                                       "per lane), float4 activations, 4 super-blocks in flight"));

}  // namespace qmv::cuda::q4k
