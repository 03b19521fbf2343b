// The scalar reference of the batch op (OpKind::MatVecBatch) for any weight type: each
// row dequantized once by the formats' dequantizer, then dotted with each of the n f32
// activation vectors. A file per weight type registers it (`<type>.cpu.scalar_batch_f32`,
// `<type>.cpu.scalar_batch` for float weights); every SIMD batch kernel of the type is
// checked against the same reference, column by column.
#pragma once

#include <cstdint>

#include "kernel.h"
#include "kernels/cpu_tiling.h"

namespace qmv::scalar_batch {

// The most vectors per call the scalar batch kernels take, as the SIMD ones.
inline constexpr int kMaxVectors = 8;

template <WeightType W>
Status run(const MatVecArgs& a) {
  const std::int64_t rows = a.shape.rows, cols = a.shape.cols;
  const std::size_t rb = row_bytes(W, cols);
  const auto* w = static_cast<const std::uint8_t*>(a.w);
  const auto* x = static_cast<const float*>(a.x);
  parallel_row_tiles(rows, a.threads, [&](std::int64_t r0, std::int64_t r1) {
    auto* row = static_cast<float*>(thread_scratch(static_cast<std::size_t>(cols) * sizeof(float)));
    for (std::int64_t r = r0; r < r1; ++r) {
      dequantize_row(W, w + rb * static_cast<std::size_t>(r), row, cols);
      for (int j = 0; j < a.n; ++j) {
        // A double sum: the reference should not carry the rounding of a float one.
        const float* xj = x + cols * j;
        double sum = 0;
        for (std::int64_t i = 0; i < cols; ++i) sum += static_cast<double>(row[i]) * xj[i];
        a.y[rows * j + r] = static_cast<float>(sum);
      }
    }
  });
  return Status::Ok();
}

// The record of type W's scalar batch kernel.
constexpr KernelRecord record(const char* name, WeightType type, Status (*run_fn)(const MatVecArgs&),
                              const char* description) {
  return cpu_batch_kernel(name, type, ActFormat::F32, run_fn, kMaxVectors, description);
}

}  // namespace qmv::scalar_batch
