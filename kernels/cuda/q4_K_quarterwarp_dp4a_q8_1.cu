// Q4_K x Q8_1, quarter-warp per super-block: a warp works on one row at a time (grid-
// stride over rows), its four groups of eight lanes on four neighbouring super-blocks;
// lane t of a group reads qs words 4t..4t + 3 in one 16-byte load and the header in
// another, and each group keeps 3 super-blocks of loads in flight (12 per warp). Per
// 16 weights of a sub-block one scale, min and activation scale, where the half-warp
// kernel has them per 8. Per-lane arithmetic: quarterwarp_dp4a::lane_row
// (q4_K_lane_math.h).
#include "kernels/cuda/q4_K_cuda.cuh"

namespace qmv::cuda::q4k {
namespace {

constexpr const char* kName = "q4_K.cuda.quarterwarp_dp4a_q8_1";
// Grid-stride only past this many waves of resident blocks, as in halfwarp_dp4a.
constexpr std::int64_t kMaxWaves = 8;

__global__ void __launch_bounds__(quarterwarp_dp4a::kThreads, 8)
    quarterwarp_dp4a_kernel(const std::uint32_t* __restrict__ w, const std::uint32_t* __restrict__ x,
                            float* __restrict__ y, int rows, int nb) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const std::int64_t stride = quarterwarp_dp4a::row_stride(gridDim.x);
  for (std::int64_t row = quarterwarp_dp4a::first_row(blockIdx.x, warp); row < rows; row += stride) {
    float acc = quarterwarp_dp4a::lane_row(GlobalLoads{}, row_words_of(w, row, nb), x, nb, lane);
    acc = warp_sum(acc);
    if (lane == 0) y[row] = acc;
  }
}

Status run(const MatVecArgs& a) {
  if (Status s = check_launch(kName, a, 16, 4); !s.ok()) return s;
  const int nb = static_cast<int>(a.shape.cols / kSuperBlock);
  const std::int64_t resident = resident_blocks<quarterwarp_dp4a_kernel>(quarterwarp_dp4a::kThreads);
  const std::int64_t cap = resident > 0 ? kMaxWaves * resident : quarterwarp_dp4a::grid(a.shape.rows, INT_MAX);
  return launch_checked(kName, [&] {
    quarterwarp_dp4a_kernel<<<static_cast<unsigned>(quarterwarp_dp4a::grid(a.shape.rows, cap)),
                              quarterwarp_dp4a::kThreads, 0, stream_of(a)>>>(
        static_cast<const std::uint32_t*>(a.w), static_cast<const std::uint32_t*>(a.x), a.y,
        static_cast<int>(a.shape.rows), nb);
  });
}

}  // namespace

QMV_REGISTER_KERNEL(cuda_matvec_kernel(kName, WeightType::Q4_K, ActFormat::Q8_1, run,
                                       "Q4_K x Q8_1, quarter-warp per super-block (four per warp, x3 unrolled), "
                                       "16-byte weight loads, grid-stride over rows, __dp4a byte sums",
                                       61));

}  // namespace qmv::cuda::q4k
