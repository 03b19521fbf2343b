// The work schedule of the matvecs fed by TMA copies (cp.async.bulk, made by the Hopper
// Tensor Memory Accelerator): which rows each warp owns and which bytes each of its pipeline stages brings
// into shared memory. Host+device, so the CPU tests replay it copy by copy.
//
// Each CTA of the grid owns a contiguous range of rows; the ranges differ by at most
// one row, so every CTA streams about the same bytes and they finish together (a
// grid-stride over row blocks would leave a last, partial wave). Warp w of a CTA takes
// rows w, w + kWarps, ... of its range, each in column chunks of at most a given number
// of super-blocks, left to right. One (row, chunk) is an item; the warp's items flow
// through a ring of stages of its own, one TMA copy per item, so warps neither share
// stages nor wait for each other.
#pragma once

#include <cstdint>

#include "kernels/cuda/lane_math.h"

namespace qmv::cuda::tma {

inline constexpr int kWarps = 8;  // of a CTA

struct Plan {
  std::int64_t rows = 0;
  int ctas = 1;
  int nb = 0;            // super-blocks per row
  int chunks = 1;  // chunks per row, their lengths differing by at most one super-block
};

// `max_ctas`: the CTAs resident at once (one wave); at least one, at most one per row.
// Chunks are as even as the row allows: 56 super-blocks in chunks of at most 16 are
// four chunks of 14, not three of 16 and one of 8; 43 are 14, 14 and 15.
QMV_HD Plan make_plan(std::int64_t rows, int nb, int max_chunk_blocks, std::int64_t max_ctas) {
  Plan p;
  p.rows = rows;
  p.nb = nb;
  const std::int64_t ctas = max_ctas < rows ? max_ctas : rows;
  p.ctas = static_cast<int>(ctas > 1 ? ctas : 1);
  p.chunks = (nb + max_chunk_blocks - 1) / max_chunk_blocks;
  if (p.chunks < 1) p.chunks = 1;
  return p;
}

// The rows of one warp: first, first + kWarps, ... below end.
struct WarpRows {
  std::int64_t first = 0, end = 0;
};

// Two 64-bit divisions: once per warp, not per item.
QMV_HD WarpRows warp_rows(const Plan& p, int cta, int warp) {
  const std::int64_t base = p.rows / p.ctas, extra = p.rows % p.ctas;
  const auto cta_first = [&](std::int64_t c) { return c * base + (c < extra ? c : extra); };
  return {cta_first(cta) + warp, cta_first(cta + 1)};
}

// How many items the warp runs.
QMV_HD int items(const Plan& p, const WarpRows& r) {
  const std::int64_t rows = r.first < r.end ? (r.end - r.first + kWarps - 1) / kWarps : 0;
  return static_cast<int>(rows) * p.chunks;
}

struct Item {
  std::int64_t row = 0;
  int block0 = 0;  // the chunk's first super-block
  int blocks = 0;  // super-blocks in the chunk
  bool last_chunk = false;
};

// The warp's item i: its rows in order, each one's chunks left to right.
QMV_HD Item item(const Plan& p, const WarpRows& r, int i) {
  const int k = i / p.chunks, chunk = i - k * p.chunks;
  Item it;
  it.row = r.first + std::int64_t(k) * kWarps;
  it.block0 = static_cast<int>(std::int64_t(chunk) * p.nb / p.chunks);
  it.blocks = static_cast<int>(std::int64_t(chunk + 1) * p.nb / p.chunks) - it.block0;
  it.last_chunk = chunk == p.chunks - 1;
  return it;
}

// TMA copies move multiples of 16 bytes between 16-byte aligned addresses. Where a
// block is not a multiple of 16 bytes long (Q6_K's 210), an item's copy is widened to
// the 16-byte boundaries around its chunk, and the chunk's first block lies
// `data_offset` bytes into the copy. A widened copy reads at most 15 bytes past the
// chunk's end, never past the matrix's when its size is a multiple of 16 bytes (the
// kernels' shape rule).
template <int kBlockBytes>
QMV_HD constexpr int stage_bytes(int chunk_blocks) {
  return (chunk_blocks * kBlockBytes + 15) / 16 * 16 + (kBlockBytes % 16 != 0 ? 16 : 0);
}

struct Copy {
  std::int64_t src_offset = 0;  // in the matrix
  std::uint32_t bytes = 0;
  int data_offset = 0;  // of the chunk's first block, from the copy's start
};

template <int kBlockBytes>
QMV_HD Copy item_copy(const Plan& p, const Item& it) {
  constexpr std::int64_t kAlignDown = ~std::int64_t(15);
  const std::int64_t start = (it.row * p.nb + it.block0) * std::int64_t(kBlockBytes);
  const std::int64_t end = start + std::int64_t(it.blocks) * kBlockBytes;
  Copy c;
  c.src_offset = start & kAlignDown;
  c.bytes = static_cast<std::uint32_t>(((end + 15) & kAlignDown) - c.src_offset);
  c.data_offset = static_cast<int>(start - c.src_offset);
  return c;
}

}  // namespace qmv::cuda::tma
