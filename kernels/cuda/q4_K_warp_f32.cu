// Q4_K x f32, the baseline GPU layout: one warp (a 32-thread block) per row, each
// lane a byte of every 32 of qs, every lane loading the block header byte by byte,
// a warp-shuffle sum. The per-lane arithmetic is warp::lane_row (q4_K_lanes.h).
#include "kernels/cuda/q4_K_kernels.cuh"

namespace qmv::cuda::q4k {
namespace {

constexpr const char* kName = "q4_K.cuda.warp_f32";

__global__ void __launch_bounds__(warp::kThreads)
    warp_kernel(const std::uint8_t* __restrict__ w, const float* __restrict__ x, float* __restrict__ y, int nb) {
  const int row = blockIdx.x;
  const int lane = threadIdx.x;
  float acc = warp::lane_row(Q4KLoads{}, row_bytes_of(w, row, nb), x, nb, lane);
  acc = warp_sum(acc);
  if (lane == 0) y[row] = acc;
}

Status run(const MatVecArgs& a) {
  if (Status s = check_launch(kName, a, 2, 4); !s.ok()) return s;
  const int nb = static_cast<int>(a.shape.cols / kSuperBlock);
  return launch_checked(kName, [&] {
    warp_kernel<<<static_cast<unsigned>(warp::grid(a.shape.rows)), warp::kThreads, 0, stream_of(a)>>>(
        static_cast<const std::uint8_t*>(a.w), static_cast<const float*>(a.x), a.y, nb);
  });
}

}  // namespace

QMV_REGISTER_KERNEL(cuda_matvec_kernel(kName, WeightType::Q4_K, ActFormat::F32, run,
                                       "Q4_K x f32, warp per row (32-thread blocks), byte per lane, "
                                       "header bytes loaded by every lane, warp-shuffle sum"));

}  // namespace qmv::cuda::q4k
