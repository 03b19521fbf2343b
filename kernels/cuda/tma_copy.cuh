// TMA copies from global into shared memory (cp.async.bulk, made by the Tensor Memory
// Accelerator of sm_90 and newer) and the transaction barriers (mbarrier) that say when
// one has landed. One thread issues a copy of any multiple of 16 bytes with a single
// instruction, so a kernel can keep tens of kilobytes per SM in flight without spending
// registers or load instructions on them. Device code only; callers compile it under
// __CUDA_ARCH__ >= 900.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace qmv::cuda::tma {

__device__ __forceinline__ std::uint32_t shared_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// A barrier that completes its phase after one arrival and the bytes it was told to
// expect (arrive_expect).
__device__ __forceinline__ void barrier_init(std::uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(shared_address(bar)) : "memory");
}

// Makes the initialised barriers visible to the copy engine; the CTA then syncs.
__device__ __forceinline__ void barrier_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// The one arrival of this phase, with the bytes the copies of the phase will deliver.
__device__ __forceinline__ void arrive_expect(std::uint64_t* bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
}

// Orders this thread's earlier shared-memory accesses (and those the CTA barrier
// before it made visible) before the copy engine's writes that follow.
__device__ __forceinline__ void fence_before_copy() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global `src` to
// shared `dst`; the barrier counts them as they land.
__device__ __forceinline__ void copy_to_shared(void* dst, const void* src, std::uint32_t bytes, std::uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   shared_address(dst)),
               "l"(__cvta_generic_to_global(src)), "r"(bytes), "r"(shared_address(bar))
               : "memory");
}

__device__ __forceinline__ bool barrier_try_wait(std::uint64_t* bar, std::uint32_t parity) {
  std::uint32_t done;
  asm volatile(
      "{\n"
      " .reg .pred p;\n"
      " mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      " selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(shared_address(bar)), "r"(parity)
      : "memory");
  return done != 0;
}

// Waits for the phase of `parity` to complete. A copy that never lands (a bad address
// faults instead, but a miscounted byte total would not) traps after about a second
// rather than hanging the device: the launch then fails with an error that names it.
__device__ __forceinline__ void barrier_wait(std::uint64_t* bar, std::uint32_t parity) {
  const long long start = clock64();
  while (!barrier_try_wait(bar, parity))
    if (clock64() - start > (1ll << 31)) __trap();
}

}  // namespace qmv::cuda::tma
