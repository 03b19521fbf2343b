// The matvec kernel fed by TMA copies (sm_90 and newer), for any weight type whose
// lane code can read a row's super-blocks from shared memory. Kernels that load into
// registers keep a few super-blocks per warp in flight, too few bytes per SM to cover
// HBM's latency (results/README.md, "nvidia-h100-80gb-hbm3"). Here lane 0 of each warp
// streams the warp's rows (tma_schedule.h) chunk by chunk into a ring of Chunk::kStages
// shared-memory stages of its own with cp.async.bulk: tens of kilobytes per SM in
// flight at no register cost. The warp computes each chunk from its stage; each lane
// keeps its share of the row over the row's chunks, and the warp's sum after the last
// is the row's output. A warp refills a stage as soon as it has read it: no CTA-wide
// barrier, no warp waits for another.
//
// The weights do not depend on the kernel before: launched as its programmatic
// dependent (MatVecArgs::overlap_previous), the kernel issues its first copies while
// that one still runs and waits for it only before it reads the activations.
//
// Chunk supplies: Act (the activation element type), kBlockBytes, kChunkBlocks,
// kStages, kMinCtasPerSm (for __launch_bounds__), and
//   static float partial(const std::uint8_t* row, const Act* x, int block0, int blocks, int lane)
// a lane's share of `blocks` super-blocks of a row starting at super-block block0, with
// `row` pointing at the first of them in shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/tma_copy.cuh"
#include "kernels/cuda/tma_schedule.h"
#include "kernels/cuda/cuda_common.cuh"

namespace qmv::cuda::tma {

inline constexpr int kThreads = kWarps * kWarp;

template <class Chunk>
inline constexpr int kStageBytes = stage_bytes<Chunk::kBlockBytes>(Chunk::kChunkBlocks);

template <class Chunk>
inline constexpr std::size_t kSharedBytes = std::size_t(kWarps) * Chunk::kStages * kStageBytes<Chunk>;

template <class Chunk>
__global__ void __launch_bounds__(kThreads, Chunk::kMinCtasPerSm)
    tma_rows_kernel(const std::uint8_t* __restrict__ w, const typename Chunk::Act* __restrict__ x,
                    float* __restrict__ y, Plan plan) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr int kBlockBytes = Chunk::kBlockBytes, kStages = Chunk::kStages, kStage = kStageBytes<Chunk>;
  extern __shared__ __align__(128) std::uint8_t shared_stages[];
  __shared__ __align__(8) std::uint64_t landed_all[kWarps][kStages];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  let_dependent_kernel_start();
  const WarpRows rows = warp_rows(plan, blockIdx.x, warp);
  const int n = items(plan, rows);
  if (n == 0) {  // a warp past its CTA's rows
    // Still waits: a kernel launched as this one's dependent counts on this grid ending
    // only after the grid before it, which takes one waiting thread.
    wait_for_previous_kernel();
    return;
  }
  std::uint8_t* const stages = shared_stages + std::size_t(warp) * kStages * kStage;
  std::uint64_t* const landed = landed_all[warp];

  // Lane 0: item i into stage i % kStages.
  auto issue = [&](int i) {
    const Copy c = item_copy<kBlockBytes>(plan, item(plan, rows, i));
    std::uint64_t* bar = &landed[i % kStages];
    tma::arrive_expect(bar, c.bytes);
    tma::copy_to_shared(stages + (i % kStages) * kStage, w + c.src_offset, c.bytes, bar);
  };

  if (lane == 0) {
    for (int s = 0; s < kStages; ++s) tma::barrier_init(&landed[s]);
    tma::barrier_init_fence();
    for (int i = 0; i < n && i < kStages; ++i) issue(i);
  }
  __syncwarp();
  wait_for_previous_kernel();  // the activations, and y, are the previous kernel's to finish with

  float acc = 0.0f;  // this lane's share of its row, over the row's chunks
  for (int i = 0; i < n; ++i) {
    const int s = i % kStages;
    tma::barrier_wait(&landed[s], static_cast<std::uint32_t>((i / kStages) & 1));
    const Item it = item(plan, rows, i);
    const int data_offset = item_copy<kBlockBytes>(plan, it).data_offset;
    acc += Chunk::partial(stages + s * kStage + data_offset, x, it.block0, it.blocks, lane);
    if (it.last_chunk) {
      const float total = warp_sum(acc);
      if (lane == 0) y[it.row] = total;
      acc = 0.0f;
    }
    __syncwarp();  // every lane is done with stage s before it is refilled
    if (lane == 0 && i + kStages < n) {
      tma::fence_before_copy();
      issue(i + kStages);
    }
  }
#elif defined(__CUDA_ARCH__)
  (void)&Chunk::partial;  // referenced in every pass, so no pass warns it is unused
  __trap();               // registered for sm_90 and newer: never launched on older devices
#endif
}

// The opt-in to more than 48 KiB of dynamic shared memory, before the occupancy query.
// The stages take most of the SM's unified L1/shared memory: the largest shared
// carveout, or fewer CTAs fit (the activations, a few KiB, keep the L1 left).
template <class Chunk>
cudaError_t allow_stages() {
  const cudaError_t err = cudaFuncSetAttribute(tma_rows_kernel<Chunk>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(kSharedBytes<Chunk>));
  if (err != cudaSuccess) return err;
  return cudaFuncSetAttribute(tma_rows_kernel<Chunk>, cudaFuncAttributePreferredSharedMemoryCarveout,
                              cudaSharedmemCarveoutMaxShared);
}

// The launch: one wave of CTAs (at most one per row). The caller has checked the shape.
template <class Chunk>
Status run_tma_rows(const MatVecArgs& a, const char* name) {
  if (Status s = check_launch(name, a, 16, 4); !s.ok()) return s;
  const std::int64_t resident =
      resident_ctas<tma_rows_kernel<Chunk>>(kThreads, kSharedBytes<Chunk>, allow_stages<Chunk>);
  if (resident <= 0)
    return Status::Error(std::string(name) + ": the device holds no CTA with " +
                         std::to_string(kSharedBytes<Chunk>) + " bytes of shared memory");
  const Plan plan = make_plan(a.shape.rows, static_cast<int>(a.shape.cols / 256), Chunk::kChunkBlocks, resident);
  const auto* w = static_cast<const std::uint8_t*>(a.w);
  const auto* x = static_cast<const typename Chunk::Act*>(a.x);
  return launch_checked(name, [&] {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(plan.ctas));
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = kSharedBytes<Chunk>;
    config.stream = stream_of(a);
    cudaLaunchAttribute overlap{};
    overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    overlap.val.programmaticStreamSerializationAllowed = 1;
    if (a.overlap_previous) {
      config.attrs = &overlap;
      config.numAttrs = 1;
    }
    cudaLaunchKernelEx(&config, tma_rows_kernel<Chunk>, w, x, a.y, plan);
  });
}

}  // namespace qmv::cuda::tma
