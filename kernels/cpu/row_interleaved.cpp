// The row-interleaved layouts' repacking, compiled without ISA flags: it is plain
// byte moves, shared by the kernels of every ISA level that read the layout.
#include "row_interleaved.h"

#include "kernels/weight_memory.h"

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

// The 5-bit layouts of whole quants (BlockQ5_0x8, BlockQ5_Kx8): a chunk's byte of a low
// and a high weight's quants, and the high one's top two bits at their place (chunk k
// of the top byte's four).
std::uint8_t whole_and_low_three(int low, int high) { return static_cast<std::uint8_t>(low | (high & 0x07) << 5); }
std::uint8_t top_two_bits(int high, int k) { return static_cast<std::uint8_t>((high >> 3) << (2 * k)); }

// Row r's quants into a Q5 layout's chunks and top bits (BlockQ5_0x8).
template <class Layout, class Block>
void fill_five_bit_quants(Layout& o, int r, const Block& in) {
  std::uint32_t qh;
  std::memcpy(&qh, in.qh, sizeof(qh));
  // Weight j's quant: its nibble (j < 16 low, else high of byte j - 16), bit j of qh fifth.
  const auto quant = [&](int j) {
    const int nibble = j < 16 ? in.qs[j] & 0x0f : in.qs[j - 16] >> 4;
    return nibble | static_cast<int>(((qh >> j) & 1u) << 4);
  };
  for (int k = 0; k < 4; ++k) {
    o.top[4 * r + k] = 0;
    for (int c = 0; c < 4; ++c) {
      const int high = quant(16 + 4 * c + k);
      o.qs[c][4 * r + k] = whole_and_low_three(quant(4 * c + k), high);
      o.top[4 * r + k] |= top_two_bits(high, c);
    }
  }
}

void fill(BlockQ5_0x8& o, int r, const BlockQ5_0& in) {
  o.d[r] = in.d;
  fill_five_bit_quants(o, r, in);
}

void fill(BlockQ5_1x8& o, int r, const BlockQ5_1& in) {
  o.d[r] = in.d;
  o.m[r] = in.m;
  fill_five_bit_quants(o, r, in);
}

void fill(BlockQ8_0x8& o, int r, const BlockQ8_0& in) {
  for (int lane = 0; lane < kGroupRows; ++lane)
    if (BlockQ8_0x8::kDOrder[lane] == r) o.d[lane] = in.d;
  for (int c = 0; c < 8; ++c) std::memcpy(&o.qs[c][4 * r], &in.qs[4 * c], 4);
}

void fill(BlockQ4_Kx8& o, int r, const BlockQ4K& in) {
  o.d[r] = in.d;
  o.dmin[r] = in.dmin;
  for (int j = 0; j < 8; ++j) unpack_scale_min_k4(j, in.scales, o.scales[j][r], o.min_pairs[j / 2][2 * r + j % 2]);
  for (int pair = 0; pair < 4; ++pair)
    for (int c = 0; c < 8; ++c) std::memcpy(&o.qs[pair][c][4 * r], &in.qs[32 * pair + 4 * c], 4);
}

void fill(BlockQ5_Kx8& o, int r, const BlockQ5K& in) {
  o.d[r] = in.d;
  o.dmin[r] = in.dmin;
  for (int j = 0; j < 8; ++j) unpack_scale_min_k4(j, in.scales, o.scales[j][r], o.min_pairs[j / 2][2 * r + j % 2]);
  for (int g = 0; g < 4; ++g) {
    BlockQ5_Kx8::Quarter& q = o.quarter[g];
    for (int c = 0; c < 8; ++c)
      for (int k = 0; k < 4; ++k) {
        // Plain qs[32g + l]: weight 64g + l in the low nibble, 64g + 32 + l in the high
        // one; bit j of qh[l]: the fifth bit of weight 32j + l (sub-block j).
        const int l = 4 * c + k, nibbles = in.qs[32 * g + l], fifth = in.qh[l] >> (2 * g);
        const int low = (nibbles & 0x0f) | ((fifth & 1) << 4), high = (nibbles >> 4) | ((fifth & 2) << 3);
        q.qs[c][4 * r + k] = whole_and_low_three(low, high);
        q.top[c / 4][4 * r + k] |= top_two_bits(high, c % 4);
      }
  }
}

// Weight i of a plain Q6_K block: its 6-bit quant (0..63), low 4 bits and top 2 joined.
int q6_K_quant(const BlockQ6K& in, int i) {
  const int half = i / 128, quarter = (i % 128) / 32, l = i % 32;
  const int low = (in.ql[64 * half + 32 * (quarter & 1) + l] >> (4 * (quarter >> 1))) & 0x0f;
  const int high = (in.qh[32 * half + l] >> (2 * quarter)) & 0x03;
  return low | (high << 4);
}

void fill(BlockQ6_Kx8& o, int r, const BlockQ6K& in) {
  o.d[r] = in.d;
  for (int m = 0; m < 8; ++m) {
    o.scale_pairs[m][2 * r] = in.scales[2 * m];
    o.scale_pairs[m][2 * r + 1] = in.scales[2 * m + 1];
  }
  for (int g = 0; g < 4; ++g)
    for (int v = 0; v < 4; ++v)
      for (int k = 0; k < 4; ++k) {
        // The triple's four weights: chunks 2v, 2v+1 of the low half, then of the high.
        const int index[4] = {64 * g + 8 * v + k, 64 * g + 8 * v + 4 + k, 64 * g + 32 + 8 * v + k,
                              64 * g + 32 + 8 * v + 4 + k};
        int quant[4];
        for (int j = 0; j < 4; ++j) quant[j] = q6_K_quant(in, index[j]);
        for (int j = 0; j < 3; ++j) {
          const int spread_bits = (quant[3] >> (4 - 2 * j)) & 3;
          o.quarter[g].t[v][j][4 * r + k] = static_cast<std::uint8_t>(quant[j] | (spread_bits << 6));
        }
      }
}

// The bytes of a matrix's interleaved data.
template <class Layout>
std::size_t data_bytes(const RowGroups<Layout>& m) {
  return static_cast<std::size_t>(m.groups * m.blocks) * sizeof(Layout);
}

// Frees a matrix's interleaved data (nothing for one never made).
template <class Layout>
void free_groups(const RowGroups<Layout>& m) {
  free_weight_memory(const_cast<Layout*>(m.data), data_bytes(m));
}

// The interleaved copy of the matrix at w (shape, w_bytes), the last group padded with
// zero rows.
template <class Layout>
Status make_groups(Shape shape, const void* w, std::size_t w_bytes, RowGroups<Layout>& out) {
  using Block = typename Layout::Plain;
  constexpr int values = kValuesPerBlock<Block>;
  const char* type = Layout::kPlainName;
  if (shape.cols % values != 0 || shape.rows < 1)
    return Status::Error(fmt::format("{} row interleave needs cols % {} == 0 and rows >= 1", type, values));
  if (!w) return Status::Error(fmt::format("{} row interleave: no weights", type));
  const std::int64_t blocks = shape.cols / values;
  const std::int64_t groups = (shape.rows + kGroupRows - 1) / kGroupRows;
  const std::size_t bytes = static_cast<std::size_t>(groups * blocks) * sizeof(Layout);
  if (w_bytes < static_cast<std::size_t>(shape.rows * blocks) * sizeof(Block))
    return Status::Error(fmt::format("{} row interleave: the weights are shorter than the shape", type));
  auto* dst = static_cast<Layout*>(alloc_weight_memory(bytes));
  if (!dst) return Status::Error(fmt::format("out of memory for the {} row-interleaved copy", type));
  const auto* src = static_cast<const Block*>(w);
  const std::int64_t rows = shape.rows;
#pragma omp parallel for schedule(static)
  for (std::int64_t g = 0; g < groups; ++g) {
    for (std::int64_t b = 0; b < blocks; ++b) {
      Layout& o = dst[g * blocks + b];
      std::memset(&o, 0, sizeof(o));
      for (int r = 0; r < kGroupRows && g * kGroupRows + r < rows; ++r) fill(o, r, src[(g * kGroupRows + r) * blocks + b]);
    }
  }
  out = {shape, groups, blocks, dst};
  return Status::Ok();
}

}  // namespace

template <class Layout>
Status prepare_rows(const MatVecArgs& a, PreparedWeights* out) {
  RowGroups<Layout> m;
  if (Status st = make_groups(a.shape, a.w, a.w_bytes, m); !st.ok()) return st;
  auto* handle = new (std::nothrow) RowGroups<Layout>(m);
  if (!handle) {
    free_groups(m);
    return Status::Error("out of memory for a row-interleaved matrix");
  }
  *out = {handle, data_bytes(m)};
  return Status::Ok();
}

template <class Layout>
void release_rows(PreparedWeights p) {
  const auto* m = static_cast<const RowGroups<Layout>*>(p.handle);
  if (!m) return;
  free_groups(*m);
  delete m;
}

template <class Layout>
Status prepare_row_pair(const MatVecArgs& a, PreparedWeights* out) {
  RowGroupPair<Layout> pair;
  Status st = make_groups(a.shape, a.w, a.w_bytes, pair.first);
  if (st.ok()) st = make_groups(a.shape, a.w2, a.w2_bytes, pair.second);
  auto* handle = st.ok() ? new (std::nothrow) RowGroupPair<Layout>(pair) : nullptr;
  if (!handle) {
    free_groups(pair.first);
    free_groups(pair.second);
    return st.ok() ? Status::Error("out of memory for a row-interleaved matrix pair") : st;
  }
  *out = {handle, data_bytes(pair.first) + data_bytes(pair.second)};
  return Status::Ok();
}

template <class Layout>
void release_row_pair(PreparedWeights p) {
  const auto* pair = static_cast<const RowGroupPair<Layout>*>(p.handle);
  if (!pair) return;
  free_groups(pair->first);
  free_groups(pair->second);
  delete pair;
}

#define QMV_ROW_INTERLEAVED_LAYOUT(Layout)                                      \
  template Status prepare_rows<Layout>(const MatVecArgs&, PreparedWeights*);     \
  template void release_rows<Layout>(PreparedWeights);                           \
  template Status prepare_row_pair<Layout>(const MatVecArgs&, PreparedWeights*); \
  template void release_row_pair<Layout>(PreparedWeights);
QMV_ROW_INTERLEAVED_LAYOUT(BlockQ4_0x8)
QMV_ROW_INTERLEAVED_LAYOUT(BlockQ4_1x8)
QMV_ROW_INTERLEAVED_LAYOUT(BlockQ5_0x8)
QMV_ROW_INTERLEAVED_LAYOUT(BlockQ5_1x8)
QMV_ROW_INTERLEAVED_LAYOUT(BlockQ8_0x8)
QMV_ROW_INTERLEAVED_LAYOUT(BlockQ4_Kx8)
QMV_ROW_INTERLEAVED_LAYOUT(BlockQ5_Kx8)
QMV_ROW_INTERLEAVED_LAYOUT(BlockQ6_Kx8)
#undef QMV_ROW_INTERLEAVED_LAYOUT

Status batch_count_refused(int n) {
  return Status::Error(fmt::format("a row-interleaved batch kernel takes 1 to {} vectors, got {}", kMaxBatchVectors, n));
}

Status not_prepared_for(Shape shape) {
  return Status::Error("no row-interleaved copy of this " + to_string(shape) +
                       " matrix was prepared (the kernel reads only that copy)");
}

}  // namespace qmv::interleave
