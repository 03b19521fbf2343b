// The row-interleaved layouts' repacking, compiled without ISA flags: it is plain
// byte moves, shared by the kernels of every ISA level that read the layout.
#include "row_interleaved.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace qmv::interleave {

Status prepare_q4_0x8(const MatVecArgs& a, PreparedWeights* out) {
  if (a.shape.cols % kLegacyBlock != 0 || a.shape.rows < 1)
    return Status::Error("Q4_0 row interleave needs cols % 32 == 0 and rows >= 1");
  const std::int64_t blocks = a.shape.cols / kLegacyBlock;
  const std::int64_t groups = (a.shape.rows + kGroupRows - 1) / kGroupRows;
  const std::size_t bytes = static_cast<std::size_t>(groups * blocks) * sizeof(BlockQ4_0x8);
  if (a.w_bytes < static_cast<std::size_t>(a.shape.rows * blocks) * sizeof(BlockQ4_0))
    return Status::Error("Q4_0 row interleave: the weights are shorter than the shape");
  void* memory = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  auto* matrix = new (std::nothrow) Q4_0x8Matrix;
  if (!memory || !matrix) {
    std::free(memory);
    delete matrix;
    return Status::Error("out of memory for the Q4_0 row-interleaved copy");
  }
  auto* dst = static_cast<BlockQ4_0x8*>(memory);
  const auto* src = static_cast<const BlockQ4_0*>(a.w);
  const std::int64_t rows = a.shape.rows;
#pragma omp parallel for schedule(static)
  for (std::int64_t g = 0; g < groups; ++g) {
    for (std::int64_t b = 0; b < blocks; ++b) {
      BlockQ4_0x8& o = dst[g * blocks + b];
      std::memset(&o, 0, sizeof(o));
      for (int r = 0; r < kGroupRows; ++r) {
        const std::int64_t row = g * kGroupRows + r;
        if (row >= rows) break;
        const BlockQ4_0& in = src[row * blocks + b];
        o.d[r] = in.d;
        for (int c = 0; c < 4; ++c) std::memcpy(&o.qs[c][4 * r], &in.qs[4 * c], 4);
      }
    }
  }
  *matrix = {a.shape, groups, blocks, dst};
  *out = {matrix, bytes};
  return Status::Ok();
}

Status prepare_q4_Kx8(const MatVecArgs& a, PreparedWeights* out) {
  if (a.shape.cols % kSuperBlock != 0 || a.shape.rows < 1)
    return Status::Error("Q4_K row interleave needs cols % 256 == 0 and rows >= 1");
  const std::int64_t blocks = a.shape.cols / kSuperBlock;
  const std::int64_t groups = (a.shape.rows + kGroupRows - 1) / kGroupRows;
  const std::size_t bytes = static_cast<std::size_t>(groups * blocks) * sizeof(BlockQ4_Kx8);
  if (a.w_bytes < static_cast<std::size_t>(a.shape.rows * blocks) * sizeof(BlockQ4K))
    return Status::Error("Q4_K row interleave: the weights are shorter than the shape");
  void* memory = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  auto* matrix = new (std::nothrow) Q4_Kx8Matrix;
  if (!memory || !matrix) {
    std::free(memory);
    delete matrix;
    return Status::Error("out of memory for the Q4_K row-interleaved copy");
  }
  auto* dst = static_cast<BlockQ4_Kx8*>(memory);
  const auto* src = static_cast<const BlockQ4K*>(a.w);
  const std::int64_t rows = a.shape.rows;
#pragma omp parallel for schedule(static)
  for (std::int64_t g = 0; g < groups; ++g) {
    for (std::int64_t b = 0; b < blocks; ++b) {
      BlockQ4_Kx8& o = dst[g * blocks + b];
      std::memset(&o, 0, sizeof(o));
      for (int r = 0; r < kGroupRows; ++r) {
        const std::int64_t row = g * kGroupRows + r;
        if (row >= rows) break;
        const BlockQ4K& in = src[row * blocks + b];
        o.d[r] = in.d;
        o.dmin[r] = in.dmin;
        for (int j = 0; j < 8; ++j) unpack_scale_min_k4(j, in.scales, o.scales[j][r], o.mins[j][r]);
        for (int pair = 0; pair < 4; ++pair)
          for (int c = 0; c < 8; ++c) std::memcpy(&o.qs[pair][c][4 * r], &in.qs[32 * pair + 4 * c], 4);
      }
    }
  }
  *matrix = {a.shape, groups, blocks, dst};
  *out = {matrix, bytes};
  return Status::Ok();
}

void release_q4_Kx8(PreparedWeights p) {
  const auto* matrix = static_cast<const Q4_Kx8Matrix*>(p.handle);
  if (!matrix) return;
  std::free(const_cast<BlockQ4_Kx8*>(matrix->data));
  delete matrix;
}

Status not_prepared_for(Shape shape) {
  return Status::Error("no row-interleaved copy of this " + to_string(shape) +
                       " matrix was prepared (the kernel reads only that copy)");
}

void release_q4_0x8(PreparedWeights p) {
  const auto* matrix = static_cast<const Q4_0x8Matrix*>(p.handle);
  if (!matrix) return;
  std::free(const_cast<BlockQ4_0x8*>(matrix->data));
  delete matrix;
}

}  // namespace qmv::interleave
