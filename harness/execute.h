// One kernel call on host buffers, whatever the kernel's backend: the check and the
// accuracy measurements use it so a CPU and a GPU variant are judged on the same bytes.
#pragma once

#include <cstddef>

#include "kernels/kernel.h"

namespace qmv {

// Weights and the activation (in the kernel's format) in host memory; y (and y2 for a
// fused op) host outputs of shape.rows floats (n * shape.rows for a batch op), which
// the call overwrites.
struct HostCall {
  Shape shape;
  const void* w = nullptr;
  std::size_t w_bytes = 0;
  const void* w2 = nullptr;  // fused ops only
  std::size_t w2_bytes = 0;
  const void* x = nullptr;
  std::size_t x_bytes = 0;
  float* y = nullptr;
  float* y2 = nullptr;  // fused ops only
  int threads = 1;      // CPU kernels
  // Batch ops: x holds n prepared vectors and y n outputs of shape.rows, back to back.
  int n = 1;
};

// A CPU kernel runs through invoke() on the buffers themselves. A CUDA kernel gets
// device copies of the weights and activation, a NaN-poisoned device output, one
// launch, a synchronize, and its output copied back; any CUDA error names the kernel.
Status run_on_host_buffers(const KernelSpec& spec, const HostCall& call);

// Empty while this process's CUDA context works; once a kernel's fault has lost it,
// the kernel and its fault ("q4_K.cuda.x's fault"). No CUDA kernel can run after that.
std::string cuda_context_lost_after();

}  // namespace qmv
