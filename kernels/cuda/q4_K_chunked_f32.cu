// Q4_K x f32, as tiled (4 rows per 128-thread block, activations from shared
// memory), with the activations staged 8 super-blocks (8 KiB) at a time, so any
// cols fits. Per-lane arithmetic: chunked::lane_chunk (q4_K_lanes.h).
#include "kernels/cuda/q4_K_kernels.cuh"

namespace qmv::cuda::q4k {
namespace {

constexpr const char* kName = "q4_K.cuda.chunked_f32";

__global__ void __launch_bounds__(chunked::kThreads)
    chunked_kernel(const std::uint8_t* __restrict__ w, const float* __restrict__ x, float* __restrict__ y, int rows,
                   int nb) {
  __shared__ __align__(16) float x_chunk[chunked::kChunkFloats];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const std::int64_t row = chunked::row_of(blockIdx.x, warp);
  // A warp without a row still stages and meets every barrier.
  const bool has_row = row < rows;
  const std::uint8_t* row_bytes = row_bytes_of(w, has_row ? row : 0, nb);
  float acc = 0.0f;
  for (int c = 0; c < chunked::chunks(nb); ++c) {
    chunked::stage(Q4KLoads{}, x, x_chunk, c, nb, threadIdx.x);
    __syncthreads();
    if (has_row) acc += chunked::lane_chunk(SharedActLoads{}, row_bytes, x_chunk, c, nb, lane);
    __syncthreads();  // the chunk is read before the next one overwrites it
  }
  if (has_row) {
    acc = warp_sum(acc);
    if (lane == 0) y[row] = acc;
  }
}

Status run(const MatVecArgs& a) {
  if (Status s = check_launch(kName, a, 2, 16); !s.ok()) return s;
  const int nb = static_cast<int>(a.shape.cols / kSuperBlock);
  return launch_checked(kName, [&] {
    chunked_kernel<<<static_cast<unsigned>(chunked::grid(a.shape.rows)), chunked::kThreads, 0, stream_of(a)>>>(
        static_cast<const std::uint8_t*>(a.w), static_cast<const float*>(a.x), a.y, static_cast<int>(a.shape.rows), nb);
  });
}

}  // namespace

QMV_REGISTER_KERNEL(cuda_matvec_kernel(kName, WeightType::Q4_K, ActFormat::F32, run,
                                       "Q4_K x f32, 4 rows per 128-thread block, activations staged in "
                                       "8 KiB shared-memory chunks (any cols), byte per lane"));

}  // namespace qmv::cuda::q4k
