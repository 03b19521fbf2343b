// Q6_K x Q8_1 on the GPU, staged: one warp per row over a grid-stride loop, its rows'
// super-blocks copied eight at a time into shared memory by asynchronous 16-byte copies
// (cp.async, sm_80 and later; plain loads before), two groups ahead of the one the
// half-warp lane code computes (q6_K_staged.h).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/q5_K_q6_K_launch.cuh"
#include "kernels/cuda/q6_K_staged.h"

namespace qmv::cuda::q5q6 {
namespace {

constexpr const char* kName = "q6_K.cuda.staged_dp4a_q8_1";

// Copies `bytes` (1..16) of global memory at a 16-aligned src to a 16-aligned dst in
// shared memory, zero-filling the rest of the 16.
__device__ __forceinline__ void copy_chunk_async(std::uint8_t* dst, const std::uint8_t* src, int bytes) {
#if __CUDA_ARCH__ >= 800
  const auto d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(__cvta_generic_to_global(src)),
               "r"(bytes)
               : "memory");
#else
  if (bytes == 16) {
    *reinterpret_cast<uint4*>(dst) = __ldg(reinterpret_cast<const uint4*>(src));
  } else {
    for (int k = 0; k < 16; ++k) dst[k] = k < bytes ? src[k] : 0;
  }
#endif
}

__device__ __forceinline__ void commit_copies() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most `kPending` of this thread's committed copy groups are in flight.
template <int kPending>
__device__ __forceinline__ void wait_copies() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

__global__ void __launch_bounds__(kRowWarpsPerBlock * kLanes, 8)
    staged_kernel(const std::uint8_t* __restrict__ w, const BlockQ8_1* __restrict__ x, float* __restrict__ y,
                  std::int64_t rows, std::int64_t nb) {
  __shared__ __align__(16) std::uint8_t stages[kRowWarpsPerBlock][kStagedStages][kStageBytes];
  const int warp = static_cast<int>(threadIdx.x) / kLanes, lane = static_cast<int>(threadIdx.x) % kLanes;
  const std::int64_t row_stride = warp_row_stride(static_cast<int>(gridDim.x), kRowWarpsPerBlock);
  const int groups = q6k_staged_groups(nb);
  const std::int64_t first_row = warp_first_row(static_cast<int>(blockIdx.x), warp, kRowWarpsPerBlock);
  // The copies run kStagedStages - 1 groups ahead of the computing; every lane commits a
  // group of copies per step, copies or not, so the counts agree.
  Q6KStagedCursor ahead{first_row};
  int ahead_stage = 0;
  const auto issue = [&] {
    if (ahead.row < rows) {
      const Q6KStage s = q6k_stage(ahead.row, ahead.group, nb);
      std::uint8_t* dst = stages[warp][ahead_stage];
      const std::uint8_t* src = w + s.aligned;
      for (int c = lane; c < s.chunks; c += kLanes)
        copy_chunk_async(dst + 16 * c, src + 16 * c, c == s.chunks - 1 ? s.last_chunk_bytes : 16);
    }
    commit_copies();
    ahead.next(groups, row_stride);
    ahead_stage = ahead_stage + 1 == kStagedStages ? 0 : ahead_stage + 1;
  };
  for (int i = 0; i < kStagedStages - 1; ++i) issue();
  StagedReads mem;
  WarpShuffle shfl;
  float partial = 0.0f;
  int stage = 0;
  for (Q6KStagedCursor at{first_row}; at.row < rows; at.next(groups, row_stride)) {
    // Into the stage the previous group used: every lane has left it (the __syncwarp below).
    issue();
    wait_copies<kStagedStages - 1>();
    __syncwarp();  // the other lanes' copies of this group are visible
    const Q6KStage s = q6k_stage(at.row, at.group, nb);
    partial += Q6KStagedGroupRow::partial(mem, shfl, stages[warp][stage] + s.head, q6k_staged_activation(x, at.group),
                                          s.blocks, lane);
    if (at.group == groups - 1) {
      const float sum = warp_sum(partial);
      if (lane == 0) y[at.row] = sum;
      partial = 0.0f;
    }
    stage = stage + 1 == kStagedStages ? 0 : stage + 1;
    __syncwarp();
  }
  wait_copies<0>();
}

Status run(const MatVecArgs& a) {
  static ResidentBlocks resident;
  // All of the stages fit only with the largest shared-memory carveout (a hint; the
  // residency asked for next says what the device granted).
  static const cudaError_t carveout =
      cudaFuncSetAttribute(staged_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
  if (carveout != cudaSuccess) cudaGetLastError();
  if (Status s = check_launch(kName, a, 16, 4); !s.ok()) return s;
  const int blocks = resident.get(staged_kernel, kRowWarpsPerBlock * kLanes);
  const int grid = balanced_warp_per_row_grid(a.shape.rows, blocks);
  return launch_checked(kName, [&] {
    staged_kernel<<<grid, kRowWarpsPerBlock * kLanes, 0, stream_of(a)>>>(
        static_cast<const std::uint8_t*>(a.w), static_cast<const BlockQ8_1*>(a.x), a.y, a.shape.rows,
        a.shape.cols / kSuperBlock);
  });
}

}  // namespace
}  // namespace qmv::cuda::q5q6

QMV_REGISTER_KERNEL(qmv::cuda_matvec_kernel(
    "q6_K.cuda.staged_dp4a_q8_1", qmv::WeightType::Q6_K, qmv::ActFormat::Q8_1, qmv::cuda::q5q6::run,
    "Q6_K x Q8_1, warp per row, super-blocks staged eight at a time in shared memory by 16-byte cp.async two "
    "groups ahead, half-warp __dp4a lane code; weights 16-byte aligned",
    61));
