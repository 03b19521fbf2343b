// Q4_K x Q8_1, the plain DP4A layout: one warp per row (4 rows per 128-thread
// block), lane k takes qs word k of each super-block and dots its low and high
// nibbles with the matching int8 words of two Q8_1 blocks by __dp4a; the min term
// comes from the Q8_1 block sums s. Per-lane arithmetic: dp4a::lane_row
// (q4_K_lanes.h).
#include "kernels/cuda/q4_K_kernels.cuh"

namespace qmv::cuda::q4k {
namespace {

constexpr const char* kName = "q4_K.cuda.dp4a_q8_1";

__global__ void __launch_bounds__(dp4a::kThreads)
    dp4a_kernel(const std::uint32_t* __restrict__ w, const std::uint32_t* __restrict__ x, float* __restrict__ y,
                int rows, int nb) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const std::int64_t row = dp4a::row_of(blockIdx.x, warp);
  if (row >= rows) return;
  float acc = dp4a::lane_row(Q4KLoads{}, row_words_of(w, row, nb), x, nb, lane);
  acc = warp_sum(acc);
  if (lane == 0) y[row] = acc;
}

Status run(const MatVecArgs& a) {
  if (Status s = check_launch(kName, a, 16, 4); !s.ok()) return s;
  const int nb = static_cast<int>(a.shape.cols / kSuperBlock);
  return launch_checked(kName, [&] {
    dp4a_kernel<<<static_cast<unsigned>(dp4a::grid(a.shape.rows)), dp4a::kThreads, 0, stream_of(a)>>>(
        static_cast<const std::uint32_t*>(a.w), static_cast<const std::uint32_t*>(a.x), a.y,
        static_cast<int>(a.shape.rows), nb);
  });
}

}  // namespace

QMV_REGISTER_KERNEL(cuda_matvec_kernel(kName, WeightType::Q4_K, ActFormat::Q8_1, run,
                                       "Q4_K x Q8_1, warp per row, 32-bit word per lane, __dp4a integer dot, "
                                       "min term from the Q8_1 block sums",
                                       61));

}  // namespace qmv::cuda::q4k
