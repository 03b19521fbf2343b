// Q4_K x f32, multi-warp vectorized: N warps per row (one row per block of 32N
// threads) striding over super-blocks, a 32-bit qs word per lane, the header loaded
// by lanes 0..3 and broadcast by shuffle, 4 super-blocks in flight per warp, and the
// N warp sums met in shared memory. Registers warpx2, warpx3 and warpx4. Per-lane arithmetic:
// warpxN::lane_row (q4_K_lanes.h).
#include "kernels/cuda/q4_K_kernels.cuh"

namespace qmv::cuda::q4k {
namespace {

template <int kWarps>
__global__ void __launch_bounds__(kWarps* kWarp)
    warpxN_kernel(const std::uint32_t* __restrict__ w, const float* __restrict__ x, float* __restrict__ y, int nb) {
  __shared__ float warp_sums[kWarps];
  const int row = blockIdx.x;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float acc = warpxN::lane_row<kWarps>(Q4KLoads{}, row_words_of(w, row, nb), x, nb, warp, lane);
  acc = block_sum_to_thread_0<kWarps>(acc, warp_sums);
  if (threadIdx.x == 0) y[row] = acc;
}

template <int kWarps>
Status run(const MatVecArgs& a, const char* name) {
  if (Status s = check_launch(name, a, 4, 16); !s.ok()) return s;
  const int nb = static_cast<int>(a.shape.cols / kSuperBlock);
  return launch_checked(name, [&] {
    warpxN_kernel<kWarps><<<static_cast<unsigned>(warpxN::grid(a.shape.rows)), kWarps * kWarp, 0, stream_of(a)>>>(
        static_cast<const std::uint32_t*>(a.w), static_cast<const float*>(a.x), a.y, nb);
  });
}

constexpr const char* kNameX2 = "q4_K.cuda.warpx2_f32";
constexpr const char* kNameX3 = "q4_K.cuda.warpx3_f32";
constexpr const char* kNameX4 = "q4_K.cuda.warpx4_f32";
Status run_x2(const MatVecArgs& a) { return run<2>(a, kNameX2); }
Status run_x3(const MatVecArgs& a) { return run<3>(a, kNameX3); }
Status run_x4(const MatVecArgs& a) { return run<4>(a, kNameX4); }

}  // namespace

QMV_REGISTER_KERNEL(cuda_matvec_kernel(kNameX2, WeightType::Q4_K, ActFormat::F32, run_x2,
                                       "Q4_K x f32, 2 warps per row striding over super-blocks, 32-bit "
                                       "loads, header by shuffle, 4 super-blocks in flight per warp"));
QMV_REGISTER_KERNEL(cuda_matvec_kernel(kNameX3, WeightType::Q4_K, ActFormat::F32, run_x3,
                                       "Q4_K x f32, 3 warps per row striding over super-blocks, 32-bit "
                                       "loads, header by shuffle, 4 super-blocks in flight per warp"));
QMV_REGISTER_KERNEL(cuda_matvec_kernel(kNameX4, WeightType::Q4_K, ActFormat::F32, run_x4,
                                       "Q4_K x f32, 4 warps per row striding over super-blocks, 32-bit "
                                       "loads, header by shuffle, 4 super-blocks in flight per warp"));

}  // namespace qmv::cuda::q4k
