// Q4_K x f32, multi-warp vectorized: N warps per row (one row per block of 32N
// threads) striding over super-blocks, a 32-bit qs word per lane, the header loaded
// by lanes 0..3 and broadcast by shuffle, 4 super-blocks in flight per warp, and the
// N warp sums met in shared memory. Registers .w2, .w3 and .w4. Per-lane arithmetic:
// multiwarp::lane_row (q4_K_lanes.h).
#include "kernels/cuda/q4_K_kernels.cuh"

namespace qmv::cuda::q4k {
namespace {

template <int kWarps>
__global__ void __launch_bounds__(kWarps* kWarp)
    multiwarp_kernel(const std::uint32_t* __restrict__ w, const float* __restrict__ x, float* __restrict__ y, int nb) {
  __shared__ float warp_sums[kWarps];
  const int row = blockIdx.x;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float acc = multiwarp::lane_row<kWarps>(Q4KLoads{}, row_words_of(w, row, nb), x, nb, warp, lane);
  acc = block_sum_to_thread_0<kWarps>(acc, warp_sums);
  if (threadIdx.x == 0) y[row] = acc;
}

template <int kWarps>
Status run(const MatVecArgs& a, const char* name) {
  if (Status s = check_launch(name, a, 4, 16); !s.ok()) return s;
  const int nb = static_cast<int>(a.shape.cols / kSuperBlock);
  return launch_checked(name, [&] {
    multiwarp_kernel<kWarps><<<static_cast<unsigned>(multiwarp::grid(a.shape.rows)), kWarps * kWarp, 0, stream_of(a)>>>(
        static_cast<const std::uint32_t*>(a.w), static_cast<const float*>(a.x), a.y, nb);
  });
}

constexpr const char* kNameW2 = "q4_K.cuda.multiwarp_f32.w2";
constexpr const char* kNameW3 = "q4_K.cuda.multiwarp_f32.w3";
constexpr const char* kNameW4 = "q4_K.cuda.multiwarp_f32.w4";
Status run_w2(const MatVecArgs& a) { return run<2>(a, kNameW2); }
Status run_w3(const MatVecArgs& a) { return run<3>(a, kNameW3); }
Status run_w4(const MatVecArgs& a) { return run<4>(a, kNameW4); }

}  // namespace

QMV_REGISTER_KERNEL(cuda_matvec_kernel(kNameW2, WeightType::Q4_K, ActFormat::F32, run_w2,
                                       "Q4_K x f32, 2 warps per row striding over super-blocks, 32-bit "
                                       "loads, header by shuffle, 4 super-blocks in flight per warp"));
QMV_REGISTER_KERNEL(cuda_matvec_kernel(kNameW3, WeightType::Q4_K, ActFormat::F32, run_w3,
                                       "Q4_K x f32, 3 warps per row striding over super-blocks, 32-bit "
                                       "loads, header by shuffle, 4 super-blocks in flight per warp"));
QMV_REGISTER_KERNEL(cuda_matvec_kernel(kNameW4, WeightType::Q4_K, ActFormat::F32, run_w4,
                                       "Q4_K x f32, 4 warps per row striding over super-blocks, 32-bit "
                                       "loads, header by shuffle, 4 super-blocks in flight per warp"));

}  // namespace qmv::cuda::q4k
