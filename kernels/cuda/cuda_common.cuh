// Device helpers shared by the CUDA variant files: warp reductions, fp16 loads, the
// launch check that names the kernel, and the host/device annotation that lets a
// variant's per-lane arithmetic live in a header the CPU tests can also compile.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <string>

#include "kernels/cuda/lane_math.h"
#include "kernels/kernel.h"
#include "kernels/vector_count.h"

namespace qmv::cuda {

inline constexpr int kWarp = 32;

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the 16 lanes of each half-warp (lanes 0-15 and 16-31 reduce separately).
__device__ __forceinline__ float half_warp_sum(float v) {
#pragma unroll
  for (int offset = 8; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Lets the kernel queued after this one launch now, where it was launched as a
// programmatic dependent (sm_90; a no-op otherwise). Such a kernel waits for this one
// to finish before it reads what this one writes, so a kernel may call this as it
// starts: the dependent's early start only overlaps its prologue.
__device__ __forceinline__ void let_dependent_kernel_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// In a kernel launched as a programmatic dependent: waits until the kernel before it
// has finished and its writes are visible (a no-op in one launched as usual).
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

inline cudaStream_t stream_of(const MatVecArgs& a) { return static_cast<cudaStream_t>(a.stream); }

// How many CTAs of `Kernel` (launched with `threads` threads and `smem` bytes of dynamic
// shared memory) the current device holds at once, or 0 when that cannot be queried.
// `setup` (null: none) first sets the function attributes the answer depends on.
// Looked up once per device: the occupancy query costs more than a launch.
template <auto Kernel>
std::int64_t resident_ctas(int threads, std::size_t smem = 0, cudaError_t (*setup)() = nullptr) {
  constexpr int kMaxDevices = 64;
  static std::atomic<std::int64_t> cached[kMaxDevices] = {};
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices) {
    cudaGetLastError();  // leave no error behind for launch_status to report
    return 0;
  }
  if (const std::int64_t known = cached[device].load(std::memory_order_relaxed); known > 0) return known;
  int sms = 0, per_sm = 0;
  if ((setup && setup() != cudaSuccess) ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, Kernel, threads, smem) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  const std::int64_t ctas = std::int64_t(sms) * per_sm;
  cached[device].store(ctas, std::memory_order_relaxed);
  return ctas;
}

// After every launch: the launch error (bad configuration, too much shared memory...)
// as a Status that names the kernel. Asynchronous faults surface at the caller's sync.
inline Status launch_status(const char* kernel) {
  const cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess) return Status::Ok();
  return Status::Error(std::string(kernel) + ": launch failed: " + cudaGetErrorString(err));
}

// Before a launch: clears an error an earlier call left behind (a failed allocation,
// say), so launch_status afterwards reports this launch's own. A sticky error (a device
// fault that broke the context) cannot be cleared; it is reported as the earlier
// failure it is, without launching, rather than blamed on this kernel.
inline Status clear_earlier_error(const char* kernel) {
  const cudaError_t earlier = cudaGetLastError();
  if (earlier == cudaSuccess) return Status::Ok();
  if (cudaPeekAtLastError() == cudaSuccess) return Status::Ok();
  return Status::Error(std::string(kernel) + ": not launched: the CUDA context had already failed: " +
                       cudaGetErrorString(earlier));
}

// One or more <<<>>> launches in `launch`, with the error state cleared before and read
// after: the Status names `kernel` only for what its own launch did.
template <class Launch>
Status launch_checked(const char* kernel, Launch&& launch) {
  if (Status s = clear_earlier_error(kernel); !s.ok()) return s;
  launch();
  return launch_status(kernel);
}

// What every run function checks before launching: pointer alignment for its vector
// loads (a misaligned vector load faults the whole context; a message is better)
// and sizes that fit the kernels' int indices.
inline Status check_launch(const char* kernel, const MatVecArgs& a, std::size_t weight_align, std::size_t act_align) {
  const auto misaligned = [](const void* p, std::size_t align) {
    return reinterpret_cast<std::uintptr_t>(p) % align != 0;
  };
  if (misaligned(a.w, weight_align))
    return Status::Error(std::string(kernel) + ": weights must be " + std::to_string(weight_align) + "-byte aligned");
  if (misaligned(a.x, act_align))
    return Status::Error(std::string(kernel) + ": activations must be " + std::to_string(act_align) + "-byte aligned");
  if (a.shape.rows > INT_MAX || a.shape.cols > INT_MAX)
    return Status::Error(std::string(kernel) + ": shape " + to_string(a.shape) + " is too large");
  return Status::Ok();
}

// A batch kernel's dispatch: launch(std::integral_constant<int, n>{}) for the call's
// n = 1..8 vectors, one kernel per count so each keeps its accumulators in registers.
template <class Launch>
Status for_vector_count(const char* kernel, int n, Launch&& launch) {
  return dispatch_vector_count(n, launch, [&](int refused) {
    return Status::Error(std::string(kernel) + ": takes 1 to " + std::to_string(kMaxBatchVectors) + " vectors, not " +
                         std::to_string(refused));
  });
}

}  // namespace qmv::cuda
