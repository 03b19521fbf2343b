// The Q4_K CUDA variants replayed on the CPU. Each kernel is a loop around the
// lane functions of kernels/cuda/q4_K_lanes.h; this test calls the same
// functions for every block, warp and lane (and every half-warp, multi-warp and
// grid-stride assignment) that the kernel's launch would make, sums the lane partials
// in the kernel's grouping, and checks, per variant and shape:
//   - every output row is written exactly once by the launch geometry;
//   - every qs byte is read exactly once, every header byte exactly as often as the
//     variant's header scheme says (by every lane, by lane 0, by lanes 0..3, ...),
//     every activation as often as the layout says, nothing outside the buffers,
//     every vector load aligned;
//   - the output matches a double-precision reference on the dequantized weights and
//     the activations the kernel sees, within a bound computed from the data.
// Inputs are fresh random data each run: realistic (our quantizer on Gaussian rows,
// Gaussian or outlier activations) and adversarial (every byte of every block random).
// Plus the tiled variant's shared-memory shape rule, the TMA schedule's balance
// and the registry entries.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "harness/data.h"
#include "kernels/activation_quantizers.h"
#include "kernels/cuda/q4_K_lanes.h"
#include "kernels/cuda/tma_schedule.h"
#include "kernels/registry.h"
#include "tests/test_seed.h"

namespace qmv::cuda::q4k {
namespace {

using qmv::testing::fresh_seed;

// ---------------------------------------------------------------------------------
// A Loads policy that reads like the device and counts every byte it reads, per
// buffer. Reads outside the registered buffers and misaligned vector loads fail.

struct Buffer {
  std::string name;
  const std::uint8_t* base = nullptr;
  std::size_t size = 0;
  std::vector<int> reads;  // per byte
};

class CountingLoads {
 public:
  Buffer& add(std::string name, const void* base, std::size_t size) {
    buffers_.push_back(std::make_unique<Buffer>());
    Buffer& b = *buffers_.back();
    b.name = std::move(name);
    b.base = static_cast<const std::uint8_t*>(base);
    b.size = size;
    b.reads.assign(size, 0);
    return b;
  }
  // A shared-memory buffer whose block is done.
  void drop(const Buffer& b) {
    std::erase_if(buffers_, [&](const std::unique_ptr<Buffer>& p) { return p.get() == &b; });
  }

  std::uint8_t weight_u8(const void* p) const { return read<std::uint8_t>(p, 1); }
  std::uint16_t weight_u16(const void* p) const { return read<std::uint16_t>(p, 2); }
  std::uint32_t weight_u32(const void* p) const { return read<std::uint32_t>(p, 4); }
  U32x2 weight_u32x2(const void* p) const { return read<U32x2>(p, 8); }
  U32x4 weight_u32x4(const void* p) const { return read<U32x4>(p, 16); }
  float act_f32(const float* p) const { return read<float>(p, 4); }
  F32x4 act_f32x4(const float* p) const { return read<F32x4>(p, 16); }
  std::uint32_t act_u32(const void* p) const { return read<std::uint32_t>(p, 4); }

  // The warp receives what lane 0 loaded: the bytes count once, at lane 0's turn.
  void header_from_lane_0(const std::uint32_t* block, int lane, std::uint32_t (&out)[kHeaderWords]) const {
    for (int i = 0; i < kHeaderWords; ++i) out[i] = lane == 0 ? weight_u32(block + i) : peek(block + i);
  }
  // Lane i < 4 loads word i; the warp receives all four.
  void header_from_lanes_0_to_3(const std::uint32_t* block, int lane, std::uint32_t (&out)[kHeaderWords]) const {
    for (int i = 0; i < kHeaderWords; ++i) out[i] = lane == i ? weight_u32(block + i) : peek(block + i);
  }

 private:
  Buffer* find(const void* p, std::size_t n) const {
    const auto* b = static_cast<const std::uint8_t*>(p);
    for (const auto& buf : buffers_)
      if (b >= buf->base && b + n <= buf->base + buf->size) return buf.get();
    return nullptr;
  }
  template <class T>
  T read(const void* p, std::size_t align) const {
    Buffer* buf = find(p, sizeof(T));
    if (!buf) {
      ADD_FAILURE() << "a lane reads " << sizeof(T) << " bytes outside every buffer";
      return T{};
    }
    const std::size_t offset = static_cast<std::size_t>(static_cast<const std::uint8_t*>(p) - buf->base);
    EXPECT_EQ(offset % align, 0u) << sizeof(T) << "-byte load at offset " << offset << " of " << buf->name;
    for (std::size_t i = 0; i < sizeof(T); ++i) ++buf->reads[offset + i];
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
  }
  // What another lane loaded and shuffled over: checked for bounds, not counted.
  std::uint32_t peek(const std::uint32_t* p) const {
    if (!find(p, 4)) {
      ADD_FAILURE() << "a broadcast header word lies outside every buffer";
      return 0;
    }
    std::uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

// The sum a warp_sum leaves in every lane, in its butterfly order.
float warp_total(std::vector<float> lanes) {
  for (int offset = kWarpLanes / 2; offset > 0; offset >>= 1) {
    std::vector<float> next(lanes.size());
    for (int l = 0; l < kWarpLanes; ++l) next[l] = lanes[l] + lanes[l ^ offset];
    lanes = std::move(next);
  }
  return lanes[0];
}

// ---------------------------------------------------------------------------------
// Problems and the reference.

enum class Data { Realistic, Adversarial };

// 256-byte aligned storage, as cudaMalloc gives.
struct Aligned {
  std::vector<std::uint8_t> storage;
  std::uint8_t* data = nullptr;
  explicit Aligned(std::size_t n) : storage(n + 256) {
    const auto at = reinterpret_cast<std::uintptr_t>(storage.data());
    data = storage.data() + (256 - at % 256) % 256;
  }
};

struct Problem {
  Shape shape;
  int nb = 0;
  ActFormat act = ActFormat::F32;
  Aligned w{0};
  Aligned x{0};               // f32 or Q8_1 blocks
  std::vector<double> ref;    // y on the dequantized weights and activations
  std::vector<double> bound;  // allowed |y - ref| per row
  std::size_t w_bytes() const { return row_bytes(WeightType::Q4_K, shape.cols) * shape.rows; }
  std::size_t x_bytes() const { return row_bytes(act, shape.cols); }
  const std::uint8_t* w_u8() const { return w.data; }
  const std::uint32_t* w_u32() const { return reinterpret_cast<const std::uint32_t*>(w.data); }
  const float* x_f32() const { return reinterpret_cast<const float*>(x.data); }
  const std::uint32_t* x_u32() const { return reinterpret_cast<const std::uint32_t*>(x.data); }
};

void random_blocks(std::vector<BlockQ4K>& blocks, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-1.0f, 1.0f);
  for (auto& b : blocks) {
    b.d = fp32_to_fp16(scale(rng));
    b.dmin = fp32_to_fp16(scale(rng));
    for (auto& s : b.scales) s = static_cast<std::uint8_t>(byte(rng));
    for (auto& q : b.qs) q = static_cast<std::uint8_t>(byte(rng));
  }
}

// Q8_1 blocks with quants over the whole int8 range (-128 included) and s as the
// format defines it, d * sum(q) in fp16.
void random_q8_1(std::vector<BlockQ8_1>& blocks, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> q(-128, 127);
  std::uniform_real_distribution<float> d(0.001f, 0.1f);
  for (auto& b : blocks) {
    b.d = fp32_to_fp16(d(rng));
    int sum = 0;
    for (auto& v : b.qs) {
      v = static_cast<std::int8_t>(q(rng));
      sum += v;
    }
    b.s = fp32_to_fp16(fp16_to_fp32(b.d) * static_cast<float>(sum));
  }
}

// Reference: double sums on the dequantized weights and the activations as the
// kernel sees them. Bound: float accumulation (64 units of 2^-24 of the sum of
// |w x|, far above the real error of a few hundred float adds and far below one
// misplaced weight), plus for Q8_1 the fp16 rounding of the block sums s that the
// kernels use for the min term where the reference sums the quants.
void compute_reference(Problem& p) {
  const Shape shape = p.shape;
  const ActFormat act = p.act;
  std::vector<float> xs(static_cast<std::size_t>(shape.cols)), row(static_cast<std::size_t>(shape.cols));
  dequantize_activation(act, p.x.data, xs.data(), shape.cols);
  const auto* blocks = reinterpret_cast<const BlockQ4K*>(p.w.data);
  const auto* q8 = reinterpret_cast<const BlockQ8_1*>(p.x.data);
  p.ref.assign(static_cast<std::size_t>(shape.rows), 0.0);
  p.bound.assign(static_cast<std::size_t>(shape.rows), 0.0);
  for (std::int64_t r = 0; r < shape.rows; ++r) {
    dequantize_row_q4_K(blocks + r * p.nb, row.data(), shape.cols);
    double sum = 0, mag = 0;
    for (std::int64_t c = 0; c < shape.cols; ++c) {
      sum += double(row[c]) * xs[c];
      mag += std::fabs(double(row[c]) * xs[c]);
    }
    double slack = 64.0 * std::ldexp(mag, -24);
    if (act == ActFormat::Q8_1) {
      for (int b = 0; b < p.nb; ++b) {
        const BlockQ4K& blk = blocks[r * p.nb + b];
        for (int j = 0; j < 8; ++j) {
          std::uint8_t sc, m;
          unpack_scale_min_k4(j, blk.scales, sc, m);
          const double s = fp16_to_fp32(q8[8 * b + j].s);
          slack +=
              std::fabs(double(fp16_to_fp32(blk.dmin)) * m) * (std::ldexp(std::fabs(s), -10) + std::ldexp(1.0, -24));
        }
      }
    }
    p.ref[r] = sum;
    p.bound[r] = slack;
  }
}

Problem make_problem(Shape shape, ActFormat act, Data data, std::uint64_t seed) {
  Problem p;
  p.shape = shape;
  p.nb = static_cast<int>(shape.cols / kSuperBlock);
  p.act = act;
  p.w = Aligned(p.w_bytes());
  p.x = Aligned(p.x_bytes());
  std::mt19937_64 rng(seed);
  if (data == Data::Realistic) {
    const std::vector<std::uint8_t> w = random_quantized_matrix(WeightType::Q4_K, shape, seed);
    std::memcpy(p.w.data, w.data(), w.size());
    const std::vector<float> x = (seed & 1) ? activation_with_outliers(shape.cols, seed + 7, 4, 20.0f, 60.0f)
                                            : gaussian_vector(shape.cols, seed + 7);
    quantize_activation(act, x.data(), p.x.data, shape.cols);
  } else {
    std::vector<BlockQ4K> w(p.w_bytes() / sizeof(BlockQ4K));
    random_blocks(w, rng);
    std::memcpy(p.w.data, w.data(), p.w_bytes());
    if (act == ActFormat::Q8_1) {
      std::vector<BlockQ8_1> x(static_cast<std::size_t>(shape.cols / kQ8_1Block));
      random_q8_1(x, rng);
      std::memcpy(p.x.data, x.data(), p.x_bytes());
    } else {
      const std::vector<float> x = gaussian_vector(shape.cols, seed + 7);
      std::memcpy(p.x.data, x.data(), p.x_bytes());
    }
  }

  compute_reference(p);
  return p;
}

// ---------------------------------------------------------------------------------
// What a replay produces, and the expectations every variant shares.

struct Replay {
  std::vector<float> y;
  std::vector<int> writes;  // per row
  CountingLoads loads;
  Buffer* w = nullptr;
  Buffer* x = nullptr;
  explicit Replay(const Problem& p)
      : y(static_cast<std::size_t>(p.shape.rows), std::numeric_limits<float>::quiet_NaN()),
        writes(static_cast<std::size_t>(p.shape.rows), 0) {
    w = &loads.add("weights", p.w.data, p.w_bytes());
    x = &loads.add("activations", p.x.data, p.x_bytes());
  }
  void write(std::int64_t row, float v) {
    ASSERT_GE(row, 0);
    ASSERT_LT(row, static_cast<std::int64_t>(y.size()));
    y[static_cast<std::size_t>(row)] = v;
    ++writes[static_cast<std::size_t>(row)];
  }
};

// How often each byte must be read over the whole call.
struct ReadRule {
  int header;               // each header byte (d, dmin, scales) of each block
  int x_per_row;            // f32: each activation byte, per row; Q8_1: each quant byte, per row
  int q8_1_ds_per_row = 0;  // Q8_1: each d|s byte, per row
  int x_extra = 0;          // reads not per row (staging into shared memory), in total
};

void expect_replay(const Problem& p, const Replay& r, const ReadRule& rule, const std::string& variant) {
  SCOPED_TRACE(variant + " on " + to_string(p.shape));
  for (std::int64_t row = 0; row < p.shape.rows; ++row) {
    const auto i = static_cast<std::size_t>(row);
    ASSERT_EQ(r.writes[i], 1) << "row " << row << " written " << r.writes[i] << " times";
    ASSERT_TRUE(std::isfinite(r.y[i])) << "row " << row;
    ASSERT_NEAR(r.y[i], p.ref[i], p.bound[i]) << "row " << row;
  }
  for (std::size_t i = 0; i < r.w->reads.size(); ++i) {
    const bool header = i % kBlockBytes < kQsBytesOffset;
    ASSERT_EQ(r.w->reads[i], header ? rule.header : 1)
        << (header ? "header" : "qs") << " byte " << i % kBlockBytes << " of block " << i / kBlockBytes;
  }
  const int rows = static_cast<int>(p.shape.rows);
  for (std::size_t i = 0; i < r.x->reads.size(); ++i) {
    int want = rule.x_per_row * rows + rule.x_extra;
    if (p.act == ActFormat::Q8_1 && i % sizeof(BlockQ8_1) < 4) want = rule.q8_1_ds_per_row * rows;
    ASSERT_EQ(r.x->reads[i], want) << "activation byte " << i;
  }
}

// ---------------------------------------------------------------------------------
// The replays: each mirrors its kernel's launch (q4_K_<variant>.cu) loop for loop.

Replay replay_warp(const Problem& p) {
  Replay r(p);
  for (std::int64_t block = 0; block < warp::grid(p.shape.rows); ++block) {
    const std::int64_t row = block;
    std::vector<float> lanes(kWarpLanes);
    for (int lane = 0; lane < warp::kThreads; ++lane)
      lanes[lane] = warp::lane_row(r.loads, row_bytes_of(p.w_u8(), row, p.nb), p.x_f32(), p.nb, lane);
    r.write(row, warp_total(lanes));
  }
  return r;
}

Replay replay_coalesced(const Problem& p) {
  Replay r(p);
  for (std::int64_t block = 0; block < coalesced::grid(p.shape.rows); ++block) {
    const std::int64_t row = block;
    std::vector<float> lanes(kWarpLanes);
    for (int lane = 0; lane < coalesced::kThreads; ++lane)
      lanes[lane] = coalesced::lane_row(r.loads, row_words_of(p.w_u32(), row, p.nb), p.x_f32(), p.nb, lane);
    r.write(row, warp_total(lanes));
  }
  return r;
}

Replay replay_tiled(const Problem& p) {
  Replay r(p);
  const auto n = static_cast<int>(p.shape.cols);
  for (std::int64_t block = 0; block < tiled::grid(p.shape.rows); ++block) {
    std::vector<float> shared(static_cast<std::size_t>(n), std::numeric_limits<float>::quiet_NaN());
    Buffer& smem = r.loads.add("shared x of block " + std::to_string(block), shared.data(), shared.size() * 4);
    for (int thread = 0; thread < tiled::kThreads; ++thread) tiled::stage(r.loads, p.x_f32(), shared.data(), n, thread);
    int rows_here = 0;
    for (int warp = 0; warp < tiled::kRowsPerBlock; ++warp) {
      const std::int64_t row = tiled::row_of(static_cast<int>(block), warp);
      if (row >= p.shape.rows) continue;
      ++rows_here;
      std::vector<float> lanes(kWarpLanes);
      for (int lane = 0; lane < kWarpLanes; ++lane)
        lanes[lane] = tiled::lane_row(r.loads, row_bytes_of(p.w_u8(), row, p.nb), shared.data(), p.nb, lane);
      r.write(row, warp_total(lanes));
    }
    for (std::size_t i = 0; i < smem.reads.size(); ++i)
      EXPECT_EQ(smem.reads[i], rows_here) << "shared byte " << i << " of block " << block;
    r.loads.drop(smem);
  }
  return r;
}

Replay replay_chunked(const Problem& p) {
  Replay r(p);
  for (std::int64_t block = 0; block < chunked::grid(p.shape.rows); ++block) {
    std::vector<std::vector<float>> lanes(chunked::kRowsPerBlock, std::vector<float>(kWarpLanes, 0.0f));
    int rows_here = 0;
    for (int warp = 0; warp < chunked::kRowsPerBlock; ++warp)
      rows_here += chunked::row_of(static_cast<int>(block), warp) < p.shape.rows;
    for (int c = 0; c < chunked::chunks(p.nb); ++c) {
      std::vector<float> chunk(chunked::kChunkFloats, std::numeric_limits<float>::quiet_NaN());
      Buffer& smem = r.loads.add("chunk", chunk.data(), chunk.size() * 4);
      for (int thread = 0; thread < chunked::kThreads; ++thread)
        chunked::stage(r.loads, p.x_f32(), chunk.data(), c, p.nb, thread);
      for (int warp = 0; warp < chunked::kRowsPerBlock; ++warp) {
        const std::int64_t row = chunked::row_of(static_cast<int>(block), warp);
        if (row >= p.shape.rows) continue;
        for (int lane = 0; lane < kWarpLanes; ++lane)
          lanes[warp][lane] +=
              chunked::lane_chunk(r.loads, row_bytes_of(p.w_u8(), row, p.nb), chunk.data(), c, p.nb, lane);
      }
      const std::size_t staged = static_cast<std::size_t>(chunked::chunk_count(c, p.nb)) * kSuperBlock * 4;
      for (std::size_t i = 0; i < smem.reads.size(); ++i)
        EXPECT_EQ(smem.reads[i], i < staged ? rows_here : 0) << "chunk " << c << " byte " << i;
      r.loads.drop(smem);
    }
    for (int warp = 0; warp < chunked::kRowsPerBlock; ++warp) {
      const std::int64_t row = chunked::row_of(static_cast<int>(block), warp);
      if (row < p.shape.rows) r.write(row, warp_total(lanes[warp]));
    }
  }
  return r;
}

// The multi-warp layouts: per row, each warp's butterfly sum, then thread 0 adds the
// warp sums in warp order (block_sum_to_thread_0).
template <class LaneFn>
void replay_multi_warp(Replay& r, std::int64_t row, int warps, LaneFn&& lane_fn) {
  float total = 0.0f;
  for (int warp = 0; warp < warps; ++warp) {
    std::vector<float> lanes(kWarpLanes);
    for (int lane = 0; lane < kWarpLanes; ++lane) lanes[lane] = lane_fn(warp, lane);
    total += warp_total(lanes);
  }
  r.write(row, total);
}

Replay replay_wide(const Problem& p) {
  Replay r(p);
  for (std::int64_t block = 0; block < wide::grid(p.shape.rows); ++block) {
    const std::int64_t row = block;
    replay_multi_warp(r, row, wide::kWarps, [&](int warp, int lane) {
      return wide::lane_row(r.loads, row_bytes_of(p.w_u8(), row, p.nb), p.x_f32(), p.nb, warp, lane);
    });
  }
  return r;
}

template <int kWarps>
Replay replay_warpxN(const Problem& p) {
  Replay r(p);
  for (std::int64_t block = 0; block < warpxN::grid(p.shape.rows); ++block) {
    const std::int64_t row = block;
    replay_multi_warp(r, row, kWarps, [&](int warp, int lane) {
      return warpxN::lane_row<kWarps>(r.loads, row_words_of(p.w_u32(), row, p.nb), p.x_f32(), p.nb, warp, lane);
    });
  }
  return r;
}

template <int kWarps>
Replay replay_warpxN_dp4a(const Problem& p) {
  Replay r(p);
  for (std::int64_t block = 0; block < warpxN_dp4a::grid(p.shape.rows); ++block) {
    const std::int64_t row = block;
    replay_multi_warp(r, row, kWarps, [&](int warp, int lane) {
      return warpxN_dp4a::lane_row<kWarps>(r.loads, row_words_of(p.w_u32(), row, p.nb), p.x_u32(), p.nb, warp, lane);
    });
  }
  return r;
}

Replay replay_vectorized(const Problem& p) {
  Replay r(p);
  for (std::int64_t block = 0; block < vectorized::grid(p.shape.rows); ++block) {
    for (int warp = 0; warp < vectorized::kRowsPerBlock; ++warp) {
      const std::int64_t row = vectorized::row_of(static_cast<int>(block), warp);
      if (row >= p.shape.rows) continue;
      std::vector<float> lanes(kWarpLanes);
      for (int lane = 0; lane < kWarpLanes; ++lane)
        lanes[lane] = vectorized::lane_row(r.loads, row_words_of(p.w_u32(), row, p.nb), p.x_f32(), p.nb, lane);
      r.write(row, warp_total(lanes));
    }
  }
  return r;
}

Replay replay_dp4a(const Problem& p) {
  Replay r(p);
  for (std::int64_t block = 0; block < dp4a::grid(p.shape.rows); ++block) {
    for (int warp = 0; warp < dp4a::kRowsPerBlock; ++warp) {
      const std::int64_t row = dp4a::row_of(static_cast<int>(block), warp);
      if (row >= p.shape.rows) continue;
      std::vector<float> lanes(kWarpLanes);
      for (int lane = 0; lane < kWarpLanes; ++lane)
        lanes[lane] = dp4a::lane_row(r.loads, row_words_of(p.w_u32(), row, p.nb), p.x_u32(), p.nb, lane);
      r.write(row, warp_total(lanes));
    }
  }
  return r;
}

// The grouped DP4A kernels (run_grouped_dp4a): `cap` stands for the resident-block
// limit the run function passes: small caps make the warps stride over several rows.
template <int kGroups, int kUnroll, int kWords>
Replay replay_grouped_dp4a(const Problem& p, std::int64_t cap) {
  Replay r(p);
  const std::int64_t grid = halfwarp_dp4a::grid(p.shape.rows, cap);
  for (std::int64_t block = 0; block < grid; ++block) {
    for (int warp = 0; warp < halfwarp_dp4a::kRowsPerBlock; ++warp) {
      for (std::int64_t row = halfwarp_dp4a::first_row(static_cast<int>(block), warp); row < p.shape.rows;
           row += halfwarp_dp4a::row_stride(static_cast<int>(grid))) {
        std::vector<float> lanes(kWarpLanes);
        for (int lane = 0; lane < kWarpLanes; ++lane)
          lanes[lane] = grouped_lane_row<kGroups, kUnroll, kWords>(r.loads, row_words_of(p.w_u32(), row, p.nb),
                                                                   p.x_u32(), p.nb, lane);
        r.write(row, warp_total(lanes));
      }
    }
  }
  return r;
}
constexpr auto replay_halfwarp_dp4a =
    replay_grouped_dp4a<halfwarp_dp4a::kGroups, halfwarp_dp4a::kUnroll, halfwarp_dp4a::kWordsPerLane>;
constexpr auto replay_quarterwarp_dp4a =
    replay_grouped_dp4a<quarterwarp_dp4a::kGroups, quarterwarp_dp4a::kUnroll, quarterwarp_dp4a::kWordsPerLane>;

// tma_dp4a: each warp's items in order (tma_kernels.cuh). Lane 0's TMA copy
// reads every weight byte of the item once (16-byte aligned, a multiple of 16 bytes,
// inside the stage) into a stage filled with poison first; the lanes then run on the
// stage, each lane's share of its row accumulated over the row's chunks as the
// kernel's register is. `max_ctas` stands for the resident-CTA count run() passes.
Replay replay_tma(const Problem& p, std::int64_t max_ctas) {
  using namespace tma_dp4a;
  Replay r(p);
  const tma::Plan plan = tma::make_plan(p.shape.rows, p.nb, kChunkBlocks, max_ctas);
  for (int cta = 0; cta < plan.ctas; ++cta) {
    for (int warp = 0; warp < tma::kWarps; ++warp) {
      const tma::WarpRows rows = tma::warp_rows(plan, cta, warp);
      std::vector<float> acc(kWarpLanes, 0.0f);
      for (int i = 0; i < tma::items(plan, rows); ++i) {
        const tma::Item it = tma::item(plan, rows, i);
        const tma::Copy c = tma::item_copy<kBlockBytes>(plan, it);
        EXPECT_EQ(c.src_offset % 16, 0) << "copy source";
        EXPECT_EQ(c.bytes % 16, 0u) << "copy size";
        EXPECT_EQ(c.data_offset, 0) << "Q4_K blocks are 16-byte multiples";
        if (c.bytes == 0 || c.bytes > static_cast<std::uint32_t>(kStageBytes)) {
          ADD_FAILURE() << "a copy of " << c.bytes << " bytes into a stage of " << kStageBytes;
          return r;
        }
        Aligned stage(kStageBytes);
        std::memset(stage.data, 0xA5, kStageBytes);
        const auto* src = reinterpret_cast<const std::uint32_t*>(p.w_u8() + c.src_offset);
        for (std::uint32_t b = 0; b < c.bytes; b += 16) {
          const U32x4 v = r.loads.weight_u32x4(src + b / 4);
          std::memcpy(stage.data + b, &v, 16);
        }
        Buffer& staged = r.loads.add("stage", stage.data, kStageBytes);
        const auto* row_words = reinterpret_cast<const std::uint32_t*>(stage.data + c.data_offset);
        for (int lane = 0; lane < kWarpLanes; ++lane)
          acc[lane] += grouped_lane_row<kGroups, kUnroll, kWordsPerLane>(
              r.loads, row_words, p.x_u32() + std::int64_t(it.block0) * kQ8_1WordsPerSuperBlock, it.blocks, lane);
        r.loads.drop(staged);
        if (it.last_chunk) {
          r.write(it.row, warp_total(acc));
          acc.assign(kWarpLanes, 0.0f);
        }
      }
    }
  }
  return r;
}

// ---------------------------------------------------------------------------------
// Every variant on every shape, on both kinds of data.

struct Variant {
  std::string name;
  ActFormat act;
  ReadRule rule;  // x_extra filled per problem where it depends on the grid
  std::function<Replay(const Problem&)> replay;
  std::function<int(const Problem&)> staging_reads = [](const Problem&) { return 0; };
};

std::vector<Variant> variants() {
  const auto blocks = [](std::int64_t (*grid)(std::int64_t)) {
    return [grid](const Problem& p) { return static_cast<int>(grid(p.shape.rows)); };
  };
  std::vector<Variant> v;
  v.push_back({"warp_f32", ActFormat::F32, {32, 1}, replay_warp});
  v.push_back({"coalesced_f32", ActFormat::F32, {1, 1}, replay_coalesced});
  // Tiled and chunked read global activations only to stage them, once per block.
  v.push_back({"tiled_f32", ActFormat::F32, {32, 0}, replay_tiled, blocks(tiled::grid)});
  v.push_back({"chunked_f32", ActFormat::F32, {32, 0}, replay_chunked, blocks(chunked::grid)});
  v.push_back({"wide_f32", ActFormat::F32, {32, 1}, replay_wide});
  v.push_back({"vectorized_f32", ActFormat::F32, {32, 1}, replay_vectorized});
  v.push_back({"warpx2_f32", ActFormat::F32, {1, 1}, replay_warpxN<2>});
  v.push_back({"warpx3_f32", ActFormat::F32, {1, 1}, replay_warpxN<3>});
  v.push_back({"warpx4_f32", ActFormat::F32, {1, 1}, replay_warpxN<4>});
  // Q8_1: the 8 lanes of a group each read the d|s words of its two blocks; in
  // halfwarp_dp4a a group is 4 lanes of a half-warp, each reading the 16-byte header.
  v.push_back({"dp4a_q8_1", ActFormat::Q8_1, {32, 1, 8}, replay_dp4a});
  v.push_back({"halfwarp_dp4a_q8_1", ActFormat::Q8_1, {16, 1, 4}, [](const Problem& p) { return replay_halfwarp_dp4a(p, INT32_MAX); }});
  v.push_back({"halfwarp_dp4a_q8_1 (grid-stride, 1 block)", ActFormat::Q8_1, {16, 1, 4}, [](const Problem& p) {
                 return replay_halfwarp_dp4a(p, 1);
               }});
  v.push_back({"halfwarp_dp4a_q8_1 (grid-stride, 7 blocks)", ActFormat::Q8_1, {16, 1, 4}, [](const Problem& p) {
                 return replay_halfwarp_dp4a(p, 7);
               }});
  // quarterwarp_dp4a: a group is 2 lanes of a quarter-warp, each reading the header.
  v.push_back({"quarterwarp_dp4a_q8_1", ActFormat::Q8_1, {8, 1, 2}, [](const Problem& p) {
                 return replay_quarterwarp_dp4a(p, INT32_MAX);
               }});
  v.push_back({"quarterwarp_dp4a_q8_1 (grid-stride, 1 block)", ActFormat::Q8_1, {8, 1, 2}, [](const Problem& p) {
                 return replay_quarterwarp_dp4a(p, 1);
               }});
  v.push_back({"quarterwarp_dp4a_q8_1 (grid-stride, 7 blocks)", ActFormat::Q8_1, {8, 1, 2}, [](const Problem& p) {
                 return replay_quarterwarp_dp4a(p, 7);
               }});
  // tma_dp4a: the TMA copies read every byte once; the lanes read the stage.
  v.push_back({"tma_dp4a_q8_1", ActFormat::Q8_1, {1, 1, 2}, [](const Problem& p) { return replay_tma(p, 396); }});
  v.push_back({"tma_dp4a_q8_1 (1 CTA)", ActFormat::Q8_1, {1, 1, 2}, [](const Problem& p) { return replay_tma(p, 1); }});
  v.push_back({"tma_dp4a_q8_1 (7 CTAs)", ActFormat::Q8_1, {1, 1, 2}, [](const Problem& p) { return replay_tma(p, 7); }});
  v.push_back({"warpx2_dp4a_q8_1", ActFormat::Q8_1, {1, 1, 8}, replay_warpxN_dp4a<2>});
  v.push_back({"warpx3_dp4a_q8_1", ActFormat::Q8_1, {1, 1, 8}, replay_warpxN_dp4a<3>});
  v.push_back({"warpx4_dp4a_q8_1", ActFormat::Q8_1, {1, 1, 8}, replay_warpxN_dp4a<4>});
  return v;
}

const Shape kShapes[] = {{1, 256},   {3, 256},   {67, 256},   {130, 256},   {1, 512},   {3, 512},
                         {67, 512},  {130, 512}, {1, 4096},   {3, 4096},    {67, 4096}, {130, 4096},
                         {1, 14336}, {3, 14336}, {67, 14336}, {130, 14336}, {5, 2304},  {9, 2560}};

void run_all(Data data) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  int k = 0;
  for (const Shape shape : kShapes) {
    for (ActFormat act : {ActFormat::F32, ActFormat::Q8_1}) {
      const Problem p = make_problem(shape, act, data, seed + static_cast<std::uint64_t>(k++));
      for (const Variant& v : variants()) {
        if (v.act != act) continue;
        if (v.name == "tiled_f32" && !tiled::supports(shape)) continue;
        ReadRule rule = v.rule;
        rule.x_extra = v.staging_reads(p);
        const Replay r = v.replay(p);
        expect_replay(p, r, rule, v.name);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST(CudaQ4KReplay, EveryVariantOnRealisticData) { run_all(Data::Realistic); }
TEST(CudaQ4KReplay, EveryVariantOnAdversarialBlocks) { run_all(Data::Adversarial); }

// ---------------------------------------------------------------------------------
// The batch kernels (halfwarp_batch_dp4a, quarterwarp_batch_dp4a): kN vectors on one
// matrix, back to back in x and in y. Each vector's outputs must match its own
// reference, each weight byte must be read as often as for one vector (once per call,
// not once per vector), and each vector's activation bytes as often as a one-vector
// kernel of the same layout reads them.

struct HalfWarpBatch {
  static constexpr const char* kName = "halfwarp_batch_dp4a";
  static constexpr int kGroups = halfwarp_batch_dp4a::kGroups, kUnroll = halfwarp_batch_dp4a::kUnroll,
                       kWordsPerLane = halfwarp_batch_dp4a::kWordsPerLane;
};
// The quarter-warp kernel's two configurations: up to kFewVectors vectors, and more.
struct QuarterWarpBatchFew {
  static constexpr const char* kName = "quarterwarp_batch_dp4a, few vectors";
  static constexpr int kGroups = quarterwarp_batch_dp4a::kGroups, kUnroll = quarterwarp_batch_dp4a::kUnrollFew,
                       kWordsPerLane = quarterwarp_batch_dp4a::kWordsPerLane;
};
struct QuarterWarpBatchMany {
  static constexpr const char* kName = "quarterwarp_batch_dp4a, many vectors";
  static constexpr int kGroups = quarterwarp_batch_dp4a::kGroups, kUnroll = quarterwarp_batch_dp4a::kUnrollMany,
                       kWordsPerLane = quarterwarp_batch_dp4a::kWordsPerLane;
};

template <class Layout, int kN>
void expect_batch_replay(Shape shape, Data data, std::int64_t cap, std::uint64_t seed) {
  constexpr int kGroups = Layout::kGroups, kUnroll = Layout::kUnroll, kWordsPerLane = Layout::kWordsPerLane;
  // A Q8_1 block's scale word is read by every lane whose words fall in its 8 qs words.
  constexpr int kScaleReaders = (kQ8_1Words - 1) / kWordsPerLane;
  SCOPED_TRACE(std::string(Layout::kName) + ", " + std::to_string(kN) + " vector(s) on " + to_string(shape) +
               ", cap " + std::to_string(cap));
  std::vector<Problem> vectors;
  for (int j = 0; j < kN; ++j) vectors.push_back(make_problem(shape, ActFormat::Q8_1, data, seed + 101 * j));
  for (int j = 1; j < kN; ++j) {  // one matrix: the first problem's
    std::memcpy(vectors[j].w.data, vectors[0].w.data, vectors[0].w_bytes());
    compute_reference(vectors[j]);
  }
  const Problem& p = vectors[0];
  const std::size_t x_bytes = p.x_bytes();
  Aligned x(kN * x_bytes);
  for (int j = 0; j < kN; ++j) std::memcpy(x.data + j * x_bytes, vectors[j].x.data, x_bytes);
  CountingLoads loads;
  const Buffer& w_reads = loads.add("weights", p.w.data, p.w_bytes());
  const Buffer& x_reads = loads.add("activations", x.data, kN * x_bytes);
  const std::int64_t rows = shape.rows;
  std::vector<float> y(static_cast<std::size_t>(kN * rows), std::numeric_limits<float>::quiet_NaN());
  std::vector<int> writes(y.size(), 0);
  const std::int64_t vec_words = std::int64_t{p.nb} * kQ8_1WordsPerSuperBlock;
  ASSERT_EQ(vec_words * 4, static_cast<std::int64_t>(x_bytes));
  const std::int64_t grid = halfwarp_dp4a::grid(rows, cap);
  for (std::int64_t block = 0; block < grid; ++block)
    for (int warp = 0; warp < halfwarp_dp4a::kRowsPerBlock; ++warp)
      for (std::int64_t row = halfwarp_dp4a::first_row(static_cast<int>(block), warp); row < rows;
           row += halfwarp_dp4a::row_stride(static_cast<int>(grid))) {
        std::vector<std::vector<float>> lanes(kN, std::vector<float>(kWarpLanes));
        for (int lane = 0; lane < kWarpLanes; ++lane) {
          float acc[kN];
          grouped_lane_row_batch<kGroups, kUnroll, kWordsPerLane, kN>(
              loads, row_words_of(p.w_u32(), row, p.nb), reinterpret_cast<const std::uint32_t*>(x.data), vec_words,
              p.nb, lane, acc);
          for (int j = 0; j < kN; ++j) lanes[j][lane] = acc[j];
        }
        for (int j = 0; j < kN; ++j) {
          const auto i = static_cast<std::size_t>(j * rows + row);
          y[i] = warp_total(lanes[j]);
          ++writes[i];
        }
      }
  for (int j = 0; j < kN; ++j)
    for (std::int64_t row = 0; row < rows; ++row) {
      const auto i = static_cast<std::size_t>(j * rows + row);
      ASSERT_EQ(writes[i], 1) << "vector " << j << " row " << row;
      ASSERT_NEAR(y[i], vectors[j].ref[row], vectors[j].bound[row]) << "vector " << j << " row " << row;
    }
  for (std::size_t i = 0; i < w_reads.reads.size(); ++i) {
    const bool header = i % kBlockBytes < kQsBytesOffset;
    ASSERT_EQ(w_reads.reads[i], header ? kWarpLanes / kGroups : 1)  // the header: once per lane of its group
        << (header ? "header" : "qs") << " byte " << i % kBlockBytes << " of block " << i / kBlockBytes;
  }
  for (std::size_t i = 0; i < x_reads.reads.size(); ++i) {
    const int want =
        (i % x_bytes) % sizeof(BlockQ8_1) < 4 ? kScaleReaders * static_cast<int>(rows) : static_cast<int>(rows);
    ASSERT_EQ(x_reads.reads[i], want) << "vector " << i / x_bytes << " activation byte " << i % x_bytes;
  }
}

// Each count kNs of vectors on every shape, with the grid capped and not.
template <class Layout, int... kNs>
void run_batch(Data data) {
  const std::uint64_t seed = fresh_seed("batch");
  for (const Shape shape : {Shape{1, 256}, Shape{3, 512}, Shape{67, 256}, Shape{9, 2560}, Shape{130, 4096}}) {
    for (const std::int64_t cap : {std::int64_t{INT32_MAX}, std::int64_t{3}}) {
      std::uint64_t s = seed;
      (expect_batch_replay<Layout, kNs>(shape, data, cap, s++), ...);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(CudaQ4KReplay, BatchKernelOnRealisticData) { run_batch<HalfWarpBatch, 1, 2, 3, 8>(Data::Realistic); }
TEST(CudaQ4KReplay, BatchKernelOnAdversarialBlocks) { run_batch<HalfWarpBatch, 1, 2, 3, 8>(Data::Adversarial); }
TEST(CudaQ4KReplay, QuarterWarpBatchKernelOnRealisticData) {
  static_assert(quarterwarp_batch_dp4a::kFewVectors == 4);  // the counts below straddle it
  run_batch<QuarterWarpBatchFew, 1, 2, 4>(Data::Realistic);
  run_batch<QuarterWarpBatchMany, 5, 8>(Data::Realistic);
}
TEST(CudaQ4KReplay, QuarterWarpBatchKernelOnAdversarialBlocks) {
  run_batch<QuarterWarpBatchFew, 1, 2, 4>(Data::Adversarial);
  run_batch<QuarterWarpBatchMany, 5, 8>(Data::Adversarial);
}

// ---------------------------------------------------------------------------------
// The small pieces, exhaustively where they are small.

TEST(CudaQ4KReplay, WordScalesMatchTheFormat) {
  std::mt19937_64 rng(fresh_seed());
  std::uniform_int_distribution<int> byte(0, 255);
  for (int trial = 0; trial < 20000; ++trial) {
    std::uint8_t packed[kKScaleBytes];
    for (auto& b : packed) b = static_cast<std::uint8_t>(byte(rng));
    std::uint32_t u[3];
    std::memcpy(u, packed, sizeof u);
    const Scales8 s = unpack_scales(u[0], u[1], u[2]);
    for (int j = 0; j < 8; ++j) {
      std::uint8_t sc, m;
      unpack_scale_min_k4(j, packed, sc, m);
      ASSERT_EQ(scale_of(s, j), sc) << "sub-block " << j;
      ASSERT_EQ(min_of(s, j), m) << "sub-block " << j;
      const std::uint32_t hdr[kHeaderWords] = {0u, u[0], u[1], u[2]};
      const ScalePairs pair = scale_pairs(hdr, scale_selector(j / 2));
      ASSERT_EQ(byte_of(pair.sc, j % 2), sc) << "sub-block " << j;
      ASSERT_EQ(byte_of(pair.m, j % 2), m) << "sub-block " << j;
      ASSERT_EQ(pair.sc >> 14, 0u);
      ASSERT_EQ(pair.m >> 14, 0u);
    }
  }
}

// Each sub-block's min term is added by exactly one lane of its group.
TEST(CudaQ4KReplay, OneLaneAddsEachMinTerm) {
  for (int words_per_lane : {1, 2, 4}) {
    for (int g = 0; g < 4; ++g) {
      int even = 0, odd = 0;
      for (int word = 8 * g; word < 8 * g + 8; word += words_per_lane) {
        const Q8Lane lane = q8_lane(word, words_per_lane);
        if (lane.min_mask == 0) continue;
        EXPECT_EQ(lane.min_mask, 0xFFu);
        (lane.min_shift == 0 ? even : odd) += 1;
      }
      EXPECT_EQ(even, 1) << words_per_lane << " words per lane, group " << g;
      EXPECT_EQ(odd, 1) << words_per_lane << " words per lane, group " << g;
    }
  }
}

TEST(CudaQ4KReplay, ConversionsAreExact) {
  // Byte k alone decides, whatever the other three bytes hold.
  for (std::uint32_t v = 0; v < 256; ++v)
    for (int k = 0; k < 4; ++k) {
      const std::uint32_t others = 0xA5C33C5Au & ~(0xFFu << (8 * k));
      ASSERT_EQ(byte_to_float((v << (8 * k)) | others, k), float(v)) << v << " in byte " << k;
    }
  for (int v = -(1 << 22) + 1; v < (1 << 22); v += 97) ASSERT_EQ(small_int_to_float(v), float(v)) << v;
  ASSERT_EQ(small_int_to_float((1 << 22) - 1), float((1 << 22) - 1));
  ASSERT_EQ(small_int_to_float(-(1 << 22) + 1), float(-(1 << 22) + 1));
  for (std::uint32_t v = 0; v < (1u << 23); v += 89) ASSERT_EQ(small_uint_to_float(v), float(v)) << v;
}

// ---------------------------------------------------------------------------------
// Shape rules and registration.

TEST(CudaQ4KReplay, TiledRefusesWhatSharedMemoryCannotHold) {
  EXPECT_EQ(tiled::kMaxCols * 4, 48 * 1024);
  EXPECT_TRUE(tiled::supports({4, 256}));
  EXPECT_TRUE(tiled::supports({4, 12288}));
  EXPECT_FALSE(tiled::supports({4, 12288 + 256}));
  EXPECT_FALSE(tiled::supports({4, 14336}));
  EXPECT_FALSE(tiled::supports({4, 300}));
  EXPECT_FALSE(tiled::supports({0, 4096}));
}

TEST(CudaQ4KReplay, RegisteredShapeRules) {
#ifdef QMV_HAVE_CUDA
  const KernelSpec* t = global_registry().find("q4_K.cuda.tiled_f32");
  const KernelSpec* c = global_registry().find("q4_K.cuda.chunked_f32");
  ASSERT_NE(t, nullptr);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(t->supports({4096, 12288}));
  EXPECT_FALSE(t->supports({4096, 14336}));
  EXPECT_NE(t->shape_rule.find("12288"), std::string::npos) << t->shape_rule;
  EXPECT_TRUE(c->supports({4096, 14336}));
  EXPECT_TRUE(c->supports({1, 65536}));
  EXPECT_FALSE(c->supports({1, 14336 + 128}));
#else
  GTEST_SKIP() << "no CUDA kernels registered: built with QMV_CUDA=OFF";
#endif
}

// The TMA schedule (tma_schedule.h): CTAs own contiguous row ranges that tile the
// rows and differ by at most one row, their warps take every kWarps-th row of the
// range; a row's chunks tile it, hold at most the chunk size the stages take and differ
// by at most one super-block; no more CTAs than rows.
TEST(CudaQ4KReplay, TmaScheduleIsBalanced) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> rows_of(1, 200000);
  std::uniform_int_distribution<int> nb_of(1, 600), ctas_of(1, 2000), chunk_of(1, 64);
  for (int trial = 0; trial < 500; ++trial) {
    const std::int64_t rows = trial < 3 ? trial + 1 : rows_of(rng);
    const int nb = nb_of(rng), max_chunk = chunk_of(rng);
    const std::int64_t max_ctas = ctas_of(rng);
    const tma::Plan p = tma::make_plan(rows, nb, max_chunk, max_ctas);
    SCOPED_TRACE("rows " + std::to_string(rows) + ", nb " + std::to_string(nb) + ", chunk <= " +
                 std::to_string(max_chunk) + ", ctas <= " + std::to_string(max_ctas));
    ASSERT_EQ(p.ctas, std::min(rows, max_ctas));
    std::vector<int> seen(static_cast<std::size_t>(rows), 0);
    std::int64_t least = rows, most = 0;
    for (int cta = 0; cta < p.ctas; ++cta) {
      std::int64_t cta_rows = 0;
      for (int warp = 0; warp < tma::kWarps; ++warp) {
        const tma::WarpRows r = tma::warp_rows(p, cta, warp);
        const int n = tma::items(p, r);
        ASSERT_EQ(n % p.chunks, 0);
        for (int i = 0; i < n; i += p.chunks) {
          const std::int64_t row = tma::item(p, r, i).row;
          ASSERT_GE(row, 0);
          ASSERT_LT(row, rows);
          ++seen[static_cast<std::size_t>(row)];
          ++cta_rows;
        }
      }
      least = std::min(least, cta_rows);
      most = std::max(most, cta_rows);
    }
    ASSERT_EQ(std::count(seen.begin(), seen.end(), 1), rows) << "every row owned by exactly one warp";
    ASSERT_GE(least, 1);
    ASSERT_LE(most - least, 1);
    const tma::WarpRows first = tma::warp_rows(p, 0, 0);
    int covered = 0, shortest = nb, longest = 0;
    for (int c = 0; c < p.chunks; ++c) {
      const tma::Item it = tma::item(p, first, c);
      ASSERT_EQ(it.row, 0);
      ASSERT_EQ(it.block0, covered);
      ASSERT_EQ(it.last_chunk, c == p.chunks - 1);
      covered += it.blocks;
      shortest = std::min(shortest, it.blocks);
      longest = std::max(longest, it.blocks);
    }
    ASSERT_EQ(covered, nb);
    ASSERT_GE(shortest, 1);
    ASSERT_LE(longest, max_chunk) << "a chunk longer than a stage holds";
    ASSERT_LE(longest - shortest, 1);
  }
}

TEST(CudaQ4KReplay, RegistryHoldsEveryVariant) {
#ifdef QMV_HAVE_CUDA
  const struct {
    const char* name;
    ActFormat act;
    int min_sm = 0;  // 0: 61 for Q8_1 (__dp4a), none for f32
  } expected[] = {
      {"q4_K.cuda.warp_f32", ActFormat::F32},       {"q4_K.cuda.tiled_f32", ActFormat::F32},
      {"q4_K.cuda.chunked_f32", ActFormat::F32},      {"q4_K.cuda.coalesced_f32", ActFormat::F32},
      {"q4_K.cuda.wide_f32", ActFormat::F32},         {"q4_K.cuda.vectorized_f32", ActFormat::F32},
      {"q4_K.cuda.warpx2_f32", ActFormat::F32},       {"q4_K.cuda.warpx3_f32", ActFormat::F32},
      {"q4_K.cuda.warpx4_f32", ActFormat::F32},       {"q4_K.cuda.dp4a_q8_1", ActFormat::Q8_1},
      {"q4_K.cuda.halfwarp_dp4a_q8_1", ActFormat::Q8_1},     {"q4_K.cuda.warpx2_dp4a_q8_1", ActFormat::Q8_1},
      {"q4_K.cuda.warpx3_dp4a_q8_1", ActFormat::Q8_1}, {"q4_K.cuda.warpx4_dp4a_q8_1", ActFormat::Q8_1},
      {"q4_K.cuda.quarterwarp_dp4a_q8_1", ActFormat::Q8_1}, {"q4_K.cuda.tma_dp4a_q8_1", ActFormat::Q8_1, 90},
      {"q4_K.cuda.halfwarp_batch_dp4a_q8_1", ActFormat::Q8_1},
      {"q4_K.cuda.quarterwarp_batch_dp4a_q8_1", ActFormat::Q8_1},
  };
  for (const auto& e : expected) {
    const KernelSpec* k = global_registry().find(e.name);
    ASSERT_NE(k, nullptr) << e.name;
    EXPECT_EQ(k->backend, Backend::CUDA) << e.name;
    EXPECT_EQ(k->weight, WeightType::Q4_K) << e.name;
    EXPECT_EQ(k->act, e.act) << e.name;
    const bool batch = std::string(e.name).find("_batch_") != std::string::npos;
    EXPECT_EQ(k->op, batch ? OpKind::MatVecBatch : OpKind::MatVec) << e.name;
    EXPECT_EQ(k->max_n, batch ? halfwarp_batch_dp4a::kMaxN : 1) << e.name;
    EXPECT_EQ(k->min_sm, e.min_sm ? e.min_sm : e.act == ActFormat::Q8_1 ? 61 : 0) << e.name;
    EXPECT_FALSE(k->description.empty()) << e.name;
    EXPECT_TRUE(k->supports({1, 256})) << e.name;
    EXPECT_FALSE(k->supports({1, 128})) << e.name;
  }
  EXPECT_EQ(global_registry().select("q4_K.cuda.*").size(), std::size(expected));
#else
  GTEST_SKIP() << "no CUDA kernels: built with QMV_CUDA=OFF";
#endif
}

}  // namespace
}  // namespace qmv::cuda::q4k
