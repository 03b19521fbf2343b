// Q4_K x f32, 4 rows (warps) per 128-thread block with the whole activation vector
// staged in shared memory once per block, so the four rows read it from there. The
// vector must fit the default 48 KiB of dynamic shared memory: cols <= 12288, which
// supports() enforces. Per-lane arithmetic: tiled::lane_row (q4_K_lanes.h).
#include "kernels/cuda/q4_K_kernels.cuh"

namespace qmv::cuda::q4k {
namespace {

constexpr const char* kName = "q4_K.cuda.tiled_f32";

__global__ void __launch_bounds__(tiled::kThreads)
    tiled_kernel(const std::uint8_t* __restrict__ w, const float* __restrict__ x, float* __restrict__ y, int rows,
                 int nb) {
  extern __shared__ __align__(16) float x_shared[];
  tiled::stage(Q4KLoads{}, x, x_shared, nb * kSuperBlock, threadIdx.x);
  __syncthreads();
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const std::int64_t row = tiled::row_of(blockIdx.x, warp);
  if (row >= rows) return;  // after the block's only barrier
  float acc = tiled::lane_row(SharedActLoads{}, row_bytes_of(w, row, nb), x_shared, nb, lane);
  acc = warp_sum(acc);
  if (lane == 0) y[row] = acc;
}

Status run(const MatVecArgs& a) {
  if (Status s = check_launch(kName, a, 2, 16); !s.ok()) return s;
  const int nb = static_cast<int>(a.shape.cols / kSuperBlock);
  const std::size_t shared_bytes = static_cast<std::size_t>(a.shape.cols) * sizeof(float);
  return launch_checked(kName, [&] {
    tiled_kernel<<<static_cast<unsigned>(tiled::grid(a.shape.rows)), tiled::kThreads, shared_bytes, stream_of(a)>>>(
        static_cast<const std::uint8_t*>(a.w), static_cast<const float*>(a.x), a.y, static_cast<int>(a.shape.rows), nb);
  });
}

constexpr KernelRecord record() {
  KernelRecord r = cuda_matvec_kernel(kName, WeightType::Q4_K, ActFormat::F32, run,
                                      "Q4_K x f32, 4 rows per 128-thread block, whole activation vector "
                                      "in shared memory (cols <= 12288), byte per lane");
  r.supports = tiled::supports;
  r.shape_rule = tiled::kShapeRule;
  return r;
}

}  // namespace

QMV_REGISTER_KERNEL(record());

}  // namespace qmv::cuda::q4k
