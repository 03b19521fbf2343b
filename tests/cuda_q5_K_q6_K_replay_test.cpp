// The Q5_K and Q6_K CUDA variants, replayed on the CPU. No GPU is needed: each
// kernel's per-lane code lives in q5_K_lanes.h / q6_K_lanes.h, and here it runs lane by
// lane with recording policies in place of the device loads and warp shuffles:
// - memory: every weight load is checked for bounds and alignment (at the addresses a
//   cudaMalloc'd buffer would have) and logged, so the test can tell that each weight
//   byte is fetched by exactly one warp-wide load instruction;
// - shuffles: the 32 lanes of a warp run in turn, each shuffle returning what the
//   source lane offered at the same call, repeated until the offers settle;
// - launch geometry: the kernels' own row assignment (warp per row with a grid-stride
//   loop, or a block of warps per row), so every row must be written exactly once;
// - sums: lane partials reduced in the warp_sum butterfly order, warps in order.
// The result is compared with a double-precision dot product of the dequantized
// weights and activations, on quantizer output and on raw random block bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "harness/data.h"
#include "kernels/activation_quantizers.h"
#include "kernels/cuda/q5_K_lanes.h"
#include "kernels/cuda/q6_K_lanes.h"
#include "kernels/cuda/tma_schedule.h"
#include "kernels/registry.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

namespace q5q6 = cuda::q5q6;
using q5q6::kLanes;
using q5q6::kRowWarpsPerBlock;

// Problems found during a replay, kept short.
struct Problems {
  std::vector<std::string> list;
  void note(const std::string& what) {
    if (list.size() < 10) list.push_back(what);
  }
};

// Host memory laid out like a device allocation: the data starts `offset` bytes after
// a 256-byte boundary (0 for a cudaMalloc'd buffer).
class DeviceLikeBuffer {
 public:
  DeviceLikeBuffer(const void* data, std::size_t bytes, std::size_t offset) : storage_(bytes + offset + 256), bytes_(bytes) {
    const auto base = reinterpret_cast<std::uintptr_t>(storage_.data());
    begin_ = storage_.data() + ((256 - base % 256) % 256) + offset;
    std::memcpy(begin_, data, bytes);
  }
  const std::uint8_t* data() const { return begin_; }
  std::size_t size() const { return bytes_; }

 private:
  std::vector<std::uint8_t> storage_;
  std::uint8_t* begin_ = nullptr;
  std::size_t bytes_ = 0;
};

struct Fetch {
  int call;               // the lane's n-th weight load: the same instruction in every lane
  std::size_t offset;     // from the start of the weights
  int bytes;
};

// The memory policy of the replay: GlobalLoads' interface, on host buffers, checked and
// logged.
class ReplayReads {
 public:
  ReplayReads(const DeviceLikeBuffer& w, const DeviceLikeBuffer& x, std::vector<Fetch>& fetches, Problems& problems)
      : w_(w), x_(x), fetches_(fetches), problems_(problems) {}

  std::uint8_t weight_u8(const std::uint8_t* p) { return weight<std::uint8_t>(true, p); }
  std::uint16_t weight_u16(const std::uint8_t* p) { return weight<std::uint16_t>(true, p); }
  std::uint32_t weight_u32(const std::uint8_t* p) { return weight<std::uint32_t>(true, p); }
  std::uint16_t weight_u16_if(bool pred, const std::uint8_t* p) { return weight<std::uint16_t>(pred, p); }
  std::uint32_t weight_u32_if(bool pred, const std::uint8_t* p) { return weight<std::uint32_t>(pred, p); }

  float act_f32(const float* p) { return act<float>(true, p, sizeof(float)); }
  cuda::F32x4 act_f32x4_if(bool pred, const float* p) {
    float v[4];
    for (int i = 0; i < 4; ++i) v[i] = act<float>(pred, p + i, i == 0 ? 16 : 4);
    return {v[0], v[1], v[2], v[3]};
  }
  std::uint32_t act_u32_if(bool pred, const std::uint8_t* p) { return act<std::uint32_t>(pred, p, 4); }
  std::uint16_t act_u16_if(bool pred, const std::uint8_t* p) { return act<std::uint16_t>(pred, p, 2); }

  int weight_calls() const { return calls_; }

 private:
  template <class T>
  T weight(bool pred, const std::uint8_t* p) {
    const int call = calls_++;
    if (!pred) return T{0};
    const auto at = reinterpret_cast<std::uintptr_t>(p), begin = reinterpret_cast<std::uintptr_t>(w_.data());
    if (at < begin || at + sizeof(T) > begin + w_.size()) {
      problems_.note("weight load outside the matrix");
      return T{0};
    }
    if (at % sizeof(T) != 0) problems_.note("misaligned " + std::to_string(8 * sizeof(T)) + "-bit weight load at offset " +
                                            std::to_string(at - begin));
    fetches_.push_back({call, at - begin, static_cast<int>(sizeof(T))});
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }

  // `align`: the alignment the device load needs (16 for the first float of a float4).
  template <class T>
  T act(bool pred, const void* p, std::size_t align) {
    if (!pred) return T{0};
    const auto at = reinterpret_cast<std::uintptr_t>(p), begin = reinterpret_cast<std::uintptr_t>(x_.data());
    if (at < begin || at + sizeof(T) > begin + x_.size()) {
      problems_.note("activation load outside the vector");
      return T{0};
    }
    if (at % align != 0) problems_.note("misaligned activation load at offset " + std::to_string(at - begin));
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }

  const DeviceLikeBuffer& w_;
  const DeviceLikeBuffer& x_;
  std::vector<Fetch>& fetches_;
  Problems& problems_;
  int calls_ = 0;
};

// The shuffle policy of the replay: the value lane `src` offered at the same call in
// the previous pass over the warp.
class ReplayShuffle {
 public:
  ReplayShuffle(const std::vector<std::vector<std::uint32_t>>& previous, std::vector<std::uint32_t>& offered,
                Problems& problems)
      : previous_(previous), offered_(offered), problems_(problems) {}
  std::uint32_t operator()(std::uint32_t v, int src) {
    const std::size_t call = offered_.size();
    offered_.push_back(v);
    if (src < 0 || src >= kLanes) {
      problems_.note("shuffle from lane " + std::to_string(src));
      return 0;
    }
    const auto& from = previous_[static_cast<std::size_t>(src)];
    return call < from.size() ? from[call] : 0u;
  }

 private:
  const std::vector<std::vector<std::uint32_t>>& previous_;
  std::vector<std::uint32_t>& offered_;
  Problems& problems_;
};

// How many warp-wide load instructions fetched each weight byte: lanes of one load
// reading the same byte count once (the hardware broadcasts it).
class FetchCounter {
 public:
  explicit FetchCounter(std::size_t bytes) : count_(bytes, 0) {}
  void add_warp(const std::vector<std::vector<Fetch>>& lanes) {
    std::vector<std::uint64_t> keys;
    for (const auto& lane : lanes)
      for (const Fetch& f : lane)
        for (int i = 0; i < f.bytes; ++i) keys.push_back((std::uint64_t(f.call) << 40) | (f.offset + i));
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    for (std::uint64_t k : keys) {
      auto& c = count_[k & ((std::uint64_t(1) << 40) - 1)];
      if (c < 255) ++c;
    }
  }
  // Fetches made elsewhere (from a shared-memory copy of these bytes).
  void add(std::size_t i, int n) { count_[i] = static_cast<std::uint8_t>(std::min(255, count_[i] + n)); }
  // First byte not fetched exactly once, or -1.
  std::int64_t first_bad() const {
    for (std::size_t i = 0; i < count_.size(); ++i)
      if (count_[i] != 1) return static_cast<std::int64_t>(i);
    return -1;
  }
  int count(std::size_t i) const { return count_[i]; }

 private:
  std::vector<std::uint8_t> count_;
};

// One warp: every lane runs lane_fn(mem, shfl, lane); passes repeat until every lane
// offers in its shuffles what the previous pass received.
template <class LaneFn>
std::array<float, kLanes> replay_warp(LaneFn&& lane_fn, const DeviceLikeBuffer& w, const DeviceLikeBuffer& x,
                                      FetchCounter& fetches, Problems& problems) {
  std::vector<std::vector<std::uint32_t>> previous(kLanes);
  for (int pass = 0; pass < 6; ++pass) {
    std::vector<std::vector<std::uint32_t>> offered(kLanes);
    std::vector<std::vector<Fetch>> lane_fetches(kLanes);
    std::array<float, kLanes> partial{};
    std::array<int, kLanes> calls{};
    for (int lane = 0; lane < kLanes; ++lane) {
      ReplayReads mem(w, x, lane_fetches[lane], problems);
      ReplayShuffle shfl(previous, offered[lane], problems);
      partial[lane] = lane_fn(mem, shfl, lane);
      calls[lane] = mem.weight_calls();
    }
    if (offered == previous) {
      for (int lane = 1; lane < kLanes; ++lane) {
        // Shuffles and loads are warp-wide instructions: all lanes make the same ones.
        if (calls[lane] != calls[0] || offered[lane].size() != offered[0].size())
          problems.note("lanes of a warp make different numbers of loads or shuffles");
      }
      fetches.add_warp(lane_fetches);
      return partial;
    }
    previous = std::move(offered);
  }
  problems.note("shuffled values never settled");
  return {};
}

// warp_sum's butterfly: lane l adds lane l ^ offset, offsets 16, 8, 4, 2, 1.
float butterfly_sum(std::array<float, kLanes> v) {
  for (int offset = kLanes / 2; offset > 0; offset >>= 1) {
    const std::array<float, kLanes> before = v;
    for (int l = 0; l < kLanes; ++l) v[l] = before[l] + before[l ^ offset];
  }
  return v[0];
}

struct Replay {
  std::vector<float> y;
  std::vector<int> writes;  // per row
};

// warp_per_row_kernel<Row> on a grid of `grid` blocks.
template <class Row>
Replay replay_warp_per_row(const DeviceLikeBuffer& w, const DeviceLikeBuffer& x, Shape shape, int grid,
                           FetchCounter& fetches, Problems& problems) {
  const std::int64_t nb = shape.cols / kSuperBlock, row_bytes = nb * Row::kBlockBytes;
  const auto* act = reinterpret_cast<const typename Row::Act*>(x.data());
  Replay out{std::vector<float>(static_cast<std::size_t>(shape.rows), std::numeric_limits<float>::quiet_NaN()),
             std::vector<int>(static_cast<std::size_t>(shape.rows), 0)};
  for (int block = 0; block < grid; ++block) {
    for (int warp = 0; warp < kRowWarpsPerBlock; ++warp) {
      for (std::int64_t row = q5q6::warp_first_row(block, warp, kRowWarpsPerBlock); row < shape.rows;
           row += q5q6::warp_row_stride(grid, kRowWarpsPerBlock)) {
        const std::uint8_t* row_w = w.data() + row * row_bytes;
        const auto partial = replay_warp(
            [&](ReplayReads& mem, ReplayShuffle& shfl, int lane) {
              return Row::partial(mem, shfl, row_w, act, nb, lane);
            },
            w, x, fetches, problems);
        out.y[static_cast<std::size_t>(row)] = butterfly_sum(partial);
        ++out.writes[static_cast<std::size_t>(row)];
      }
    }
  }
  return out;
}

// warpxN_kernel<Row>: block `row` of Row::kWarpsPerRow warps; thread 0 adds
// the warp sums in warp order.
template <class Row>
Replay replay_warpxN(const DeviceLikeBuffer& w, const DeviceLikeBuffer& x, Shape shape, int,
                             FetchCounter& fetches, Problems& problems) {
  const std::int64_t nb = shape.cols / kSuperBlock, row_bytes = nb * Row::kBlockBytes;
  const auto* act = reinterpret_cast<const typename Row::Act*>(x.data());
  Replay out{std::vector<float>(static_cast<std::size_t>(shape.rows), std::numeric_limits<float>::quiet_NaN()),
             std::vector<int>(static_cast<std::size_t>(shape.rows), 0)};
  for (std::int64_t row = 0; row < shape.rows; ++row) {
    const std::uint8_t* row_w = w.data() + row * row_bytes;
    float total = 0.0f;
    for (int warp = 0; warp < Row::kWarpsPerRow; ++warp) {
      const auto partial = replay_warp(
          [&](ReplayReads& mem, ReplayShuffle& shfl, int lane) {
            return Row::partial(mem, shfl, row_w, act, nb, warp, lane);
          },
          w, x, fetches, problems);
      total += butterfly_sum(partial);
    }
    out.y[static_cast<std::size_t>(row)] = total;
    ++out.writes[static_cast<std::size_t>(row)];
  }
  return out;
}

// tma_dp4a (tma_kernels.cuh) with Q6_K's quarter-warp row code; `grid` stands for
// the resident-CTA count run() passes. Each item's copy (widened to 16-byte boundaries)
// fills a poisoned stage, the warp runs the row code on it, and every stage byte a lane
// reads is traced back to the weight byte the copy brought there: so the
// every-weight-byte-once rule holds across chunks, and a lane that reads the stage's
// padding or a neighbouring chunk's bytes is a problem.
Replay replay_tma_q6(const DeviceLikeBuffer& w, const DeviceLikeBuffer& x, Shape shape, int grid,
                     FetchCounter& fetches, Problems& problems) {
  namespace tma = cuda::tma;
  constexpr int kBlock = q5q6::kQ6KBlockBytes, kChunk = q5q6::q6k_tma::kChunkBlocks;
  const tma::Plan plan = tma::make_plan(shape.rows, static_cast<int>(shape.cols / kSuperBlock), kChunk, grid);
  const auto* act = reinterpret_cast<const BlockQ8_1*>(x.data());
  const auto stage_size = static_cast<std::size_t>(tma::stage_bytes<kBlock>(kChunk));
  Replay out{std::vector<float>(static_cast<std::size_t>(shape.rows), std::numeric_limits<float>::quiet_NaN()),
             std::vector<int>(static_cast<std::size_t>(shape.rows), 0)};
  for (int cta = 0; cta < plan.ctas; ++cta) {
    for (int warp = 0; warp < tma::kWarps; ++warp) {
      const tma::WarpRows rows = tma::warp_rows(plan, cta, warp);
      std::array<float, kLanes> acc{};
      for (int i = 0; i < tma::items(plan, rows); ++i) {
        const tma::Item it = tma::item(plan, rows, i);
        const tma::Copy c = tma::item_copy<kBlock>(plan, it);
        if (c.src_offset % 16 || c.bytes % 16 || c.bytes == 0) problems.note("a TMA copy that is not 16-byte aligned and sized");
        if (c.src_offset < 0 || static_cast<std::size_t>(c.src_offset) + c.bytes > w.size() || c.bytes > stage_size) {
          problems.note("a TMA copy past the matrix or the stage");
          return out;
        }
        std::vector<std::uint8_t> staged(stage_size, 0xA5);
        std::memcpy(staged.data(), w.data() + c.src_offset, c.bytes);
        const DeviceLikeBuffer stage(staged.data(), staged.size(), 0);
        FetchCounter stage_fetches(stage_size);
        const std::uint8_t* chunk = stage.data() + c.data_offset;
        const auto partial = replay_warp(
            [&](ReplayReads& mem, ReplayShuffle& shfl, int lane) {
              return q5q6::Q6KQuarterWarpRowOf<true>::partial(mem, shfl, chunk, act + std::int64_t(it.block0) * 8,
                                                             it.blocks, lane);
            },
            stage, x, stage_fetches, problems);
        for (int lane = 0; lane < kLanes; ++lane) acc[lane] += partial[lane];
        if (it.last_chunk) {
          const auto row = static_cast<std::size_t>(it.row);
          out.y[row] = butterfly_sum(acc);
          ++out.writes[row];
          acc = {};
        }
        const std::size_t data_begin = static_cast<std::size_t>(c.data_offset),
                          data_end = data_begin + static_cast<std::size_t>(it.blocks) * kBlock;
        for (std::size_t b = 0; b < stage_size; ++b) {
          if (b >= data_begin && b < data_end)
            fetches.add(static_cast<std::size_t>(c.src_offset) + b, stage_fetches.count(b));
          else if (stage_fetches.count(b) != 0)
            problems.note("a lane reads stage byte " + std::to_string(b) + ", outside its chunk");
        }
      }
    }
  }
  return out;
}

using ReplayFn = Replay (*)(const DeviceLikeBuffer&, const DeviceLikeBuffer&, Shape, int, FetchCounter&, Problems&);

struct Variant {
  const char* name;   // in the registry
  const char* label;  // of the test: the name, or the build it replays
  WeightType weight;
  ActFormat act;
  ReplayFn replay;
  bool grid_stride;  // launched on a grid capped by residency: replay small grids too
  bool (*supports)(Shape) = nullptr;  // a shape rule beyond cols % 256 == 0
  std::size_t weight_align = 0;       // the matrix alignment run() requires (0: its widest load's)
};

const Variant kVariants[] = {
    {"q6_K.cuda.warp_f32", "q6_K_cuda_warp_f32", WeightType::Q6_K, ActFormat::F32, replay_warp_per_row<q5q6::Q6KLegacyRow>, false},
    {"q6_K.cuda.warpx2_f32", "q6_K_cuda_warpx2_f32", WeightType::Q6_K, ActFormat::F32, replay_warpxN<q5q6::Q6KWarpxNRow<2>>, false},
    {"q6_K.cuda.warpx3_f32", "q6_K_cuda_warpx3_f32", WeightType::Q6_K, ActFormat::F32, replay_warpxN<q5q6::Q6KWarpxNRow<3>>, false},
    {"q6_K.cuda.warpx4_f32", "q6_K_cuda_warpx4_f32", WeightType::Q6_K, ActFormat::F32, replay_warpxN<q5q6::Q6KWarpxNRow<4>>, false},
    {"q6_K.cuda.dp4a_q8_1", "q6_K_cuda_dp4a_q8_1", WeightType::Q6_K, ActFormat::Q8_1, replay_warp_per_row<q5q6::Q6KDp4aRow>, false},
    {"q6_K.cuda.halfwarp_dp4a_q8_1", "q6_K_cuda_halfwarp_dp4a_q8_1_sm_90", WeightType::Q6_K, ActFormat::Q8_1,
     replay_warp_per_row<q5q6::Q6KHalfWarpRowOf<3>>, true},
    {"q6_K.cuda.halfwarp_dp4a_q8_1", "q6_K_cuda_halfwarp_dp4a_q8_1_below_sm_90", WeightType::Q6_K, ActFormat::Q8_1,
     replay_warp_per_row<q5q6::Q6KHalfWarpRowOf<2>>, true},
    {"q6_K.cuda.quarterwarp_dp4a_q8_1", "q6_K_cuda_quarterwarp_dp4a_q8_1_both_passes", WeightType::Q6_K,
     ActFormat::Q8_1, replay_warp_per_row<q5q6::Q6KQuarterWarpRowOf<true>>, true},
    {"q6_K.cuda.quarterwarp_dp4a_q8_1", "q6_K_cuda_quarterwarp_dp4a_q8_1_sm_86_89", WeightType::Q6_K, ActFormat::Q8_1,
     replay_warp_per_row<q5q6::Q6KQuarterWarpRowOf<false>>, true},
    {"q6_K.cuda.tma_dp4a_q8_1", "q6_K_cuda_tma_dp4a_q8_1", WeightType::Q6_K, ActFormat::Q8_1, replay_tma_q6, true,
     q5q6::q6k_tma::supports, 16},
    {"q5_K.cuda.warp_f32", "q5_K_cuda_warp_f32", WeightType::Q5_K, ActFormat::F32, replay_warp_per_row<q5q6::Q5KLegacyRow>, false},
    {"q5_K.cuda.warpx2_f32", "q5_K_cuda_warpx2_f32", WeightType::Q5_K, ActFormat::F32, replay_warpxN<q5q6::Q5KWarpxNRow<2>>, false},
    {"q5_K.cuda.warpx3_f32", "q5_K_cuda_warpx3_f32", WeightType::Q5_K, ActFormat::F32, replay_warpxN<q5q6::Q5KWarpxNRow<3>>, false},
    {"q5_K.cuda.warpx4_f32", "q5_K_cuda_warpx4_f32", WeightType::Q5_K, ActFormat::F32, replay_warpxN<q5q6::Q5KWarpxNRow<4>>, false},
};

// ---------------------------------------------------------------------------------
// Inputs

// The running test's inputs derive from one seed drawn from its test seed
// (tests/test_seed.h): a failure prints it, and QMV_TEST_SEED replays it.
std::uint64_t test_seed() { return qmv::testing::fresh_seed(); }

// Every byte random (all quant patterns, scales -128..127 or all 6-bit scale/min
// encodings), with finite fp16 super-block scales of both signs.
std::vector<std::uint8_t> raw_random_blocks(WeightType type, Shape shape, std::mt19937_64& rng) {
  std::vector<std::uint8_t> w(row_bytes(type, shape.cols) * static_cast<std::size_t>(shape.rows));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : w) b = static_cast<std::uint8_t>(byte(rng));
  std::uniform_real_distribution<float> scale(-1.0f, 1.0f);
  const std::size_t blocks = w.size() / block_bytes(type);
  for (std::size_t i = 0; i < blocks; ++i) {
    std::uint8_t* blk = w.data() + i * block_bytes(type);
    if (type == WeightType::Q6_K) {
      const fp16_bits d = fp32_to_fp16(scale(rng));
      std::memcpy(blk + offsetof(BlockQ6K, d), &d, sizeof d);
    } else {
      const fp16_bits d = fp32_to_fp16(scale(rng)), dmin = fp32_to_fp16(scale(rng));
      std::memcpy(blk + offsetof(BlockQ5K, d), &d, sizeof d);
      std::memcpy(blk + offsetof(BlockQ5K, dmin), &dmin, sizeof dmin);
    }
  }
  return w;
}

// Q8_1 blocks with quants over the whole int8 range (-128 included, which the
// quantizer never writes), a quarter of them at the extremes.
std::vector<BlockQ8_1> raw_random_q8_1(std::int64_t cols, std::mt19937_64& rng) {
  std::vector<BlockQ8_1> x(static_cast<std::size_t>(cols / kQ8_1Block));
  std::uniform_int_distribution<int> q(-128, 127), pick(0, 7);
  std::uniform_real_distribution<float> d(-0.1f, 0.1f);
  for (auto& b : x) {
    b.d = fp32_to_fp16(d(rng));
    int sum = 0;
    for (auto& v : b.qs) {
      const int p = pick(rng);
      v = static_cast<std::int8_t>(p == 0 ? -128 : p == 1 ? 127 : q(rng));
      sum += v;
    }
    b.s = fp32_to_fp16(fp16_to_fp32(b.d) * static_cast<float>(sum));
  }
  return x;
}

struct Inputs {
  std::vector<std::uint8_t> w;
  std::vector<std::uint8_t> x;  // the prepared activation, as the kernel reads it
  std::vector<double> ref, mag;  // double W x on the dequantized values, and sum |w x|
};

// in.ref and in.mag for in.w and in.x.
void compute_reference(Inputs& in, WeightType type, ActFormat act, Shape shape) {
  std::vector<float> seen(static_cast<std::size_t>(shape.cols));  // the activation values the kernel sees
  if (act == ActFormat::Q8_1)
    dequantize_row_q8_1(reinterpret_cast<const BlockQ8_1*>(in.x.data()), seen.data(), shape.cols);
  else
    std::memcpy(seen.data(), in.x.data(), seen.size() * sizeof(float));
  in.ref.clear();
  in.mag.clear();
  const std::size_t rb = row_bytes(type, shape.cols);
  std::vector<float> wrow(static_cast<std::size_t>(shape.cols));
  for (std::int64_t r = 0; r < shape.rows; ++r) {
    dequantize_row(type, in.w.data() + rb * static_cast<std::size_t>(r), wrow.data(), shape.cols);
    double sum = 0, mag = 0;
    for (std::int64_t c = 0; c < shape.cols; ++c) {
      sum += double(wrow[c]) * seen[c];
      mag += std::fabs(double(wrow[c]) * seen[c]);
    }
    in.ref.push_back(sum);
    in.mag.push_back(mag);
  }
}

Inputs make_inputs(WeightType type, ActFormat act, Shape shape, bool raw, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Inputs in;
  in.w = raw ? raw_random_blocks(type, shape, rng) : random_quantized_matrix(type, shape, seed);
  std::vector<float> xf = activation_with_outliers(shape.cols, seed + 7, 3, 10.0f, 40.0f);
  if (act == ActFormat::Q8_1) {
    std::vector<BlockQ8_1> xq(static_cast<std::size_t>(shape.cols / kQ8_1Block));
    if (raw) {
      xq = raw_random_q8_1(shape.cols, rng);
    } else {
      quantize_row_q8_1(xf.data(), xq.data(), shape.cols);
    }
    in.x.resize(xq.size() * sizeof(BlockQ8_1));
    std::memcpy(in.x.data(), xq.data(), in.x.size());
  } else {
    in.x.resize(xf.size() * sizeof(float));
    std::memcpy(in.x.data(), xf.data(), in.x.size());
  }
  compute_reference(in, type, act, shape);
  return in;
}

// ---------------------------------------------------------------------------------
// The replay of one variant on one shape and input, every check.

void check_variant(const Variant& v, Shape shape, bool raw, std::size_t weight_offset, std::uint64_t seed) {
  if (v.supports && !v.supports(shape)) return;  // run() refuses it
  SCOPED_TRACE(std::string(v.label) + " " + to_string(shape) + (raw ? " raw blocks" : " quantized") +
               " weights at +" + std::to_string(weight_offset) + ", seed " + std::to_string(seed));
  const Inputs in = make_inputs(v.weight, v.act, shape, raw, seed);
  const DeviceLikeBuffer w(in.w.data(), in.w.size(), weight_offset), x(in.x.data(), in.x.size(), 0);

  // The grid run() uses without a residency cap, and (grid-stride launches) the grids
  // of devices that hold 1, 3 or 7 blocks at once.
  std::vector<int> grids = {q5q6::warp_per_row_grid(shape.rows)};
  if (v.grid_stride)
    for (int resident : {1, 3, 7}) grids.push_back(q5q6::balanced_warp_per_row_grid(shape.rows, resident));
  for (int grid : grids) {
    SCOPED_TRACE("grid " + std::to_string(grid));
    FetchCounter fetches(in.w.size());
    Problems problems;
    const Replay out = v.replay(w, x, shape, grid, fetches, problems);
    for (const std::string& p : problems.list) ADD_FAILURE() << p;
    for (std::int64_t r = 0; r < shape.rows; ++r)
      ASSERT_EQ(out.writes[static_cast<std::size_t>(r)], 1) << "row " << r << " written that many times";
    const std::int64_t bad = fetches.first_bad();
    ASSERT_EQ(bad, -1) << "weight byte " << bad << " (block " << bad / static_cast<std::int64_t>(block_bytes(v.weight))
                       << ", byte " << bad % static_cast<std::int64_t>(block_bytes(v.weight)) << ") fetched "
                       << (bad >= 0 ? fetches.count(static_cast<std::size_t>(bad)) : 0) << " times";
    for (std::int64_t r = 0; r < shape.rows; ++r) {
      const std::size_t i = static_cast<std::size_t>(r);
      // Float rounding of the per-block products and the sums, relative to sum |w x|.
      ASSERT_NEAR(out.y[i], in.ref[i], 1e-5 * in.mag[i] + 1e-30) << "row " << r;
    }
  }
}

// Rows: 1, and counts that are no multiple of the 4 rows of a warp-per-row block.
// Columns: one super-block (the other half-warp and the other warps idle), an odd count
// of super-blocks (rows of Q6_K then start only 2-aligned), eleven (a whole step of
// eight and a partial one), the usual 4096 and the FFN width 14336 (Llama 3 8B's
// ffn_down input).
constexpr std::int64_t kRows[] = {1, 3, 67, 130};
constexpr std::int64_t kCols[] = {256, 512, 768, 2816, 4096, 14336};
// Matrices a multiple of 16 bytes long whose Q6_K rows are not (Llama 2's ffn_down
// input, 11008 columns, among them): what the TMA kernel's shape rule admits
// beyond the rows and columns above.
constexpr Shape kWholeMatrixShapes[] = {{8, 2816}, {16, 768}, {24, 11008}};

class ReplayTest : public ::testing::TestWithParam<int> {};

TEST_P(ReplayTest, MatchesTheReferenceWithEveryRowAndWeightByteOnce) {
  const Variant& v = kVariants[GetParam()];
  std::uint64_t seed = test_seed();
  for (std::int64_t cols : kCols) {
    for (std::int64_t rows : kRows) {
      for (bool raw : {false, true}) check_variant(v, {rows, cols}, raw, 0, ++seed);
    }
  }
  for (Shape shape : kWholeMatrixShapes) check_variant(v, shape, true, 0, ++seed);
}

// The kernels must not assume more alignment than their widest weight load: 2 bytes
// for Q6_K (8- and 16-bit loads, and 32-bit ones only where the address is 4-aligned),
// 4 for Q5_K; 16 for TMA copies. A matrix at such an offset (a tensor inside a larger
// buffer) must give the same result.
TEST_P(ReplayTest, ToleratesAMatrixAlignedOnlyToItsWidestLoad) {
  const Variant& v = kVariants[GetParam()];
  const std::size_t offset = v.weight_align ? v.weight_align : v.weight == WeightType::Q6_K ? 2 : 4;
  const std::uint64_t seed = test_seed();
  check_variant(v, {5, 768}, true, offset, seed);
  check_variant(v, {3, 4096}, false, offset, seed + 1);
}

// ---------------------------------------------------------------------------------
// The batch kernel (q6_K.cuda.halfwarp_batch_dp4a_q8_1): kN vectors on one matrix, back
// to back in x and in y. Each vector's rows must match its own reference, and each
// weight byte be fetched by exactly one warp-wide load for all the vectors together.

template <int kN>
void check_batch(Shape shape, bool raw, int grid, std::uint64_t seed) {
  using Row = q5q6::Q6KHalfWarpBatchRow;
  SCOPED_TRACE(std::to_string(kN) + " vector(s) on " + to_string(shape) + (raw ? " raw blocks" : " quantized") +
               ", grid " + std::to_string(grid) + ", seed " + std::to_string(seed));
  std::vector<Inputs> in;
  for (int j = 0; j < kN; ++j) in.push_back(make_inputs(WeightType::Q6_K, ActFormat::Q8_1, shape, raw, seed + 101 * j));
  std::vector<std::uint8_t> xs;
  for (int j = 0; j < kN; ++j) {
    if (j > 0) {  // one matrix: the first vector's
      in[j].w = in[0].w;
      compute_reference(in[j], WeightType::Q6_K, ActFormat::Q8_1, shape);
    }
    xs.insert(xs.end(), in[j].x.begin(), in[j].x.end());
  }
  const DeviceLikeBuffer w(in[0].w.data(), in[0].w.size(), 0), x(xs.data(), xs.size(), 0);
  const std::int64_t nb = shape.cols / kSuperBlock, row_bytes = nb * Row::kBlockBytes,
                     vec_blocks = shape.cols / kQ8_1Block;
  const auto* act = reinterpret_cast<const BlockQ8_1*>(x.data());
  FetchCounter fetches(in[0].w.size());
  Problems problems;
  std::vector<float> y(static_cast<std::size_t>(kN * shape.rows), std::numeric_limits<float>::quiet_NaN());
  std::vector<int> writes(y.size(), 0);
  for (int block = 0; block < grid; ++block) {
    for (int warp = 0; warp < kRowWarpsPerBlock; ++warp) {
      for (std::int64_t row = q5q6::warp_first_row(block, warp, kRowWarpsPerBlock); row < shape.rows;
           row += q5q6::warp_row_stride(grid, kRowWarpsPerBlock)) {
        const std::uint8_t* row_w = w.data() + row * row_bytes;
        // Each pass of the replay overwrites these; the settled pass's values remain.
        std::array<std::array<float, kN>, kLanes> acc{};
        replay_warp(
            [&](ReplayReads& mem, ReplayShuffle& shfl, int lane) {
              float a[kN];
              Row::partial<kN>(mem, shfl, row_w, act, vec_blocks, nb, lane, a);
              for (int j = 0; j < kN; ++j) acc[static_cast<std::size_t>(lane)][static_cast<std::size_t>(j)] = a[j];
              return a[0];
            },
            w, x, fetches, problems);
        for (int j = 0; j < kN; ++j) {
          std::array<float, kLanes> lanes{};
          for (int l = 0; l < kLanes; ++l) lanes[static_cast<std::size_t>(l)] = acc[static_cast<std::size_t>(l)][static_cast<std::size_t>(j)];
          const auto i = static_cast<std::size_t>(j * shape.rows + row);
          y[i] = butterfly_sum(lanes);
          ++writes[i];
        }
      }
    }
  }
  for (const std::string& p : problems.list) ADD_FAILURE() << p;
  const std::int64_t bad = fetches.first_bad();
  ASSERT_EQ(bad, -1) << "weight byte " << bad << " fetched " << (bad >= 0 ? fetches.count(static_cast<std::size_t>(bad)) : 0)
                     << " times";
  for (int j = 0; j < kN; ++j)
    for (std::int64_t r = 0; r < shape.rows; ++r) {
      const auto i = static_cast<std::size_t>(j * shape.rows + r);
      ASSERT_EQ(writes[i], 1) << "vector " << j << " row " << r;
      ASSERT_NEAR(y[i], in[static_cast<std::size_t>(j)].ref[static_cast<std::size_t>(r)],
                  1e-5 * in[static_cast<std::size_t>(j)].mag[static_cast<std::size_t>(r)] + 1e-30)
          << "vector " << j << " row " << r;
    }
}

TEST(CudaQ6KBatchReplay, EachVectorMatchesItsReferenceAndTheWeightsAreFetchedOnce) {
#if defined(QMV_HAVE_CUDA)
  const KernelSpec* k = global_registry().find("q6_K.cuda.halfwarp_batch_dp4a_q8_1");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->op, OpKind::MatVecBatch);
  EXPECT_EQ(k->max_n, q5q6::Q6KHalfWarpBatchRow::kMaxN);
  EXPECT_EQ(k->act, ActFormat::Q8_1);
#endif
  std::uint64_t seed = test_seed();
  for (const Shape shape : {Shape{1, 256}, Shape{3, 768}, Shape{67, 512}, Shape{9, 2816}, Shape{130, 4096}}) {
    for (bool raw : {false, true}) {
      for (int grid : {q5q6::warp_per_row_grid(shape.rows), q5q6::balanced_warp_per_row_grid(shape.rows, 3)}) {
        check_batch<1>(shape, raw, grid, ++seed);
        check_batch<2>(shape, raw, grid, ++seed);
        check_batch<3>(shape, raw, grid, ++seed);
        check_batch<8>(shape, raw, grid, ++seed);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(CudaQ5KQ6K, ReplayTest, ::testing::Range(0, static_cast<int>(std::size(kVariants))),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(kVariants[info.param].label);
                         });

TEST(CudaQ5KQ6KReplay, WarpPerRowGrids) {
  EXPECT_EQ(q5q6::warp_per_row_grid(1), 1);
  EXPECT_EQ(q5q6::warp_per_row_grid(130), 33);
  EXPECT_EQ(q5q6::warp_per_row_grid(14336), 3584);
  EXPECT_EQ(q5q6::warp_per_row_grid(14336, 1056), 1056);
  EXPECT_EQ(q5q6::warp_per_row_grid(14336, 0), 1);
  EXPECT_EQ(q5q6::warp_per_row_grid(std::int64_t{1} << 40), 0x7fffffff);
  // Balanced: every warp the same number of rows, never more blocks than resident.
  std::mt19937_64 rng(test_seed());
  std::uniform_int_distribution<std::int64_t> rows_of(1, 300000), resident_of(1, 3000);
  for (int trial = 0; trial < 1000; ++trial) {
    const std::int64_t rows = trial == 0 ? 14336 : rows_of(rng), resident = trial == 0 ? 1056 : resident_of(rng);
    const int grid = q5q6::balanced_warp_per_row_grid(rows, resident);
    ASSERT_GE(grid, 1);
    ASSERT_LE(grid, resident) << rows;
    const std::int64_t warps = std::int64_t{grid} * kRowWarpsPerBlock;
    const std::int64_t most = (rows + warps - 1) / warps;  // rows of warp 0
    const std::int64_t per_resident_warp = (rows + resident * kRowWarpsPerBlock - 1) / (resident * kRowWarpsPerBlock);
    EXPECT_EQ(most, per_resident_warp) << rows << " rows, " << resident << " resident";
    if (trial == 0) {
      EXPECT_EQ(grid, 896);
    }
  }
  EXPECT_EQ(q5q6::balanced_warp_per_row_grid(4096, 1056), 1024);
  EXPECT_EQ(q5q6::balanced_warp_per_row_grid(8448, 1056), 1056);  // exactly 2 rows per resident warp
  EXPECT_EQ(q5q6::balanced_warp_per_row_grid(4096, 0), 1024);  // residency unknown: one row per warp
}

// The arithmetic pieces against their plain definitions, over every input.
TEST(CudaQ5KQ6KReplay, ByteTricksAreExact) {
  for (std::uint32_t q = 0; q < 64; ++q) {
    const std::uint32_t word = q * 0x01010101u;
    const std::uint32_t s = q5q6::q6k_quad_signed(word);
    for (int i = 0; i < 4; ++i) ASSERT_EQ(static_cast<std::int8_t>(s >> (8 * i)), static_cast<int>(q) - 32) << q;
  }
  for (int b = 0; b < 256; ++b) {
    const std::uint32_t word = static_cast<std::uint32_t>(b) << 16;
    ASSERT_EQ(cuda::int8_byte(word, 2), static_cast<std::int8_t>(b));
    ASSERT_EQ(cuda::int8_byte_to_float(word, 2), static_cast<float>(static_cast<std::int8_t>(b)));
    ASSERT_EQ(cuda::byte_to_float(word, 2, 32.0f), static_cast<float>(b - 32));
  }
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int trial = 0; trial < 2000; ++trial) {
    std::uint8_t packed[12];
    for (auto& p : packed) p = static_cast<std::uint8_t>(byte(rng));
    std::uint32_t s[3];
    std::memcpy(s, packed, sizeof s);
    for (int g = 0; g < 4; ++g) {
      std::uint32_t scales, mins;
      q5q6::q5k_pair_scale_min(g, s[0], s[1], s[2], scales, mins);
      for (int e = 0; e < 2; ++e) {
        std::uint8_t sc, m;
        unpack_scale_min_k4(2 * g + e, packed, sc, m);
        ASSERT_EQ((scales >> (8 * e)) & 0xFFu, sc) << "sub-block " << 2 * g + e;
        ASSERT_EQ((mins >> (8 * e)) & 0xFFu, m) << "sub-block " << 2 * g + e;
      }
    }
  }
}

TEST(CudaQ5KQ6KRegistry, EveryVariantIsRegisteredAsACudaKernel) {
#if !defined(QMV_HAVE_CUDA)
  GTEST_SKIP() << "built without CUDA (QMV_CUDA=OFF): the CUDA variants are not compiled";
#else
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.label);
    const KernelSpec* k = global_registry().find(v.name);
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->backend, Backend::CUDA);
    EXPECT_EQ(k->op, OpKind::MatVec);
    EXPECT_EQ(k->weight, v.weight);
    EXPECT_EQ(k->act, v.act);
    // __dp4a: sm_61; TMA copies: sm_90
    EXPECT_EQ(k->min_sm, v.weight_align == 16 ? 90 : v.act == ActFormat::Q8_1 ? 61 : 0);
    if (v.supports) {
      EXPECT_EQ(k->supports, v.supports);
      EXPECT_TRUE(k->supports({24, 11008}));
      EXPECT_FALSE(k->supports({1, 256})) << "a 210-byte matrix is no multiple of 16 bytes";
      EXPECT_NE(k->shape_rule.find("% 8"), std::string::npos) << k->shape_rule;
    } else {
      EXPECT_TRUE(k->supports({1, 256}));
    }
    EXPECT_TRUE(k->supports({130, 14336}));
    EXPECT_FALSE(k->supports({4, 300}));
    EXPECT_FALSE(k->description.empty());
  }
  std::vector<std::string> names;
  for (const Variant& v : kVariants) names.push_back(v.name);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  EXPECT_EQ(names.size(), 12u);  // the twelve Q5_K / Q6_K CUDA variants
#endif
}

}  // namespace
}  // namespace qmv
