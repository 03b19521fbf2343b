// Q4_K x f32, one warp (a 32-thread block) per row as legacy, but lane 0 loads the
// block header as four 32-bit words (d | dmin and the 12 scale bytes as three words)
// and the warp receives them by shuffle: 4 loads per super-block instead of 32 lanes
// times 14. Per-lane arithmetic: coalesced::lane_row (q4_K_lanes.h).
#include "kernels/cuda/q4_K_kernels.cuh"

namespace qmv::cuda::q4k {
namespace {

constexpr const char* kName = "q4_K.cuda.coalesced_f32";

__global__ void __launch_bounds__(coalesced::kThreads)
    coalesced_kernel(const std::uint32_t* __restrict__ w, const float* __restrict__ x, float* __restrict__ y, int nb) {
  const int row = blockIdx.x;
  const int lane = threadIdx.x;
  float acc = coalesced::lane_row(Q4KLoads{}, row_words_of(w, row, nb), x, nb, lane);
  acc = warp_sum(acc);
  if (lane == 0) y[row] = acc;
}

Status run(const MatVecArgs& a) {
  if (Status s = check_launch(kName, a, 4, 4); !s.ok()) return s;
  const int nb = static_cast<int>(a.shape.cols / kSuperBlock);
  return launch_checked(kName, [&] {
    coalesced_kernel<<<static_cast<unsigned>(coalesced::grid(a.shape.rows)), coalesced::kThreads, 0, stream_of(a)>>>(
        static_cast<const std::uint32_t*>(a.w), static_cast<const float*>(a.x), a.y, nb);
  });
}

}  // namespace

QMV_REGISTER_KERNEL(cuda_matvec_kernel(kName, WeightType::Q4_K, ActFormat::F32, run,
                                       "Q4_K x f32, warp per row, byte per lane; lane 0 loads the scales as "
                                       "three 32-bit words and broadcasts them by shuffle"));

}  // namespace qmv::cuda::q4k
