// Q4_K x Q8_1, half-warp per super-block: a warp works on one row at a time (grid-
// stride over rows), its two half-warps on alternate super-blocks; lane t of a half
// reads qs words 2t and 2t + 1 in one 8-byte load and the header in one 16-byte load,
// and each half keeps 4 super-blocks of loads in flight. Byte sums by __dp4a, min
// terms from the Q8_1 block sums. Per-lane arithmetic: halfwarp_dp4a::lane_row
// (q4_K_lane_math.h).
#include "kernels/cuda/q4_K_cuda.cuh"

namespace qmv::cuda::q4k {
namespace {

constexpr const char* kName = "q4_K.cuda.halfwarp_dp4a_q8_1";
// Grid-stride only past this many waves of resident blocks: below it every warp has
// one row and the block scheduler balances the tail; above it (vocabulary-sized
// matrices) blocks are reused instead of launched by the ten thousand.
constexpr std::int64_t kMaxWaves = 8;

// 8 blocks of 128 threads per SM at <= 64 registers: 1024 threads, enough 16-byte
// loads in flight per SM for HBM (4 super-blocks per half-warp).
__global__ void __launch_bounds__(halfwarp_dp4a::kThreads, 8)
    halfwarp_dp4a_kernel(const std::uint32_t* __restrict__ w, const std::uint32_t* __restrict__ x, float* __restrict__ y,
                   int rows, int nb) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const std::int64_t stride = halfwarp_dp4a::row_stride(gridDim.x);
  for (std::int64_t row = halfwarp_dp4a::first_row(blockIdx.x, warp); row < rows; row += stride) {
    float acc = halfwarp_dp4a::lane_row(GlobalLoads{}, row_words_of(w, row, nb), x, nb, lane);
    acc = warp_sum(acc);
    if (lane == 0) y[row] = acc;
  }
}

Status run(const MatVecArgs& a) {
  if (Status s = check_launch(kName, a, 16, 4); !s.ok()) return s;
  const int nb = static_cast<int>(a.shape.cols / kSuperBlock);
  const std::int64_t resident = resident_blocks<halfwarp_dp4a_kernel>(halfwarp_dp4a::kThreads);
  const std::int64_t cap = resident > 0 ? kMaxWaves * resident : halfwarp_dp4a::grid(a.shape.rows, INT_MAX);
  return launch_checked(kName, [&] {
    halfwarp_dp4a_kernel<<<static_cast<unsigned>(halfwarp_dp4a::grid(a.shape.rows, cap)), halfwarp_dp4a::kThreads, 0, stream_of(a)>>>(
        static_cast<const std::uint32_t*>(a.w), static_cast<const std::uint32_t*>(a.x), a.y,
        static_cast<int>(a.shape.rows), nb);
  });
}

}  // namespace

QMV_REGISTER_KERNEL(cuda_matvec_kernel(kName, WeightType::Q4_K, ActFormat::Q8_1, run,
                                       "Q4_K x Q8_1, half-warp per super-block (two per warp in flight, x4 "
                                       "unrolled), grid-stride over rows, __dp4a byte sums",
                                       61));

}  // namespace qmv::cuda::q4k
