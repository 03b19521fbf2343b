// The GPU row dequantizer: one row of a weight matrix in device memory to floats in
// device memory, for every weight type (the embedding lookup of the GPU decode). Its
// arithmetic is dequantize_value.h, which the CPU tests replay against dequantize_row.
// Plain C++ header so g++-compiled code can call it.
#pragma once

#include <cstdint>

#include "kernels/formats/formats.h"
#include "kernels/kernel.h"

namespace qmv::cuda {

// The name the dequantizer's errors go by.
inline constexpr const char* kDequantizeRowName = "dequantize_row.cuda";

// y[0..n) = row *row_index of `matrix` (`rows` rows of row_bytes(type, n) bytes),
// dequantized. The row index is read from device memory when the kernel runs, so the
// launch can be captured once in a CUDA graph and replayed for any token; an index
// outside 0..rows-1 is clamped into it (clamped_row), never read past the matrix.
// matrix, row_index and y are device pointers; stream a cudaStream_t (nullptr: the
// default stream). Launches and checks the launch.
Status dequantize_row_at(WeightType type, const void* matrix, std::int64_t rows, const int* row_index, float* y,
                         std::int64_t n, void* stream);

}  // namespace qmv::cuda
