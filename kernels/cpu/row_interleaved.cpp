// The row-interleaved layouts' repacking, compiled without ISA flags: it is plain
// byte moves, shared by the kernels of every ISA level that read the layout.
#include "row_interleaved.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace qmv::interleave {
namespace {

// Row r's 16 nibble bytes into the four 32-byte chunks of the legacy layouts.
void copy_nibble_quads(std::uint8_t (&qs)[4][4 * kGroupRows], int r, const std::uint8_t* in) {
  for (int c = 0; c < 4; ++c) std::memcpy(&qs[c][4 * r], in + 4 * c, 4);
}

// Row r of a group from its plain block, one function per layout.
void fill(BlockQ4_0x8& o, int r, const BlockQ4_0& in) {
  o.d[r] = in.d;
  copy_nibble_quads(o.qs, r, in.qs);
}

void fill(BlockQ4_1x8& o, int r, const BlockQ4_1& in) {
  o.d[r] = in.d;
  o.m[r] = in.m;
  copy_nibble_quads(o.qs, r, in.qs);
}

// qh as BlockQ5_0x8 describes it, from the plain little-endian qh word.
std::uint32_t rearranged_fifth_bits(const std::uint8_t qh[4]) {
  std::uint32_t plain, out = 0;
  std::memcpy(&plain, qh, sizeof(plain));
  for (int c = 0; c < 4; ++c)
    for (int k = 0; k < 4; ++k) {
      out |= ((plain >> (4 * c + k)) & 1u) << (8 * k + 2 * c);
      out |= ((plain >> (16 + 4 * c + k)) & 1u) << (8 * k + 2 * c + 1);
    }
  return out;
}

void fill(BlockQ5_0x8& o, int r, const BlockQ5_0& in) {
  o.d[r] = in.d;
  o.qh[r] = rearranged_fifth_bits(in.qh);
  copy_nibble_quads(o.qs, r, in.qs);
}

void fill(BlockQ5_1x8& o, int r, const BlockQ5_1& in) {
  o.d[r] = in.d;
  o.m[r] = in.m;
  o.qh[r] = rearranged_fifth_bits(in.qh);
  copy_nibble_quads(o.qs, r, in.qs);
}

void fill(BlockQ8_0x8& o, int r, const BlockQ8_0& in) {
  for (int lane = 0; lane < kGroupRows; ++lane)
    if (BlockQ8_0x8::kDOrder[lane] == r) o.d[lane] = in.d;
  for (int c = 0; c < 8; ++c) std::memcpy(&o.qs[c][4 * r], &in.qs[4 * c], 4);
}

void fill(BlockQ4_Kx8& o, int r, const BlockQ4K& in) {
  o.d[r] = in.d;
  o.dmin[r] = in.dmin;
  for (int j = 0; j < 8; ++j) unpack_scale_min_k4(j, in.scales, o.scales[j][r], o.mins[j][r]);
  for (int pair = 0; pair < 4; ++pair)
    for (int c = 0; c < 8; ++c) std::memcpy(&o.qs[pair][c][4 * r], &in.qs[32 * pair + 4 * c], 4);
}

// The interleaved copy of a matrix of Block (values per block: kValuesPerBlock), the
// last group padded with zero rows.
template <class Layout, class Block>
Status prepare_groups(const MatVecArgs& a, PreparedWeights* out, const char* type) {
  constexpr int values = kValuesPerBlock<Block>;
  if (a.shape.cols % values != 0 || a.shape.rows < 1)
    return Status::Error(fmt::format("{} row interleave needs cols % {} == 0 and rows >= 1", type, values));
  const std::int64_t blocks = a.shape.cols / values;
  const std::int64_t groups = (a.shape.rows + kGroupRows - 1) / kGroupRows;
  const std::size_t bytes = static_cast<std::size_t>(groups * blocks) * sizeof(Layout);
  if (a.w_bytes < static_cast<std::size_t>(a.shape.rows * blocks) * sizeof(Block))
    return Status::Error(fmt::format("{} row interleave: the weights are shorter than the shape", type));
  void* memory = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  auto* matrix = new (std::nothrow) RowGroups<Layout>;
  if (!memory || !matrix) {
    std::free(memory);
    delete matrix;
    return Status::Error(fmt::format("out of memory for the {} row-interleaved copy", type));
  }
  auto* dst = static_cast<Layout*>(memory);
  const auto* src = static_cast<const Block*>(a.w);
  const std::int64_t rows = a.shape.rows;
#pragma omp parallel for schedule(static)
  for (std::int64_t g = 0; g < groups; ++g) {
    for (std::int64_t b = 0; b < blocks; ++b) {
      Layout& o = dst[g * blocks + b];
      std::memset(&o, 0, sizeof(o));
      for (int r = 0; r < kGroupRows && g * kGroupRows + r < rows; ++r) fill(o, r, src[(g * kGroupRows + r) * blocks + b]);
    }
  }
  *matrix = {a.shape, groups, blocks, dst};
  *out = {matrix, bytes};
  return Status::Ok();
}

template <class Layout>
void release_groups(PreparedWeights p) {
  const auto* matrix = static_cast<const RowGroups<Layout>*>(p.handle);
  if (!matrix) return;
  std::free(const_cast<Layout*>(matrix->data));
  delete matrix;
}

}  // namespace

Status prepare_q4_0x8(const MatVecArgs& a, PreparedWeights* out) {
  return prepare_groups<BlockQ4_0x8, BlockQ4_0>(a, out, "Q4_0");
}
void release_q4_0x8(PreparedWeights p) { release_groups<BlockQ4_0x8>(p); }

Status prepare_q4_1x8(const MatVecArgs& a, PreparedWeights* out) {
  return prepare_groups<BlockQ4_1x8, BlockQ4_1>(a, out, "Q4_1");
}
void release_q4_1x8(PreparedWeights p) { release_groups<BlockQ4_1x8>(p); }

Status prepare_q5_0x8(const MatVecArgs& a, PreparedWeights* out) {
  return prepare_groups<BlockQ5_0x8, BlockQ5_0>(a, out, "Q5_0");
}
void release_q5_0x8(PreparedWeights p) { release_groups<BlockQ5_0x8>(p); }

Status prepare_q5_1x8(const MatVecArgs& a, PreparedWeights* out) {
  return prepare_groups<BlockQ5_1x8, BlockQ5_1>(a, out, "Q5_1");
}
void release_q5_1x8(PreparedWeights p) { release_groups<BlockQ5_1x8>(p); }

Status prepare_q8_0x8(const MatVecArgs& a, PreparedWeights* out) {
  return prepare_groups<BlockQ8_0x8, BlockQ8_0>(a, out, "Q8_0");
}
void release_q8_0x8(PreparedWeights p) { release_groups<BlockQ8_0x8>(p); }

Status prepare_q4_Kx8(const MatVecArgs& a, PreparedWeights* out) {
  return prepare_groups<BlockQ4_Kx8, BlockQ4K>(a, out, "Q4_K");
}
void release_q4_Kx8(PreparedWeights p) { release_groups<BlockQ4_Kx8>(p); }

Status not_prepared_for(Shape shape) {
  return Status::Error("no row-interleaved copy of this " + to_string(shape) +
                       " matrix was prepared (the kernel reads only that copy)");
}

}  // namespace qmv::interleave
