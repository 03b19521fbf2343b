// A CUDA kernel that faults on purpose (a device trap), registered only in qmvlab_faults:
// the fault loses its process's CUDA context, which the isolated check must confine to it.
#include <cuda_runtime.h>

#include "kernels/kernel.h"
#include "kernels/registry.h"

namespace {

__global__ void trap_kernel() { __trap(); }

qmv::Status trap(const qmv::MatVecArgs& a) {
  trap_kernel<<<1, 1, 0, static_cast<cudaStream_t>(a.stream)>>>();
  return qmv::Status::Ok();  // the fault surfaces at the caller's synchronize
}

}  // namespace

QMV_REGISTER_KERNEL(qmv::cuda_matvec_kernel("test.q4_K.cuda.trap", qmv::WeightType::Q4_K, qmv::ActFormat::F32, trap,
                                            "test-only: a device trap"));
