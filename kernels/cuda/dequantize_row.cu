// The GPU row dequantizer: one thread per value of the row, each computing its value
// with dequantize_value.h (the arithmetic the CPU test replays against dequantize_row).
#include <string>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/dequantize_row.h"
#include "kernels/cuda/dequantize_value.h"

namespace qmv::cuda {
namespace {

__global__ void __launch_bounds__(kDequantizeThreads)
    dequantize_row_kernel(WeightType type, const std::uint8_t* __restrict__ matrix, std::size_t row_bytes,
                          std::int64_t rows, const int* __restrict__ row_index, float* __restrict__ y,
                          std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * kDequantizeThreads + threadIdx.x;
  if (i >= n) return;
  const std::uint8_t* row = matrix + static_cast<std::size_t>(clamped_row(*row_index, rows)) * row_bytes;
  y[i] = dequantize_row_value(type, row, i);
}

}  // namespace

Status dequantize_row_at(WeightType type, const void* matrix, std::int64_t rows, const int* row_index, float* y,
                         std::int64_t n, void* stream) {
  if (!matrix || !row_index || !y) return Status::Error(std::string(kDequantizeRowName) + ": null device pointer");
  if (rows <= 0) return Status::Error(std::string(kDequantizeRowName) + ": a matrix of no rows");
  if (n <= 0 || n % block_values(type) != 0)
    return Status::Error(std::string(kDequantizeRowName) + ": row length " + std::to_string(n) +
                         " is not a positive multiple of the " + std::string(to_string(type)) + " block");
  return launch_checked(kDequantizeRowName, [&] {
    dequantize_row_kernel<<<static_cast<unsigned>(dequantize_ctas(n)), kDequantizeThreads, 0,
                            static_cast<cudaStream_t>(stream)>>>(type, static_cast<const std::uint8_t*>(matrix),
                                                                 row_bytes(type, n), rows, row_index, y, n);
  });
}

}  // namespace qmv::cuda
