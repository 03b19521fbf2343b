// Row-interleaved ("R8") weight layouts: the blocks of eight consecutive rows that
// cover the same 32 columns are stored together. A kernel then reads one sequential
// stream per eight rows (whatever the row length), loads each activation block once
// for eight rows, and finds the eight rows' scales in one 16-byte load, converted to
// eight floats by one instruction, so each float lane of its accumulator is one row.
// Made once per matrix by the kernel's prepare(), never inside a timed call.
//
// A matrix whose rows are not a multiple of eight gets a last group padded with zero
// rows (scale 0, quants 0); the kernels never write their outputs.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernel.h"
#include "kernels/cpu_tiling.h"
#include "kernels/vector_count.h"

namespace qmv::interleave {

inline constexpr int kGroupRows = 8;

// A prepared matrix (what MatVecArgs::prepared points to): groups of eight rows, each
// `blocks` interleaved blocks long, group after group, 64-byte aligned.
template <class Layout>
struct RowGroups {
  Shape shape;
  std::int64_t groups = 0;
  std::int64_t blocks = 0;  // per row
  const Layout* data = nullptr;
};

// Eight Q4_0 blocks, one per row of a group, same column range: 144 bytes, as eight
// plain blocks. Chunk c of qs holds, in bytes 4r..4r+3, bytes 4c..4c+3 of row r's
// qs: its low nibbles are weights 4c..4c+3 of row r, its high nibbles weights
// 16+4c..16+4c+3, so one 32-byte load gives four weights of each of the eight rows.
struct BlockQ4_0x8 {
  using Plain = BlockQ4_0;  // the plain block it interleaves
  static constexpr const char* kPlainName = "Q4_0";
  static constexpr int kZero = 8;  // w = d * (q - 8)
  static constexpr bool kHasMin = false;
  static constexpr bool kFifthBits = false;
  fp16_bits d[kGroupRows];
  std::uint8_t qs[4][4 * kGroupRows];
};
static_assert(sizeof(BlockQ4_0x8) == kGroupRows * sizeof(BlockQ4_0));
using Q4_0x8Matrix = RowGroups<BlockQ4_0x8>;

// Eight Q4_1 blocks likewise, with the eight rows' offsets m (w = d * q + m): 160 bytes.
struct BlockQ4_1x8 {
  using Plain = BlockQ4_1;  // the plain block it interleaves
  static constexpr const char* kPlainName = "Q4_1";
  static constexpr int kZero = 0;
  static constexpr bool kHasMin = true;
  static constexpr bool kFifthBits = false;
  fp16_bits d[kGroupRows];
  fp16_bits m[kGroupRows];
  std::uint8_t qs[4][4 * kGroupRows];
};
static_assert(sizeof(BlockQ4_1x8) == kGroupRows * sizeof(BlockQ4_1));
using Q4_1x8Matrix = RowGroups<BlockQ4_1x8>;

// Eight Q5_0 blocks (w = d * (q - 16)), 176 bytes as eight blocks, each 32-byte chunk c
// holding in byte 4r+k two of row r's 5-bit quants: the low weight 4c+k (against
// activation quant 4c+k) whole in bits 0-4, and the high weight 16+4c+k's low three
// bits in bits 5-7; its top two bits lie in byte 4r+k of `top`, at bits 2c and 2c+1.
// So a low weight is one AND away and a high one a shift and an AND, with its top bits
// shifted, masked and OR'd in.
struct BlockQ5_0x8 {
  using Plain = BlockQ5_0;  // the plain block it interleaves
  static constexpr const char* kPlainName = "Q5_0";
  static constexpr int kZero = 16;
  static constexpr bool kHasMin = false;
  static constexpr bool kFifthBits = true;
  fp16_bits d[kGroupRows];
  std::uint8_t top[4 * kGroupRows];
  std::uint8_t qs[4][4 * kGroupRows];
};
static_assert(sizeof(BlockQ5_0x8) == kGroupRows * sizeof(BlockQ5_0));
using Q5_0x8Matrix = RowGroups<BlockQ5_0x8>;

// Eight Q5_1 blocks (w = d * q + m), as Q5_0's with the rows' m: 192 bytes.
struct BlockQ5_1x8 {
  using Plain = BlockQ5_1;  // the plain block it interleaves
  static constexpr const char* kPlainName = "Q5_1";
  static constexpr int kZero = 0;
  static constexpr bool kHasMin = true;
  static constexpr bool kFifthBits = true;
  fp16_bits d[kGroupRows];
  fp16_bits m[kGroupRows];
  std::uint8_t top[4 * kGroupRows];
  std::uint8_t qs[4][4 * kGroupRows];
};
static_assert(sizeof(BlockQ5_1x8) == kGroupRows * sizeof(BlockQ5_1));
using Q5_1x8Matrix = RowGroups<BlockQ5_1x8>;

// Eight Q8_0 blocks (w = d * q, q signed): chunk c (of 8) holds, in bytes 4r..4r+3,
// quants 4c..4c+3 of row r. d is stored in the order the kernel's vphaddd leaves the
// rows in (0 1 4 5 2 3 6 7), so it scales them without a permute. 272 bytes.
struct BlockQ8_0x8 {
  using Plain = BlockQ8_0;  // the plain block it interleaves
  static constexpr const char* kPlainName = "Q8_0";
  static constexpr int kDOrder[kGroupRows] = {0, 1, 4, 5, 2, 3, 6, 7};
  fp16_bits d[kGroupRows];
  std::int8_t qs[8][4 * kGroupRows];
};
static_assert(sizeof(BlockQ8_0x8) == kGroupRows * sizeof(BlockQ8_0));
using Q8_0x8Matrix = RowGroups<BlockQ8_0x8>;

// Eight Q4_K super-blocks, one per row of a group, same 256 columns: 1184 bytes, 32
// more than eight plain blocks, for scales and mins unpacked to a byte each, laid out
// for the kernel's int16 multiplies:
//   d, dmin         row r's fp16 super-block scales in lane r
//   scales[j][r]    the 6-bit scale of sub-block j of row r (one 8-byte load per j)
//   min_pairs[p]    bytes 2r, 2r+1: the 6-bit mins of sub-blocks 2p and 2p+1 of row r,
//                   so widened to int16 they pair with two sub-blocks' activation sums
//                   in one vpmaddwd
//   qs[g][c]        32 bytes: bytes 4r..4r+3 = qs[32g+4c .. 32g+4c+3] of row r, whose
//                   low nibbles are weights 64g+4c.. of sub-block 2g and high nibbles
//                   weights 64g+32+4c.. of sub-block 2g+1
struct BlockQ4_Kx8 {
  using Plain = BlockQ4K;  // the plain block it interleaves
  static constexpr const char* kPlainName = "Q4_K";
  static constexpr bool kMinPairs = true;
  fp16_bits d[kGroupRows];
  fp16_bits dmin[kGroupRows];
  std::uint8_t scales[8][kGroupRows];
  std::uint8_t min_pairs[4][2 * kGroupRows];
  std::uint8_t qs[4][8][4 * kGroupRows];
};
static_assert(sizeof(BlockQ4_Kx8) == kGroupRows * sizeof(BlockQ4K) + 32);

using Q4_Kx8Matrix = RowGroups<BlockQ4_Kx8>;  // blocks: super-blocks per row

// Eight Q5_K super-blocks: 1440 bytes, 32 more than eight plain blocks. d, dmin,
// scales and min_pairs as BlockQ4_Kx8's; per pair g of sub-blocks (2g, 2g+1) a
// quarter holding, for chunk c of its weights (the low weight 64g+4c+k of row r, of
// sub-block 2g, and the high weight 64g+32+4c+k, of 2g+1, in byte 4r+k):
//   qs[c]           the low weight's five bits in bits 0-4, the high weight's low three
//                   in bits 5-7
//   top[h]          the high weights' top two bits for chunks c = 4h..4h+3, in bits
//                   2(c-4h) and 2(c-4h)+1
// so the low weight is one mask away, the high one a shift, a mask and the top bits
// OR'd in, each 32-byte load of top serving four chunks, and a quarter is read front
// to back.
struct BlockQ5_Kx8 {
  using Plain = BlockQ5K;  // the plain block it interleaves
  static constexpr const char* kPlainName = "Q5_K";
  static constexpr bool kMinPairs = true;
  struct Quarter {
    std::uint8_t top[2][4 * kGroupRows];
    std::uint8_t qs[8][4 * kGroupRows];
  };
  fp16_bits d[kGroupRows];
  fp16_bits dmin[kGroupRows];
  std::uint8_t scales[8][kGroupRows];
  std::uint8_t min_pairs[4][2 * kGroupRows];
  Quarter quarter[4];
};
static_assert(sizeof(BlockQ5_Kx8) == kGroupRows * sizeof(BlockQ5K) + 32);

using Q5_Kx8Matrix = RowGroups<BlockQ5_Kx8>;  // blocks: super-blocks per row

// Eight Q6_K super-blocks: 1680 bytes, as eight plain blocks. Weights are taken in
// quarters g of 64 (64g.. the low half, 64g+32.. the high half, as Q4_K's pairs), each
// quarter in four triples v of 32-byte rows. Byte 4r+k of a triple's rows holds a whole
// 6-bit quant of row r in bits 0-5 and two bits of a fourth one in bits 6-7:
//   d                 row r's fp16 scale in lane r
//   scale_pairs[m]    bytes 2r, 2r+1: the int8 scales of sub-blocks 2m and 2m+1 of
//                     row r, so widened to int16 they pair with two sub-blocks'
//                     activation sums in one vpmaddwd (the -32 offset), and one vpshufb
//                     repeats either one over both halves of each row's lane
//   quarter[g].t[v][0]  weight 64g+8v+k (chunk 2v of the low half); bits 6-7: bits 4-5
//                       of weight 64g+32+8v+4+k (chunk 2v+1 of the high half, the
//                       fourth chunk)
//   quarter[g].t[v][1]  weight 64g+8v+4+k (chunk 2v+1 of the low half); bits 6-7: bits
//                       2-3 of the fourth chunk's weight
//   quarter[g].t[v][2]  weight 64g+32+8v+k (chunk 2v of the high half); bits 6-7: bits
//                       0-1 of the fourth chunk's weight
// so three chunks of a triple are one mask each and the fourth three masks, three
// shifts and two ORs.
struct BlockQ6_Kx8 {
  using Plain = BlockQ6K;  // the plain block it interleaves
  static constexpr const char* kPlainName = "Q6_K";
  static constexpr bool kMinPairs = false;  // its offset is -32, in the kernel
  struct Quarter {
    std::uint8_t t[4][3][4 * kGroupRows];
  };
  fp16_bits d[kGroupRows];
  std::int8_t scale_pairs[8][2 * kGroupRows];
  Quarter quarter[4];
};
static_assert(sizeof(BlockQ6_Kx8) == kGroupRows * sizeof(BlockQ6K));

using Q6_Kx8Matrix = RowGroups<BlockQ6_Kx8>;  // blocks: super-blocks per row

// A fused up+gate kernel's prepared weights: both matrices (same shape) in one handle,
// `first` from MatVecArgs::w (output y), `second` from w2 (output y2).
template <class Layout>
struct RowGroupPair {
  RowGroups<Layout> first, second;
};

// KernelSpec::prepare / release of the row-interleaved kernels, for each layout above
// (cols a multiple of the plain block's values, any rows): prepare_rows makes the
// RowGroups of args.w, prepare_row_pair the RowGroupPair of args.w and args.w2.
template <class Layout>
Status prepare_rows(const MatVecArgs& a, PreparedWeights* out);
template <class Layout>
void release_rows(PreparedWeights p);
template <class Layout>
Status prepare_row_pair(const MatVecArgs& a, PreparedWeights* out);
template <class Layout>
void release_row_pair(PreparedWeights p);

// The error of a batch kernel called with a count of vectors it has no loop for
// (check_args refuses it first; a plain function, as not_prepared_for).
Status batch_count_refused(int n);

namespace {

// What the AVX2 row-interleaved kernels need, and what their AVX-512 VNNI forms need.
inline constexpr std::uint32_t kAvx2Features = CpuFeature::AVX2 | CpuFeature::FMA | CpuFeature::F16C;
inline constexpr std::uint32_t kAvx512VnniFeatures = CpuFeature::AVX512F | CpuFeature::AVX512BW |
                                                     CpuFeature::AVX512VL | CpuFeature::AVX512VNNI | kAvx2Features;

// The registry record of a row-interleaved kernel needing `features`: a matvec reading
// its prepared RowGroups, or, with op FusedUpGate, a fused kernel reading its prepared
// RowGroupPair.
template <class Layout>
constexpr KernelRecord interleaved_record(OpKind op, const char* name, WeightType type, ActFormat act,
                                          Status (*run)(const MatVecArgs&), const char* description,
                                          std::uint32_t features = kAvx2Features) {
  KernelRecord r = cpu_matvec_kernel(name, type, act, run, description, features);
  r.op = op;
  const bool pair = op == OpKind::FusedUpGate;
  r.prepare = pair ? prepare_row_pair<Layout> : prepare_rows<Layout>;
  r.release = pair ? release_row_pair<Layout> : release_rows<Layout>;
  return r;
}

// Calls run_range(g0, g1) for each thread's contiguous run of `groups` groups (one
// sequential stream), or once for all of them where one thread is better.
template <class RunRange>
void parallel_groups(std::int64_t groups, std::int64_t rows, int threads, RunRange&& run_range) {
  if (in_call_team()) {
    const int t = omp_get_thread_num(), team = omp_get_num_threads();
    run_range(groups * t / team, groups * (t + 1) / team);
    return;
  }
  if (threads <= 1 || rows < cpu_tiling().min_parallel_rows) {
    run_range(0, groups);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t) run_range(groups * t / threads, groups * (t + 1) / threads);
}

// Outputs of group g computed into tmp: the rows the matrix has go to y.
inline void store_group(const float* tmp, float* y, std::int64_t g, std::int64_t rows) {
  for (std::int64_t r = g * kGroupRows; r < rows && r < (g + 1) * kGroupRows; ++r) y[r] = tmp[r - g * kGroupRows];
}

// Each thread's contiguous run [g0, g1) of `groups` groups read as N parts side by
// side: step(g) with g[i] the group of part i, for each step; then leftover(g) for each
// group the parts leave over, the matrix's last (maybe padded) one always among them.
template <int N, class Step, class Leftover>
void for_each_step_of_parts(std::int64_t groups, std::int64_t rows, int threads, Step&& step, Leftover&& leftover) {
  parallel_groups(groups, rows, threads, [&](std::int64_t g0, std::int64_t g1) {
    const std::int64_t full_end = g1 < groups || rows % kGroupRows == 0 ? g1 : g1 - 1;
    const std::int64_t part = (full_end - g0) / N;
    for (std::int64_t k = 0; k < part; ++k) {
      std::int64_t g[N];
      for (int i = 0; i < N; ++i) g[i] = g0 + i * part + k;
      step(g);
    }
    for (std::int64_t g = g0 + N * part; g < g1; ++g) leftover(g);
  });
}

// The outputs of a row-interleaved matrix m: each thread takes one contiguous run of
// groups, read as NG parts side by side; the matrix's last group (maybe padded) and
// the parts' leftovers go one at a time, the padded one through a scratch output.
// dot(count, w, out) computes `count` groups (NG or 1, a std::integral_constant) from
// w[i] into out[i][0..7]. Internal linkage: the kernels that call it are built with
// ISA flags.
template <int NG, class Layout, class Dot>
void for_each_group(const RowGroups<Layout>& m, float* y, int threads, Dot&& dot) {
  const std::int64_t nb = m.blocks, rows = m.shape.rows;
  for_each_step_of_parts<NG>(
      m.groups, rows, threads,
      [&](const std::int64_t* g) {
        const Layout* w[NG];
        float* out[NG];
        for (int i = 0; i < NG; ++i) {
          w[i] = m.data + g[i] * nb;
          out[i] = y + g[i] * kGroupRows;
        }
        dot(std::integral_constant<int, NG>{}, w, out);
      },
      [&](std::int64_t g) {
        alignas(32) float tmp[kGroupRows];
        const Layout* w[1] = {m.data + g * nb};
        float* out[1] = {tmp};
        dot(std::integral_constant<int, 1>{}, w, out);
        store_group(tmp, y, g, rows);
      });
}

// The outputs of a fused pair p (y = first x, y2 = second x): each thread a contiguous
// run of groups, read as NP parts side by side, one dot call per step on group g of
// each part in both matrices (count 2 * NP: w and out in the order first, second of
// part 0, then of part 1, ...), so that 2 * NP weight streams share each activation
// load; the parts' leftovers one group (count 2) at a time, the padded last group
// through scratch outputs.
template <int NP, class Layout, class Dot>
void for_each_group_pair(const RowGroupPair<Layout>& p, float* y, float* y2, int threads, Dot&& dot) {
  const std::int64_t nb = p.first.blocks, rows = p.first.shape.rows;
  for_each_step_of_parts<NP>(
      p.first.groups, rows, threads,
      [&](const std::int64_t* g) {
        const Layout* w[2 * NP];
        float* out[2 * NP];
        for (int i = 0; i < NP; ++i) {
          w[2 * i] = p.first.data + g[i] * nb;
          w[2 * i + 1] = p.second.data + g[i] * nb;
          out[2 * i] = y + g[i] * kGroupRows;
          out[2 * i + 1] = y2 + g[i] * kGroupRows;
        }
        dot(std::integral_constant<int, 2 * NP>{}, w, out);
      },
      [&](std::int64_t g) {
        const Layout* w[2] = {p.first.data + g * nb, p.second.data + g * nb};
        if ((g + 1) * kGroupRows <= rows) {
          float* out[2] = {y + g * kGroupRows, y2 + g * kGroupRows};
          dot(std::integral_constant<int, 2>{}, w, out);
          return;
        }
        alignas(32) float tmp[2][kGroupRows];
        float* out[2] = {tmp[0], tmp[1]};
        dot(std::integral_constant<int, 2>{}, w, out);
        store_group(tmp[0], y, g, rows);
        store_group(tmp[1], y2, g, rows);
      });
}

// The outputs of a batch call (OpKind::MatVecBatch) of N vectors on a row-interleaved
// matrix m, vector j's outputs at y + j * rows: each thread a contiguous run of groups,
// one group (one weight stream) per step, read once for all N vectors; the padded last
// group through scratch outputs. dot(w, out) computes the group at w against every
// vector, into out[j][0..7].
template <int N, class Layout, class Dot>
void for_each_group_batch(const RowGroups<Layout>& m, float* y, int threads, Dot&& dot) {
  const std::int64_t nb = m.blocks, rows = m.shape.rows;
  parallel_groups(m.groups, rows, threads, [&](std::int64_t g0, std::int64_t g1) {
    for (std::int64_t g = g0; g < g1; ++g) {
      const Layout* w = m.data + g * nb;
      float* out[N];
      if ((g + 1) * kGroupRows <= rows) {
        for (int j = 0; j < N; ++j) out[j] = y + j * rows + g * kGroupRows;
        dot(w, out);
        continue;
      }
      alignas(32) float tmp[N][kGroupRows];
      for (int j = 0; j < N; ++j) out[j] = tmp[j];
      dot(w, out);
      for (int j = 0; j < N; ++j) store_group(tmp[j], y + j * rows, g, rows);
    }
  });
}

// The batch op's outputs on NG weight streams per thread: each thread's run of groups
// read as NG parts side by side (for_each_step_of_parts), each group read once for all
// N vectors (vector j's outputs at y + j * rows); the parts' leftovers and the matrix's
// last group one at a time, a padded one through scratch outputs. dot(count, w, out)
// computes `count` groups (NG or 1, a std::integral_constant) from w[i] into
// out[i][j][0..7].
template <int NG, int N, class Layout, class Dot>
void for_each_group_streams_batch(const RowGroups<Layout>& m, float* y, int threads, Dot&& dot) {
  const std::int64_t nb = m.blocks, rows = m.shape.rows;
  for_each_step_of_parts<NG>(
      m.groups, rows, threads,
      [&](const std::int64_t* g) {
        const Layout* w[NG];
        float* out[NG][N];
        for (int i = 0; i < NG; ++i) {
          w[i] = m.data + g[i] * nb;
          for (int j = 0; j < N; ++j) out[i][j] = y + j * rows + g[i] * kGroupRows;
        }
        dot(std::integral_constant<int, NG>{}, w, out);
      },
      [&](std::int64_t g) {
        const Layout* w[1] = {m.data + g * nb};
        const bool whole = (g + 1) * kGroupRows <= rows;
        alignas(32) float tmp[N][kGroupRows];
        float* out[1][N];
        for (int j = 0; j < N; ++j) out[0][j] = whole ? y + j * rows + g * kGroupRows : tmp[j];
        dot(std::integral_constant<int, 1>{}, w, out);
        if (!whole)
          for (int j = 0; j < N; ++j) store_group(tmp[j], y + j * rows, g, rows);
      });
}

// Calls run(std::integral_constant<int, n>) for a batch call's n (dispatch_vector_count).
template <class Run>
Status with_vector_count(int n, Run&& run) {
  return dispatch_vector_count(n, run, batch_count_refused);
}

// The most vectors the row-interleaved batch kernels take per call.
inline constexpr int kMaxBatchVectors = qmv::kMaxBatchVectors;

}  // namespace

// The error of a kernel called without its prepared copy, or with another shape's (a
// plain function: kernel files built with ISA flags make no strings themselves).
Status not_prepared_for(Shape shape);

}  // namespace qmv::interleave
