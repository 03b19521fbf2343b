// The GPU decode step without a GPU: every kernel it owns is replayed on the host
// through the same host+device functions the kernels call, in the kernels' own thread
// mapping (CTAs, warps, lanes, the warp butterflies), and compared with the CPU's
// definitions on fresh random data: the row dequantizer against dequantize_row (bit
// for bit), the legacy matvecs against a double-precision dot, RMSNorm / the per-head
// step / attention / SwiGLU against the CPU forward's formulas, the sampler against a
// sort-based definition of the CPU sampler's rules. Then the whole step: the same
// decode_step template GpuForward launches, run with an executor of these replays,
// against CpuForward's logits on synthetic models of every architecture. Also the
// plan binding and the device-memory refusal, which need no device.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <functional>
#include <unordered_map>
#include <vector>

#include "harness/data.h"
#include "kernels/activation_quantizers.h"
#include "kernels/outliers.h"
#include "harness/cli/decode_cuda.h"
#include "kernels/cuda/dequantize_value.h"
#include "kernels/cuda/legacy_lanes.h"
#include "model/forward.h"
#include "model/forward_cuda.h"
#include "model/gpu_math.h"
#include "model/forward_ops_cuda.h"
#include "model/gpu_program.h"
#include "model/sampler.h"
#include "tests/forward_cuda_testing.h"

namespace qmv {
namespace {

using namespace qmv::cuda;
using testing::fresh_seed;
using testing::nmse;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The warp butterfly of warp_sum: after offsets 16, 8, 4, 2, 1 every lane holds the
// total; lane 0's, as the kernels write it.
template <class T>
T butterfly(std::array<T, 32> v) {
  for (int offset = 16; offset > 0; offset /= 2) {
    std::array<T, 32> next;
    for (int l = 0; l < 32; ++l) next[l] = v[l] + v[l ^ offset];
    v = next;
  }
  return v[0];
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// ---------------------------------------------------------------------------------
// The row dequantizer.

TEST(GpuDequantize, EveryTypeReplaysDequantizeRowBitForBit) {
  const std::uint64_t seed = fresh_seed();
  for (WeightType t : kAllWeightTypes) {
    std::vector<std::int64_t> widths = {256, 4096};
    if (block_values(t) <= kLegacyBlock) widths.push_back(96);
    if (block_values(t) == 1) widths.push_back(1001);
    for (std::int64_t cols : widths) {
      const Shape s{9, cols};
      const auto matrix = random_quantized_matrix(t, s, seed + static_cast<int>(t) * 131 + cols);
      const std::size_t rb = row_bytes(t, cols);
      // Tokens past either end of the matrix read its first or last row (the device
      // clamps the index it reads from memory).
      for (int token : {0, 4, 8, -3, 9, 1 << 30}) {
        const std::int64_t want_row = token < 0 ? 0 : token > 8 ? 8 : token;
        std::vector<float> ref(cols);
        dequantize_row(t, matrix.data() + want_row * rb, ref.data(), cols);
        // The launch: dequantize_ctas(n) CTAs of kDequantizeThreads, one value a thread.
        std::vector<float> got(cols, kNaN);
        std::vector<int> writes(cols, 0);
        for (std::int64_t cta = 0; cta < dequantize_ctas(cols); ++cta) {
          for (int th = 0; th < kDequantizeThreads; ++th) {
            const std::int64_t i = cta * kDequantizeThreads + th;
            if (i >= cols) continue;
            const std::uint8_t* row = matrix.data() + static_cast<std::size_t>(clamped_row(token, s.rows)) * rb;
            got[i] = dequantize_row_value(t, row, i);
            ++writes[i];
          }
        }
        int differ = 0;
        for (std::int64_t i = 0; i < cols; ++i) {
          ASSERT_EQ(writes[i], 1) << to_string(t) << " value " << i;
          differ += !same_bits(got[i], ref[i]);
        }
        EXPECT_EQ(differ, 0) << to_string(t) << " cols " << cols << " row " << token;
      }
    }
  }
}

// ---------------------------------------------------------------------------------
// The legacy-quant and float-weight matvecs.

struct LegacyReplay {
  std::vector<float> y;
  std::vector<int> row_writes;
  std::vector<int> value_reads;  // per weight of the matrix
};

template <class Block>
LegacyReplay replay_legacy_blocks(const std::uint8_t* w, const float* x, Shape s) {
  LegacyReplay r{std::vector<float>(s.rows, kNaN), std::vector<int>(s.rows, 0),
                 std::vector<int>(static_cast<std::size_t>(s.rows * s.cols), 0)};
  const std::int64_t n_blocks = s.cols / kLegacyBlock;
  for (std::int64_t cta = 0; cta < legacy_ctas(s.rows); ++cta) {
    for (int warp = 0; warp < kLegacyWarpsPerCta; ++warp) {
      const std::int64_t row = legacy_row(cta, warp);
      if (row >= s.rows) continue;
      const Block* blocks = reinterpret_cast<const Block*>(w) + row * n_blocks;
      std::array<float, 32> lanes;
      for (int lane = 0; lane < 32; ++lane) {
        lanes[lane] = legacy_lane_sum(blocks, x, n_blocks, lane);
        for_each_lane_block(n_blocks, lane, [&](std::int64_t b, int part) {
          for (int k = 0; k < kLegacyValuesPerPart; ++k)
            ++r.value_reads[row * s.cols + b * kLegacyBlock + legacy_part_value(part, k)];
        });
      }
      r.y[row] = butterfly(lanes);
      ++r.row_writes[row];
    }
  }
  return r;
}

template <class Value>
LegacyReplay replay_legacy_floats(WeightType t, const std::uint8_t* w, const float* x, Shape s) {
  LegacyReplay r{std::vector<float>(s.rows, kNaN), std::vector<int>(s.rows, 0),
                 std::vector<int>(static_cast<std::size_t>(s.rows * s.cols), 0)};
  for (std::int64_t cta = 0; cta < legacy_ctas(s.rows); ++cta) {
    for (int warp = 0; warp < kLegacyWarpsPerCta; ++warp) {
      const std::int64_t row = legacy_row(cta, warp);
      if (row >= s.rows) continue;
      const Value* values = reinterpret_cast<const Value*>(w) + row * s.cols;
      std::array<float, 32> lanes;
      for (int lane = 0; lane < 32; ++lane) {
        lanes[lane] = float_lane_sum(values, t, x, s.cols, lane);
        for_each_lane_col(s.cols, lane, [&](std::int64_t c) { ++r.value_reads[row * s.cols + c]; });
      }
      r.y[row] = butterfly(lanes);
      ++r.row_writes[row];
    }
  }
  return r;
}

LegacyReplay replay_legacy(WeightType t, const void* w, const float* x, Shape s) {
  const auto* bytes = static_cast<const std::uint8_t*>(w);
  switch (t) {
    case WeightType::Q4_0: return replay_legacy_blocks<BlockQ4_0>(bytes, x, s);
    case WeightType::Q4_1: return replay_legacy_blocks<BlockQ4_1>(bytes, x, s);
    case WeightType::Q5_0: return replay_legacy_blocks<BlockQ5_0>(bytes, x, s);
    case WeightType::Q5_1: return replay_legacy_blocks<BlockQ5_1>(bytes, x, s);
    case WeightType::Q8_0: return replay_legacy_blocks<BlockQ8_0>(bytes, x, s);
    case WeightType::F16:
    case WeightType::BF16: return replay_legacy_floats<std::uint16_t>(t, bytes, x, s);
    case WeightType::F32: return replay_legacy_floats<float>(t, bytes, x, s);
    default: break;
  }
  ADD_FAILURE() << "no legacy GPU kernel for " << to_string(t);
  return {};
}

constexpr WeightType kLegacyTypes[] = {WeightType::Q4_0, WeightType::Q4_1, WeightType::Q5_0, WeightType::Q5_1,
                                       WeightType::Q8_0, WeightType::F16,  WeightType::BF16, WeightType::F32};

TEST(GpuLegacyMatvec, EveryVariantIsRegisteredForItsType) {
#ifndef QMV_HAVE_CUDA
  GTEST_SKIP() << "no CUDA device: built with QMV_CUDA=OFF, the GPU kernels are not compiled";
#endif
  for (WeightType t : kLegacyTypes) {
    const KernelSpec* k = testing::legacy_cuda_kernel(t);
    ASSERT_NE(k, nullptr) << to_string(t);
    EXPECT_EQ(k->backend, Backend::CUDA);
    EXPECT_EQ(k->weight, t);
    EXPECT_EQ(k->act, ActFormat::F32);
    EXPECT_EQ(k->op, OpKind::MatVec);
    EXPECT_TRUE(k->supports({3, block_values(t) == 1 ? 33 : 96})) << k->name;
  }
}

TEST(GpuLegacyMatvec, LaneReplayMatchesTheReferenceAndCoversEveryWeightOnce) {
  const std::uint64_t seed = fresh_seed();
  for (WeightType t : kLegacyTypes) {
    std::vector<std::int64_t> widths = {256, 512, 4096, 14336};
    if (block_values(t) == 1) widths.insert(widths.end(), {33, 1000});
    for (std::int64_t rows : {1, 3, 67, 130}) {
      for (std::int64_t cols : widths) {
        const Shape s{rows, cols};
        const auto w = random_quantized_matrix(t, s, seed + rows * 7 + cols + static_cast<int>(t) * 1000);
        const auto x = gaussian_vector(cols, seed + cols);
        const LegacyReplay r = replay_legacy(t, w.data(), x.data(), s);
        std::vector<float> wrow(cols);
        for (std::int64_t row = 0; row < rows; ++row) {
          ASSERT_EQ(r.row_writes[row], 1) << to_string(t) << " " << to_string(s) << " row " << row;
          dequantize_row(t, w.data() + row * row_bytes(t, cols), wrow.data(), cols);
          double ref = 0, magnitude = 0;
          for (std::int64_t c = 0; c < cols; ++c) {
            ref += double(wrow[c]) * x[c];
            magnitude += std::fabs(double(wrow[c]) * x[c]);
          }
          // Float sums of cols/32 products per lane, then 32 lanes: far inside 1e-5.
          EXPECT_LE(std::fabs(r.y[row] - ref), 1e-5 * magnitude + 1e-30)
              << to_string(t) << " " << to_string(s) << " row " << row;
        }
        const auto [lo, hi] = std::minmax_element(r.value_reads.begin(), r.value_reads.end());
        EXPECT_EQ(*lo, 1) << to_string(t) << " " << to_string(s) << ": a weight is never read";
        EXPECT_EQ(*hi, 1) << to_string(t) << " " << to_string(s) << ": a weight is read twice";
      }
    }
  }
}

// ---------------------------------------------------------------------------------
// RMSNorm.

void replay_rms_norm(float* x, const float* delta, const float* weight, float* y, int n, float eps) {
  std::array<std::array<double, 32>, kNormThreads / 32> lanes{};
  for (int t = 0; t < kNormThreads; ++t) {
    for (int i = t; i < n; i += kNormThreads) {
      const float v = residual_sum(x, delta, i);
      if (delta) x[i] = v;
      lanes[t / 32][t % 32] += static_cast<double>(v) * v;
    }
  }
  double total = 0;
  for (const auto& warp : lanes) total += butterfly(warp);
  const float scale = rms_scale(total, n, eps);
  for (int t = 0; t < kNormThreads; ++t)
    for (int i = t; i < n; i += kNormThreads) y[i] = rms_apply(x[i], scale, weight[i]);
}

// The CPU forward's RMSNorm (model/forward.cpp), for comparison.
void cpu_rms_norm(const float* x, const float* weight, float* y, int n, float eps) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
  for (int i = 0; i < n; ++i) y[i] = x[i] * scale * weight[i];
}

std::vector<float> norm_weights(int n, std::uint64_t seed) {
  auto w = gaussian_vector(n, seed, 0.1f);
  for (float& v : w) v += 1.0f;
  return w;
}

TEST(GpuOps, RmsNormWithAndWithoutTheResidualMatchesTheCpu) {
  const std::uint64_t seed = fresh_seed();
  for (int n : {64, 576, 896, 4096, 5003}) {
    auto x = gaussian_vector(n, seed + n, 3.0f);
    const auto delta = gaussian_vector(n, seed + n + 1);
    const auto w = norm_weights(n, seed + n + 2);
    for (bool with_delta : {false, true}) {
      std::vector<float> gx = x, gy(n, kNaN), cx = x, cy(n);
      replay_rms_norm(gx.data(), with_delta ? delta.data() : nullptr, w.data(), gy.data(), n, 1e-5f);
      if (with_delta)
        for (int i = 0; i < n; ++i) cx[i] += delta[i];
      cpu_rms_norm(cx.data(), w.data(), cy.data(), n, 1e-5f);
      EXPECT_EQ(gx, cx) << "the residual add is the CPU's float add, n " << n;
      // Only the double sum's order differs: the float scale is the CPU's up to one ulp.
      for (int i = 0; i < n; ++i) ASSERT_NEAR(gy[i], cy[i], 2e-7 * std::fabs(cy[i]) + 1e-30) << n << " " << i;
    }
  }
}

// ---------------------------------------------------------------------------------
// The per-head step: biases, q/k norm, RoPE, the cache stores.

void replay_head_step(const HeadStepArgs& a) {
  const int tasks = head_tasks(a.n_head, a.n_head_kv), hd = a.head_dim, kv_width = a.n_head_kv * hd;
  const int pos = a.state->pos;
  for (int cta = 0; cta < (tasks + kHeadWarpsPerCta - 1) / kHeadWarpsPerCta; ++cta) {
    for (int warp = 0; warp < kHeadWarpsPerCta; ++warp) {
      const int task = cta * kHeadWarpsPerCta + warp;
      if (task >= tasks) continue;
      int head;
      const HeadKind kind = head_task(task, a.n_head, a.n_head_kv, head);
      const float *src, *bias, *norm;
      float* dst;
      if (kind == HeadKind::Q) {
        src = a.q + head * hd;
        bias = a.bq ? a.bq + head * hd : nullptr;
        norm = a.q_norm;
        dst = a.q + head * hd;
      } else if (kind == HeadKind::K) {
        src = a.k + head * hd;
        bias = a.bk ? a.bk + head * hd : nullptr;
        norm = a.k_norm;
        dst = a.k_cache + static_cast<std::size_t>(pos) * kv_width + head * hd;
      } else {
        src = a.v + head * hd;
        bias = a.bv ? a.bv + head * hd : nullptr;
        norm = nullptr;
        dst = a.v_cache + static_cast<std::size_t>(pos) * kv_width + head * hd;
      }
      float vals[32][kMaxDimsPerLane] = {};
      std::array<double, 32> ss{};
      for (int lane = 0; lane < 32; ++lane)
        for (int j = 0; j < kMaxDimsPerLane; ++j) {
          const int d = lane + 32 * j;
          if (d >= hd) continue;
          vals[lane][j] = bias ? src[d] + bias[d] : src[d];
          ss[lane] += static_cast<double>(vals[lane][j]) * vals[lane][j];
        }
      if (norm) {
        const float scale = rms_scale(butterfly(ss), hd, a.eps);
        for (int lane = 0; lane < 32; ++lane)
          for (int j = 0; j < kMaxDimsPerLane; ++j)
            if (lane + 32 * j < hd) vals[lane][j] = rms_apply(vals[lane][j], scale, norm[lane + 32 * j]);
      }
      if (kind != HeadKind::V) {
        float h[kMaxHeadDim];
        for (int lane = 0; lane < 32; ++lane)
          for (int j = 0; j < kMaxDimsPerLane; ++j)
            if (lane + 32 * j < hd) h[lane + 32 * j] = vals[lane][j];
        const int half = a.rope_dim / 2;
        for (int lane = 0; lane < 32; ++lane)
          for (int i = lane; i < half; i += 32) {
            int ia, ib;
            rope_pair(a.interleaved, i, half, ia, ib);
            rope_rotate(h[ia], h[ib], a.rope_cos[i], a.rope_sin[i], h[ia], h[ib]);
          }
        for (int lane = 0; lane < 32; ++lane)
          for (int j = 0; j < kMaxDimsPerLane; ++j)
            if (lane + 32 * j < hd) vals[lane][j] = h[lane + 32 * j];
      }
      for (int lane = 0; lane < 32; ++lane)
        for (int j = 0; j < kMaxDimsPerLane; ++j)
          if (lane + 32 * j < hd) dst[lane + 32 * j] = vals[lane][j];
    }
  }
}

void replay_rope_table(int pos, float* cos_table, float* sin_table, int rope_dim, float base) {
  for (int i = 0; i < rope_dim / 2; ++i) rope_cos_sin(pos, i, rope_dim, base, cos_table[i], sin_table[i]);
}

struct HeadCase {
  const char* name;
  int head_dim, rope_dim;
  bool interleaved, bias, norm;
};

TEST(GpuOps, HeadStepMatchesTheCpuBiasNormRopeAndCacheStores) {
  const std::uint64_t seed = fresh_seed();
  const HeadCase cases[] = {{"llama hd 64", 64, 64, true, false, false},
                            {"qwen2 hd 128", 128, 128, false, true, false},
                            {"qwen3 hd 128", 128, 128, false, false, true},
                            {"partial rotary hd 80", 80, 40, true, true, true},
                            {"hd 256 halves", 256, 256, false, false, true}};
  const int n_head = 6, n_head_kv = 2, context = 9;
  for (const HeadCase& hc : cases) {
    for (int pos : {0, 5, 8}) {
      const int hd = hc.head_dim, qw = n_head * hd, kvw = n_head_kv * hd;
      const std::uint64_t s = seed + hd * 100 + pos;
      const auto q0 = gaussian_vector(qw, s), k = gaussian_vector(kvw, s + 1), v = gaussian_vector(kvw, s + 2);
      const auto bq = gaussian_vector(qw, s + 3, 0.1f), bk = gaussian_vector(kvw, s + 4, 0.1f),
                 bv = gaussian_vector(kvw, s + 5, 0.1f);
      const auto qn = norm_weights(hd, s + 6), kn = norm_weights(hd, s + 7);
      std::vector<float> cos_t(hc.rope_dim / 2), sin_t(hc.rope_dim / 2);
      const int rope_pos = pos * 4099;  // far positions: the angles' low bits matter
      replay_rope_table(rope_pos, cos_t.data(), sin_t.data(), hc.rope_dim, 1e6f);

      std::vector<float> q = q0, kc(context * kvw, kNaN), vc(context * kvw, kNaN);
      DecodeState st;
      st.pos = pos;
      HeadStepArgs a;
      a.q = q.data();
      a.k = k.data();
      a.v = v.data();
      if (hc.bias) {
        a.bq = bq.data();
        a.bk = bk.data();
        a.bv = bv.data();
      }
      if (hc.norm) {
        a.q_norm = qn.data();
        a.k_norm = kn.data();
      }
      a.rope_cos = cos_t.data();
      a.rope_sin = sin_t.data();
      a.k_cache = kc.data();
      a.v_cache = vc.data();
      a.state = &st;
      a.n_head = n_head;
      a.n_head_kv = n_head_kv;
      a.head_dim = hd;
      a.rope_dim = hc.rope_dim;
      a.interleaved = hc.interleaved;
      a.eps = 1e-6f;
      replay_head_step(a);

      // The CPU forward's QkNormRope block.
      std::vector<float> cq = q0, ck = k, cv = v, cos_c(hc.rope_dim / 2), sin_c(hc.rope_dim / 2);
      for (int i = 0; i < hc.rope_dim / 2; ++i) {
        const double theta = rope_pos * std::pow(double(1e6f), -2.0 * i / hc.rope_dim);
        cos_c[i] = static_cast<float>(std::cos(theta));
        sin_c[i] = static_cast<float>(std::sin(theta));
      }
      if (hc.bias) {
        for (int i = 0; i < qw; ++i) cq[i] += bq[i];
        for (int i = 0; i < kvw; ++i) ck[i] += bk[i];
        for (int i = 0; i < kvw; ++i) cv[i] += bv[i];
      }
      if (hc.norm) {
        for (int h = 0; h < n_head; ++h) cpu_rms_norm(&cq[h * hd], qn.data(), &cq[h * hd], hd, 1e-6f);
        for (int h = 0; h < n_head_kv; ++h) cpu_rms_norm(&ck[h * hd], kn.data(), &ck[h * hd], hd, 1e-6f);
      }
      auto rope = [&](float* vec, int heads) {
        const int half = hc.rope_dim / 2;
        for (int h = 0; h < heads; ++h)
          for (int i = 0; i < half; ++i) {
            const int ia = hc.interleaved ? 2 * i : i, ib = hc.interleaved ? 2 * i + 1 : i + half;
            const float x0 = vec[h * hd + ia], x1 = vec[h * hd + ib];
            vec[h * hd + ia] = x0 * cos_c[i] - x1 * sin_c[i];
            vec[h * hd + ib] = x0 * sin_c[i] + x1 * cos_c[i];
          }
      };
      rope(cq.data(), n_head);
      rope(ck.data(), n_head_kv);
      EXPECT_EQ(cos_t, cos_c) << hc.name;
      EXPECT_EQ(sin_t, sin_c) << hc.name;

      const float tol = hc.norm ? 3e-7f : 0.0f;  // norms: the double sum's order may move the scale an ulp
      for (int i = 0; i < qw; ++i) ASSERT_NEAR(q[i], cq[i], tol * std::fabs(cq[i])) << hc.name << " q " << i;
      for (int i = 0; i < kvw; ++i) {
        ASSERT_NEAR(kc[pos * kvw + i], ck[i], tol * std::fabs(ck[i])) << hc.name << " k " << i;
        ASSERT_EQ(vc[pos * kvw + i], cv[i]) << hc.name << " v " << i;
      }
      // Nothing else of the cache was touched.
      for (int t = 0; t < context; ++t) {
        if (t == pos) continue;
        for (int i = 0; i < kvw; ++i) ASSERT_TRUE(std::isnan(kc[t * kvw + i]) && std::isnan(vc[t * kvw + i]));
      }
    }
  }
}

// ---------------------------------------------------------------------------------
// Attention.

void replay_attention(const AttentionArgs& a) {
  const int hd = a.head_dim, kv_width = a.n_head_kv * hd, group = a.n_head / a.n_head_kv;
  const int stride = attention_partial_floats(hd);
  for (int head = 0; head < a.n_head; ++head) {
    const int kv_off = (head / group) * hd;
    for (int split = 0; split < a.n_splits; ++split) {
      int begin, end;
      attention_split_range(a.state->pos + 1, a.n_splits, split, begin, end);
      float warp_max[kAttnWarps], warp_sum_exp[kAttnWarps], warp_acc[kAttnWarps][kMaxHeadDim];
      for (int warp = 0; warp < kAttnWarps; ++warp) {
        float max = -INFINITY, sum = 0.0f;
        float acc[32][kMaxDimsPerLane] = {};
        for (int t = begin + warp; t < end; t += kAttnWarps) {
          const float* k = a.k_cache + static_cast<std::size_t>(t) * kv_width + kv_off;
          const float* v = a.v_cache + static_cast<std::size_t>(t) * kv_width + kv_off;
          std::array<float, 32> dots{};
          for (int lane = 0; lane < 32; ++lane)
            for (int j = 0; j < kMaxDimsPerLane; ++j) {
              const int d = lane + 32 * j;
              if (d < hd) dots[lane] += a.q[head * hd + d] * k[d];
            }
          float rescale, weight;
          online_softmax_add(max, sum, butterfly(dots) * a.scale, rescale, weight);
          for (int lane = 0; lane < 32; ++lane)
            for (int j = 0; j < kMaxDimsPerLane; ++j) {
              const int d = lane + 32 * j;
              if (d < hd) acc[lane][j] = acc[lane][j] * rescale + weight * v[d];
            }
        }
        for (int lane = 0; lane < 32; ++lane)
          for (int j = 0; j < kMaxDimsPerLane; ++j)
            if (lane + 32 * j < hd) warp_acc[warp][lane + 32 * j] = acc[lane][j];
        warp_max[warp] = max;
        warp_sum_exp[warp] = sum;
      }
      float m = -INFINITY;
      for (int w = 0; w < kAttnWarps; ++w) m = std::fmax(m, warp_max[w]);
      float* out = a.partials + (static_cast<std::size_t>(head) * a.n_splits + split) * stride;
      for (int d = 0; d < hd; ++d) {
        float o = 0.0f;
        for (int w = 0; w < kAttnWarps; ++w) o += warp_acc[w][d] * merge_scale(warp_max[w], m);
        out[2 + d] = o;
      }
      float l = 0.0f;
      for (int w = 0; w < kAttnWarps; ++w) l += warp_sum_exp[w] * merge_scale(warp_max[w], m);
      out[0] = m;
      out[1] = l;
    }
    // The merge kernel.
    const float* parts = a.partials + static_cast<std::size_t>(head) * a.n_splits * stride;
    float m = -INFINITY;
    for (int s = 0; s < a.n_splits; ++s) m = std::fmax(m, parts[s * stride]);
    float l = 0.0f;
    for (int s = 0; s < a.n_splits; ++s) l += parts[s * stride + 1] * merge_scale(parts[s * stride], m);
    for (int d = 0; d < hd; ++d) {
      float o = 0.0f;
      for (int s = 0; s < a.n_splits; ++s) o += parts[s * stride + 2 + d] * merge_scale(parts[s * stride], m);
      a.out[head * hd + d] = o / l;
    }
  }
}

TEST(GpuOps, AttentionReplayMatchesSoftmaxAttentionForEverySplitAndPosition) {
  const std::uint64_t seed = fresh_seed();
  const int n_head = 8, n_head_kv = 2, context = 300;
  for (int hd : {64, 80, 128}) {
    const int kvw = n_head_kv * hd;
    for (float q_scale : {1.0f, 12.0f}) {  // 12: peaked softmax, the online max must rescale
      auto q = gaussian_vector(n_head * hd, seed + hd, q_scale);
      auto kc = gaussian_vector(context * kvw, seed + hd + 1), vc = gaussian_vector(context * kvw, seed + hd + 2);
      for (int pos : {0, 1, 4, 63, 250}) {
        // Positions after pos are poison: attention must not read them.
        auto kp = kc, vp = vc;
        std::fill(kp.begin() + (pos + 1) * kvw, kp.end(), kNaN);
        std::fill(vp.begin() + (pos + 1) * kvw, vp.end(), kNaN);
        // Reference: the CPU's softmax attention, in double.
        std::vector<double> ref(n_head * hd, 0.0);
        const double scale = 1.0f / std::sqrt(static_cast<float>(hd));
        for (int h = 0; h < n_head; ++h) {
          const int off = (h / (n_head / n_head_kv)) * hd;
          std::vector<double> s(pos + 1);
          for (int t = 0; t <= pos; ++t) {
            double dot = 0;
            for (int d = 0; d < hd; ++d) dot += double(q[h * hd + d]) * kp[t * kvw + off + d];
            s[t] = dot * scale;
          }
          const double mx = *std::max_element(s.begin(), s.end());
          double sum = 0;
          for (double& x : s) sum += (x = std::exp(x - mx));
          for (int t = 0; t <= pos; ++t)
            for (int d = 0; d < hd; ++d) ref[h * hd + d] += s[t] / sum * vp[t * kvw + off + d];
        }
        for (int splits : {1, 3, 8, 64}) {
          std::vector<float> partials(n_head * splits * attention_partial_floats(hd), kNaN), out(n_head * hd, kNaN);
          DecodeState st;
          st.pos = pos;
          AttentionArgs a;
          a.q = q.data();
          a.k_cache = kp.data();
          a.v_cache = vp.data();
          a.partials = partials.data();
          a.out = out.data();
          a.state = &st;
          a.n_head = n_head;
          a.n_head_kv = n_head_kv;
          a.head_dim = hd;
          a.n_splits = splits;
          a.scale = static_cast<float>(scale);
          replay_attention(a);
          double err = 0, norm = 0;
          for (int i = 0; i < n_head * hd; ++i) {
            ASSERT_FALSE(std::isnan(out[i])) << "hd " << hd << " pos " << pos << " splits " << splits << " i " << i;
            err += (out[i] - ref[i]) * (out[i] - ref[i]);
            norm += ref[i] * ref[i];
          }
          EXPECT_LT(err / norm, 1e-11) << "hd " << hd << " pos " << pos << " splits " << splits << " q x" << q_scale;
        }
      }
    }
  }
}

TEST(GpuOps, AttentionSplitsCoverThePositionsOnce) {
  for (int n_pos : {1, 2, 7, 64, 65, 1000}) {
    for (int splits : {1, 2, 3, 8, 64}) {
      std::vector<int> seen(n_pos, 0);
      for (int s = 0; s < splits; ++s) {
        int begin, end;
        attention_split_range(n_pos, splits, s, begin, end);
        ASSERT_LE(begin, end);
        for (int t = begin; t < end; ++t) ++seen[t];
      }
      for (int t = 0; t < n_pos; ++t) ASSERT_EQ(seen[t], 1) << n_pos << " " << splits << " " << t;
      int begin, end;
      attention_split_range(n_pos, splits, 0, begin, end);
      EXPECT_EQ(begin, 0);
      EXPECT_GT(end, 0) << "split 0 holds position 0, which the merge relies on";
    }
  }
}

TEST(GpuOps, SwigluIsTheCpus) {
  const std::uint64_t seed = fresh_seed();
  const auto g = gaussian_vector(1536, seed, 3.0f), u = gaussian_vector(1536, seed + 1);
  for (int i = 0; i < 1536; ++i) {
    const float cpu = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    ASSERT_EQ(swiglu(g[i], u[i]), cpu) << i;
    const double exact = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * u[i];
    ASSERT_NEAR(swiglu(g[i], u[i]), exact, 1e-6 * std::fabs(exact) + 1e-30);
  }
}

// ---------------------------------------------------------------------------------
// Outlier routing's test: outlier_test_kernel's thread partials, the warp butterflies
// (in their order: lane l merges lane l ^ offset into its own) and the CTA merge.

bool replay_outlier_test(const float* x, int n, double k) {
  std::array<std::array<OutlierPartial, 32>, kOutlierThreads / 32> lanes{};
  for (int t = 0; t < kOutlierThreads; ++t)
    for (int i = t; i < n; i += kOutlierThreads) outlier_add(lanes[t / 32][t % 32], x[i]);
  OutlierPartial total;
  for (auto& warp : lanes) {
    for (int offset = 16; offset > 0; offset /= 2) {
      std::array<OutlierPartial, 32> next = warp;
      for (int l = 0; l < 32; ++l) outlier_merge(next[l], warp[l ^ offset]);
      warp = next;
    }
    outlier_merge(total, warp[0]);
  }
  return outlier_trips(total, n, k);
}

TEST(GpuOps, OutlierTestMakesTheCpuCriterionsDecision) {
  std::mt19937 rng(fresh_seed());
  int decided = 0, tripped = 0;
  for (int n : {1, 5, 31, 256, 257, 1000, 4096, 11008}) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<float> x = gaussian_vector(n, rng(), 1.0f);
      // 0 to 4 channels at 2x to 60x the rms, then a k near the vector's own max/rms, so
      // both verdicts come up and some land within a hair of the threshold.
      const int outliers = std::min(n, static_cast<int>(rng() % 5));
      for (int o = 0; o < outliers; ++o)
        x[rng() % n] = (rng() % 2 ? 1.0f : -1.0f) * std::uniform_real_distribution<float>(2.0f, 60.0f)(rng);
      const double ratio = peak_to_rms(x.data(), n);
      for (double k : {0.0, 1.0, 8.0, ratio * 0.999, ratio * 1.001, std::sqrt(double(n)), 1e9}) {
        const bool want = has_massive_activation_reference(x.data(), n, k);
        EXPECT_EQ(replay_outlier_test(x.data(), n, k), want) << "n " << n << " k " << k << " max/rms " << ratio;
        ++decided;
        tripped += want;
      }
    }
  }
  EXPECT_GT(tripped, decided / 5);
  EXPECT_LT(tripped, decided * 4 / 5);

  // The edges kernels/outliers.h defines: nothing to lose, a non-finite value, the
  // strict threshold of a one-hot vector (max/rms = sqrt(n) exactly for n = 4).
  const std::vector<float> zeros(64, 0.0f), one_hot{0.0f, 3.0f, 0.0f, 0.0f};
  EXPECT_FALSE(replay_outlier_test(zeros.data(), 64, 0.0));
  EXPECT_FALSE(replay_outlier_test(one_hot.data(), 4, 2.0));
  EXPECT_TRUE(replay_outlier_test(one_hot.data(), 4, 1.999));
  for (float bad : {kNaN, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
    std::vector<float> v = gaussian_vector(300, rng(), 1.0f);
    v[rng() % 300] = bad;
    EXPECT_TRUE(replay_outlier_test(v.data(), 300, 1e9)) << bad;
    EXPECT_EQ(replay_outlier_test(v.data(), 300, 1e9), has_massive_activation_reference(v.data(), 300, 1e9));
  }
}

// ---------------------------------------------------------------------------------
// The sampler.

int replay_sample(const std::vector<float>& logits, const SampleParams& p, int position) {
  static auto scratch = std::make_unique<SampleScratch>();
  std::memset(scratch.get(), 0xab, sizeof(SampleScratch));  // stale contents must not matter
  HostTeam team;
  return sample_tokens(team, *scratch, logits.data(), static_cast<int>(logits.size()), p, position);
}

// The CPU sampler's rules, by sorting: the top-k by (logit desc, index asc), the
// shortest prefix whose mass reaches top_p, the draw over the kept tokens in index
// order with the same fixed-point weights and the same u.
struct Reference {
  std::vector<int> kept;  // in index order
  std::vector<fixed_mass> weight;
  fixed_mass total = 0;
};

Reference reference_kept(const std::vector<float>& logits, const SampleParams& p) {
  const int n = static_cast<int>(logits.size());
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  const int k = p.top_k > 0 ? std::min(p.top_k, n) : n;
  order.resize(k);
  const float max_logit = logits[order[0]];
  fixed_mass total = 0;
  for (int i : order) total += fixed_weight(logits[i], max_logit, p.temperature);
  int keep = k;
  if (p.top_p < 1.0f) {
    const auto target = static_cast<fixed_mass>(static_cast<double>(p.top_p) * static_cast<double>(total));
    fixed_mass before = 0;
    keep = 0;
    for (int i : order) {
      if (keep > 0 && before >= target) break;  // the nucleus holds at least the top token, as on the CPU
      before += fixed_weight(logits[i], max_logit, p.temperature);
      ++keep;
    }
  }
  order.resize(keep);
  std::sort(order.begin(), order.end());
  Reference r;
  r.kept = order;
  for (int i : order) {
    r.weight.push_back(fixed_weight(logits[i], max_logit, p.temperature));
    r.total += r.weight.back();
  }
  return r;
}

int reference_draw(const Reference& r, const SampleParams& p, int position) {
  fixed_mass left = static_cast<fixed_mass>(uniform01(p.seed, position) * static_cast<double>(r.total));
  if (left >= r.total) left = r.total - 1;
  for (std::size_t i = 0; i < r.kept.size(); ++i) {
    if (left < r.weight[i]) return r.kept[i];
    left -= r.weight[i];
  }
  return -1;
}

TEST(GpuSampler, GreedyIsTheCpuArgmaxWithTheLowestIndexOnTies) {
  std::mt19937 rng(fresh_seed());
  for (int n : {1, 5, 1000, 49152, 151936}) {
    auto logits = gaussian_vector(n, rng(), 2.0f);
    if (n > 900) {
      // The maximum three times: the lowest index must win, as on the CPU.
      const float top = *std::max_element(logits.begin(), logits.end()) + 1.0f;
      for (int i : {n - 1, 777, 891}) logits[i] = top;
    }
    Sampler cpu(SamplerConfig{});
    const int expected = cpu.sample(logits);
    SampleParams greedy;
    EXPECT_EQ(replay_sample(logits, greedy, 3), expected) << n;
    SampleParams top1;  // top-k 1 is greedy at any temperature, as on the CPU
    top1.temperature = 0.9f;
    top1.top_k = 1;
    EXPECT_EQ(replay_sample(logits, top1, 3), expected) << n;
  }
}

TEST(GpuSampler, NonFiniteLogitsAreReportedByTheirFirstIndex) {
  auto logits = gaussian_vector(3000, fresh_seed());
  logits[2100] = kNaN;
  logits[1500] = std::numeric_limits<float>::infinity();
  logits[2900] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(replay_sample(logits, SampleParams{}, 0), -1 - 1500);
  SampleParams t;
  t.temperature = 1.0f;
  EXPECT_EQ(replay_sample(logits, t, 0), -1 - 1500);
}

TEST(GpuSampler, TemperatureTopKTopPDrawExactlyWhatTheRulesKeep) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  struct Case {
    float temperature;
    int top_k;
    float top_p;
  };
  const Case cases[] = {{0.7f, 0, 1.0f}, {1.0f, 40, 1.0f}, {0.8f, 0, 0.9f}, {1.3f, 50, 0.5f},
                        {0.5f, 0, 0.999f}, {2.0f, 7, 0.3f}, {1.0f, 0, 0.0001f},
                        {1.0f, 0, 1e-20f}, {0.6f, 9, 1e-20f}};  // targets that round to no mass at all
  for (int n : {5, 700, 5000, 49152}) {
    for (bool ties : {false, true}) {
      auto logits = gaussian_vector(n, rng(), 2.0f);
      if (ties)  // few distinct values: many ties at both thresholds
        for (float& v : logits) v = std::round(v * 2.0f) / 2.0f;
      for (const Case& c : cases) {
        SampleParams p;
        p.temperature = c.temperature;
        p.top_k = c.top_k < n ? c.top_k : 0;
        p.top_p = c.top_p;
        p.seed = rng();
        const Reference ref = reference_kept(logits, p);
        const int draws = n > 10000 ? 12 : 60;
        for (int pos = 0; pos < draws; ++pos) {
          const int got = replay_sample(logits, p, pos);
          ASSERT_EQ(got, reference_draw(ref, p, pos))
              << "n " << n << (ties ? " ties" : "") << " T " << c.temperature << " k " << p.top_k << " p " << c.top_p
              << " position " << pos << ", kept " << ref.kept.size();
        }
      }
    }
  }
}

// Against the CPU sampler itself: the tokens it can return (over many seeds) are the
// tokens the GPU sampler can return (over many positions), where the top-k cut and
// the nucleus edge fall inside runs of equal logits.
TEST(GpuSampler, KeepsTheCpuSamplersTokensAtTiedThresholds) {
  std::mt19937 rng(fresh_seed());
  std::vector<float> few_values(40);
  for (float& v : few_values) v = 0.5f * std::uniform_int_distribution<int>(0, 3)(rng);
  struct Case {
    std::vector<float> logits;
    float temperature;
    int top_k;
    float top_p;
  };
  const Case cases[] = {{std::vector<float>(8, 1.25f), 1.0f, 0, 0.5f},  // the nucleus edge between two ties
                        {std::vector<float>(8, 1.25f), 1.0f, 3, 1.0f},  // top-k through a tie
                        {{1, 2, 2, 2, 1, 2, 0, 2}, 0.7f, 2, 1.0f},
                        {few_values, 1.0f, 10, 1.0f},
                        {few_values, 1.0f, 0, 0.6f},
                        {few_values, 1.3f, 12, 0.7f},
                        {few_values, 1.0f, 0, 1e-20f},  // p * mass rounds to 0: the top token alone
                        // -0 and +0 are one logit: ties by index, not by sign bit
                        {{1, -0.0f, 0.0f, -0.0f, 0.0f, -1}, 1.0f, 3, 1.0f},
                        {{-0.0f, 0.0f, -0.0f, 0.0f, -3}, 1.0f, 0, 0.3f}};
  for (const Case& c : cases) {
    std::set<int> cpu_tokens, gpu_tokens;
    SampleParams p;
    p.temperature = c.temperature;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.seed = rng();
    for (int i = 0; i < 3000; ++i) {
      Sampler cpu(SamplerConfig{c.temperature, c.top_k, c.top_p, rng()});
      cpu_tokens.insert(cpu.sample(c.logits));
      gpu_tokens.insert(replay_sample(c.logits, p, i));
    }
    EXPECT_EQ(gpu_tokens, cpu_tokens) << "n " << c.logits.size() << " T " << c.temperature << " k " << c.top_k
                                      << " p " << c.top_p;
  }
}

TEST(GpuSampler, DrawsFollowTheKeptProbabilities) {
  std::mt19937 rng(fresh_seed());
  const auto logits = gaussian_vector(60, rng(), 1.5f);
  SampleParams p;
  p.temperature = 0.9f;
  p.top_k = 30;
  p.top_p = 0.95f;
  p.seed = rng();
  const Reference ref = reference_kept(logits, p);
  std::vector<int> count(logits.size(), 0);
  const int draws = 20000;
  for (int pos = 0; pos < draws; ++pos) ++count[replay_sample(logits, p, pos)];
  double chi2 = 0;
  int outside = draws;
  for (std::size_t i = 0; i < ref.kept.size(); ++i) {
    const double expected = draws * double(ref.weight[i]) / double(ref.total);
    const int seen = count[ref.kept[i]];
    outside -= seen;
    chi2 += (seen - expected) * (seen - expected) / expected;
  }
  EXPECT_EQ(outside, 0) << "a draw outside the kept tokens";
  const double dof = static_cast<double>(ref.kept.size()) - 1;
  EXPECT_LT(chi2, dof + 6 * std::sqrt(2 * dof) + 10) << "kept " << ref.kept.size();
}

// ---------------------------------------------------------------------------------
// The whole step: decode_step with an executor of the replays above.

// Stand-ins for K-quant CUDA kernels (written beside this work): specs the bind takes
// like any CUDA kernel; the replay executor computes them with a double dot.
Status never_run(const MatVecArgs&) { return Status::Error("a test stand-in, never launched"); }

const KernelSpec* stand_in(WeightType w, ActFormat act, OpKind op = OpKind::MatVec) {
  static std::map<std::tuple<int, int, int>, std::unique_ptr<KernelSpec>> specs;
  auto& s = specs[{static_cast<int>(w), static_cast<int>(act), static_cast<int>(op)}];
  if (!s) {
    s = std::make_unique<KernelSpec>();
    s->name = fmt::format("{}.cuda.test_stand_in_{}{}", to_string(w), to_string(act), op == OpKind::FusedUpGate ? "_fused" : "");
    s->op = op;
    s->weight = w;
    s->act = act;
    s->backend = Backend::CUDA;
    s->supports = block_values(w) == kSuperBlock ? supports_superblock_cols : supports_block32_cols;
    s->shape_rule = "test";
    s->run = never_run;
  }
  return s.get();
}

class ReplayExec {
 public:
  ReplayExec(const ModelConfig& c, const StepProgram& p, int splits, SampleParams sample)
      : c_(c), p_(p), splits_(splits), sample_(sample) {}
  int quantizations = 0;        // standalone quantizer launches
  int fused_quantizations = 0;  // Q8_1 copies the norm, SwiGLU and fused attention kernels wrote
  bool fuse_attention = false;  // GpuForwardOptions::fuse_attention
  int fused_attentions = 0;
  // Outlier routing: the step's tests and their readers, every test's vector and
  // verdict, and every routable call with the kernel it ran.
  OutlierLedger ledger;
  struct Test {
    std::vector<float> x;
    double k;
    bool verdict;
  };
  std::vector<Test> tests;
  struct RoutedCall {
    Op part;
    int test;  // index into tests
    const KernelSpec* ran;
    int slot;                  // its test's verdict slot in the step
    unsigned long long node;   // the conditional handle its graph node would get
    const KernelSpec *int8, *sibling;
  };
  std::vector<RoutedCall> routed_calls;
  // As GpuForward's capture: one handle per routed call, listed in its test's row.
  RouteTable route_table;
  std::mt19937_64 handles{fresh_seed()};

  DecodeState* state() { return static_cast<DecodeState*>(p_.state); }
  void embed() {
    const auto* row = static_cast<const std::uint8_t*>(p_.token_embd) +
                      static_cast<std::size_t>(state()->token) * row_bytes(p_.embd_type, c_.n_embd);
    for (int i = 0; i < c_.n_embd; ++i) p_.x[i] = dequantize_row_value(p_.embd_type, row, i);
    replay_rope_table(state()->pos, p_.rope_cos, p_.rope_sin, c_.rope_dim, c_.rope_freq_base);
  }
  // As GpuForward: where int8 kernels may read it, the norm and SwiGLU kernels also
  // write the Q8_1 form of their output (quantize_q8_1_warp_block: quantize_row_q8_1's
  // bytes), and a vector set from that output needs no quantizer launch.
  void rms_norm(float* x, const float* delta, const float* w, float* y, int n) {
    replay_rms_norm(x, delta, w, y, n, c_.rms_eps);
    quantize_written(y, n);
  }
  void set_activation(const float* x, std::int64_t n) {
    x_ = x;
    n_ = n;
    q8_1_ready_ = x == q8_1_holds_;
    test_slot_ = -1;
  }
  void matvec(const MatvecOp& m, float* y, float* y2 = nullptr) {
    ASSERT_EQ(m.shape.cols, n_) << m.kernel->name << ": the activation vector set is not the one it reads";
    const KernelSpec* kernel = m.kernel;
    if (m.outlier_kernel) {
      // As GpuForward: one test per vector (and k), its verdict in the step's slot.
      if (test_slot_ < 0 || test_k_ != m.outlier_k) {
        test_slot_ = ledger.open(p_.outlier_slots);
        test_k_ = m.outlier_k;
        const bool trips = replay_outlier_test(x_, static_cast<int>(n_), m.outlier_k);
        p_.outlier_verdicts[test_slot_] = trips ? 1 : 0;
        tests.push_back({std::vector<float>(x_, x_ + n_), m.outlier_k, trips});
      }
      ledger.read(test_slot_, m.part);
      const unsigned long long node = handles();
      route_table.add(test_slot_, node);
      if (p_.outlier_verdicts[test_slot_]) kernel = m.outlier_kernel;
      routed_calls.push_back({m.part, static_cast<int>(tests.size()) - 1, kernel, test_slot_, node, m.kernel,
                              m.outlier_kernel});
    }
    std::vector<float> x(x_, x_ + n_);
    if (kernel->act == ActFormat::Q8_1 || m.kernel->act == ActFormat::Q8_1) {
      if (!q8_1_ready_) {
        // The GPU quantizer gives quantize_row_q8_1's bytes.
        q8_1_.resize(row_bytes(ActFormat::Q8_1, n_));
        quantize_row_q8_1(x_, reinterpret_cast<BlockQ8_1*>(q8_1_.data()), n_);
        q8_1_ready_ = true;
        q8_1_holds_ = x_;
        ++quantizations;
      }
      // The int8 reader's activations; a routed f32 sibling reads the vector itself.
      if (kernel->act == ActFormat::Q8_1)
        dequantize_row_q8_1(reinterpret_cast<const BlockQ8_1*>(q8_1_.data()), x.data(), n_);
    }
    // A fused op runs each matrix; a stacked gate+up (no w2) is one matrix whose rows
    // run on from y into y2.
    run(kernel, m.w, m.shape, x.data(), y);
    if (m.w2) run(kernel, m.w2, m.shape, x.data(), y2);
  }
  // As GpuForward with fuse_attention: the head step inside attention, q rotated in a
  // copy (the fused kernel leaves q as the matvec wrote it), and the output's Q8_1
  // blocks written with it where head_dim is a multiple of 32.
  void head_step(const LayerOps& l) {
    if (!fuse_attention) replay_head_step(head_step_args(c_, p_, l));
  }
  void attention(const LayerOps& l) {
    if (!fuse_attention) {
      replay_attention(attention_args(c_, p_, l, splits_));
      return;
    }
    const int width = c_.n_head * c_.head_dim;
    std::vector<float> q(p_.q, p_.q + width);
    HeadStepArgs h = head_step_args(c_, p_, l);
    h.q = q.data();
    replay_head_step(h);
    AttentionArgs a = attention_args(c_, p_, l, splits_);
    a.q = q.data();
    replay_attention(a);
    ++fused_attentions;
    if (c_.head_dim % kQ8_1Block == 0) quantize_written(p_.att, width);
  }
  void swiglu(float* gate, const float* up, int n) {
    for (int i = 0; i < n; ++i) gate[i] = cuda::swiglu(gate[i], up[i]);
    quantize_written(gate, n);
  }
  void sample(const float* logits, int n) {
    state()->sampled = replay_sample(std::vector<float>(logits, logits + n), sample_, state()->pos);
    state()->pos += 1;
  }

 private:
  void quantize_written(const float* y, int n) {
    q8_1_holds_ = nullptr;
    if (!p_.act_q8_1 || n % kQ8_1Block != 0) return;
    q8_1_.resize(row_bytes(ActFormat::Q8_1, n));
    quantize_row_q8_1(y, reinterpret_cast<BlockQ8_1*>(q8_1_.data()), n);
    q8_1_holds_ = y;
    ++fused_quantizations;
  }
  void run(const KernelSpec* k, const void* w, Shape s, const float* x, float* y) {
    if (k == testing::legacy_cuda_kernel(k->weight)) {
      const LegacyReplay r = replay_legacy(k->weight, w, x, s);
      std::copy(r.y.begin(), r.y.end(), y);
      return;
    }
    std::vector<float> row(s.cols);
    for (std::int64_t r = 0; r < s.rows; ++r) {
      dequantize_row(k->weight, static_cast<const std::uint8_t*>(w) + r * row_bytes(k->weight, s.cols), row.data(), s.cols);
      double sum = 0;
      for (std::int64_t c = 0; c < s.cols; ++c) sum += double(row[c]) * x[c];
      y[r] = static_cast<float>(sum);
    }
  }

  const ModelConfig& c_;
  const StepProgram& p_;
  int splits_;
  SampleParams sample_;
  const float* x_ = nullptr;
  std::int64_t n_ = 0;
  std::vector<std::uint8_t> q8_1_;
  bool q8_1_ready_ = false;
  const float* q8_1_holds_ = nullptr;  // the vector q8_1_ holds
  int test_slot_ = -1;
  double test_k_ = 0;
};

// The GPU step of a model and plan, in host memory.
// With `device_layout`, the weights are copied where GpuForward puts them on the device
// (weight_offsets), so gate and up lie back to back and stack.
struct ReplayedGpu {
  ReplayedGpu(const LoadedModel& m, const std::vector<PlannedMatvec>& plan, int context, int splits,
              SampleParams sample = {}, bool device_layout = false)
      : bound(bind_gpu_plan(m.config, m.weights, plan)),
        layout(scratch_layout(m.config, splits, bound.needs_q8_1, bound.routes_outliers)),
        scratch(layout.bytes / sizeof(double) + 1, 0.0),
        kv(kv_cache_bytes(m.config, context) / sizeof(float), kNaN),
        program(make_step_program(m.config, bound, context, addresses(device_layout), layout, scratch.data(),
                                  kv.data())),
        exec(m.config, program, splits, sample) {}
  std::function<const void*(const gguf::Tensor*)> addresses(bool device_layout) {
    if (!device_layout) return [](const gguf::Tensor* t) -> const void* { return t->data; };
    std::size_t total = 0;
    const std::vector<std::size_t> offsets = weight_offsets(bound, total);
    weights.assign(total + 256, 0);
    const auto misalign = reinterpret_cast<std::uintptr_t>(weights.data()) % 256;
    std::uint8_t* base = weights.data() + (misalign ? 256 - misalign : 0);  // as cudaMalloc aligns
    for (std::size_t i = 0; i < bound.tensors.size(); ++i) {
      std::memcpy(base + offsets[i], bound.tensors[i]->data, bound.tensors[i]->bytes);
      device_address[bound.tensors[i]] = base + offsets[i];
    }
    return [this](const gguf::Tensor* t) -> const void* { return t ? device_address.at(t) : nullptr; };
  }
  int step(int token) {
    exec.state()->token = token;
    exec.ledger.clear();
    exec.route_table.reset(program.outlier_slots);
    const std::size_t first_call = exec.routed_calls.size();
    decode_step(exec, program);
    if (exec.ledger.tests() > 0) exec.ledger.count(program.outlier_verdicts, routing);
    check_graph_routing(first_call);
    return exec.state()->sampled;
  }
  // What the captured graph would run: each test kernel sets the handles of its row
  // (outlier_test_kernel's loop); every routed call's node must have a handle of its
  // own, set once, by its own test, to the verdict that picks the kernel it ran.
  void check_graph_routing(std::size_t first_call) {
    std::map<unsigned long long, int> sets;
    std::map<unsigned long long, unsigned> condition;
    for (int slot = 0; slot < exec.ledger.tests(); ++slot)
      for_each_route_handle(exec.route_table.row(slot), [&](unsigned long long h) {
        ++sets[h];
        condition[h] = program.outlier_verdicts[slot] ? 1u : 0u;
      });
    std::size_t nodes = 0;
    for (std::size_t i = first_call; i < exec.routed_calls.size(); ++i, ++nodes) {
      const auto& call = exec.routed_calls[i];
      ASSERT_EQ(sets[call.node], 1) << to_string(call.part) << ": its node's condition is set once, by its test";
      EXPECT_EQ(condition[call.node], static_cast<unsigned>(program.outlier_verdicts[call.slot])) << to_string(call.part);
      EXPECT_EQ(call.ran, condition[call.node] ? call.sibling : call.int8) << to_string(call.part);
    }
    EXPECT_EQ(sets.size(), nodes) << "a handle no node reads";
  }
  std::vector<float> logits() const { return {program.logits, program.logits + program.vocab}; }

  BoundModel bound;
  ScratchLayout layout;
  std::vector<double> scratch;
  std::vector<float> kv;
  std::vector<std::uint8_t> weights;  // device_layout: the weights, as laid out on the device
  std::unordered_map<const gguf::Tensor*, const void*> device_address;
  StepProgram program;
  ReplayExec exec;
  StepTimes routing;  // as GpuForward::routing
};

// The legacy GPU kernels where one exists, stand-ins for the K-quants.
std::vector<PlannedMatvec> gpu_f32_plan(const std::vector<PlannedMatvec>& cpu) {
  return testing::gpu_plan(cpu, [](const PlannedMatvec& p) {
    const KernelSpec* k = testing::legacy_cuda_kernel(p.weight);
    return k ? k : stand_in(p.weight, ActFormat::F32);
  });
}

TEST(GpuStepReplay, LogitsAndGreedyTokensMatchCpuForwardOnEveryArchitectureAndType) {
  std::mt19937 rng(fresh_seed());
  for (const char* arch : {"llama", "qwen2", "qwen3"}) {
    for (const char* mix : {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "f16", "bf16", "f32", "q4_K_m"}) {
      const LoadedModel m(testing::synthetic_model(arch, mix));
      const auto cpu_plan = testing::cpu_f32_plan(m.weights);
      const int tokens = 6;
      CpuForward cpu(m.config, m.weights, cpu_plan, 1, tokens);
      ReplayedGpu gpu(m, gpu_f32_plan(cpu_plan), tokens, 3);
      for (int i = 0; i < tokens; ++i) {
        const int token = std::uniform_int_distribution<int>(0, m.config.vocab_size - 1)(rng);
        const auto ref = cpu.step(token);
        const int sampled = gpu.step(token);
        const std::vector<float> want(ref.begin(), ref.end()), got = gpu.logits();
        EXPECT_LT(nmse(got, want), 1e-9) << arch << " " << mix << " position " << i;
        std::vector<float> sorted = want;
        std::sort(sorted.begin(), sorted.end(), std::greater<>());
        if (sorted[0] - sorted[1] > 1e-3f * std::fabs(sorted[0])) {  // not a near tie
          EXPECT_EQ(sampled, testing::argmax(want.data(), m.config.vocab_size)) << arch << " " << mix << " " << i;
        }
      }
    }
  }
}

TEST(GpuStepReplay, FusedGateUpAndManySplitsGiveTheSameStep) {
  const LoadedModel m(testing::synthetic_model("qwen2", "q4_K_m"));
  const auto cpu_plan = testing::cpu_f32_plan(m.weights);
  auto fused_plan = gpu_f32_plan(cpu_plan);
  // Replace the gate and up entries of the K-quant layers by one fused entry each.
  std::vector<PlannedMatvec> plan;
  for (const PlannedMatvec& p : fused_plan) {
    if (p.op == Op::FfnUp && block_values(p.weight) == kSuperBlock) continue;
    if (p.op == Op::FfnGate && block_values(p.weight) == kSuperBlock) {
      PlannedMatvec f = p;
      f.op = Op::FfnUpGate;
      f.kernel = stand_in(p.weight, ActFormat::F32, OpKind::FusedUpGate);
      plan.push_back(f);
      continue;
    }
    plan.push_back(p);
  }
  ReplayedGpu a(m, gpu_f32_plan(cpu_plan), 5, 1), b(m, plan, 5, 5);
  int fused_layers = 0;
  for (const BoundLayer& l : b.bound.layers) fused_layers += l.fused;
  EXPECT_GT(fused_layers, 0);
  std::mt19937 rng(fresh_seed());
  for (int i = 0; i < 5; ++i) {
    const int token = std::uniform_int_distribution<int>(0, m.config.vocab_size - 1)(rng);
    a.step(token);
    b.step(token);
    EXPECT_LT(nmse(b.logits(), a.logits()), 1e-11) << i;
  }
}

// On synthetic models of `archs` with three weight mixes, for an f32 and a Q8_1 plan: the
// step in the device layout (`stacked`, which `inspect(m, mix, stacked)` checks) and in
// the host layout with `unstack` applied to each layer (`apart`) sample the same tokens
// with the same logits and quantizations, and with the f32 plan give the CPU's logits.
template <class Unstack, class Inspect>
void expect_stacking_keeps_the_step(std::initializer_list<const char*> archs, Unstack unstack, Inspect inspect) {
  std::mt19937 rng(fresh_seed());
  for (const char* arch : archs) {
    for (const char* mix : {"q4_K_m", "q8_0", "f16"}) {
      SCOPED_TRACE(std::string(arch) + " " + mix);
      const LoadedModel m(testing::synthetic_model(arch, mix));
      const auto cpu_plan = testing::cpu_f32_plan(m.weights);
      const auto q8_plan =
          testing::gpu_plan(cpu_plan, [](const PlannedMatvec& p) { return stand_in(p.weight, ActFormat::Q8_1); });
      for (const auto& plan : {gpu_f32_plan(cpu_plan), q8_plan}) {
        const int tokens = 4;
        CpuForward cpu(m.config, m.weights, cpu_plan, 1, tokens);
        ReplayedGpu apart(m, plan, tokens, 2), stacked(m, plan, tokens, 2, {}, true);
        for (LayerOps& l : apart.program.layers) unstack(l);
        inspect(m, std::string(mix), stacked);
        for (int i = 0; i < tokens; ++i) {
          const int token = std::uniform_int_distribution<int>(0, m.config.vocab_size - 1)(rng);
          const auto ref = cpu.step(token);
          apart.exec.quantizations = stacked.exec.quantizations = 0;
          EXPECT_EQ(stacked.step(token), apart.step(token)) << i;
          EXPECT_LT(nmse(stacked.logits(), apart.logits()), 1e-12) << i;
          EXPECT_EQ(stacked.exec.quantizations, apart.exec.quantizations) << i;
          if (plan[0].kernel->act == ActFormat::F32) {
            EXPECT_LT(nmse(stacked.logits(), std::vector<float>(ref.begin(), ref.end())), 1e-9) << i;
          }
        }
      }
    }
  }
}

// Gate and up on one matrix: in the device layout every layer's pair stacks into one
// ffn_up_gate call of twice the rows, and the step is the same as with two calls.
TEST(GpuStepReplay, GateAndUpStackInTheDeviceLayoutAndGiveTheSameStep) {
  expect_stacking_keeps_the_step(
      {"llama", "qwen3"}, [](LayerOps& l) { l.fused = false; },  // two calls, whatever the layout
      [](const LoadedModel& m, const std::string&, const ReplayedGpu& stacked) {
        int stacked_layers = 0;
        for (const LayerOps& l : stacked.program.layers) {
          if (!l.fused) continue;
          ++stacked_layers;
          EXPECT_EQ(l.up_gate.part, Op::FfnUpGate);
          EXPECT_EQ(l.up_gate.shape.rows, 2 * m.config.n_ff);
          EXPECT_EQ(l.up_gate.w2, nullptr);
          EXPECT_EQ(l.up_gate.w_bytes, l.gate.w_bytes + l.up.w_bytes);
        }
        EXPECT_EQ(stacked_layers, m.config.n_layers);
      });
}

// A gate and up that cannot be one call stay two: different kernels, or not adjacent.
TEST(GpuStepReplay, GateAndUpStayApartWhenTheyCannotStack) {
  const LoadedModel m(testing::synthetic_model("llama", "q8_0"));
  const auto cpu_plan = testing::cpu_f32_plan(m.weights);
  auto plan = gpu_f32_plan(cpu_plan);
  for (PlannedMatvec& p : plan)
    if (p.op == Op::FfnUp) p.kernel = stand_in(p.weight, ActFormat::Q8_1);
  ASSERT_NE(std::find_if(plan.begin(), plan.end(), [](const PlannedMatvec& p) { return p.op == Op::FfnGate; })->kernel,
            std::find_if(plan.begin(), plan.end(), [](const PlannedMatvec& p) { return p.op == Op::FfnUp; })->kernel);
  ReplayedGpu differ(m, plan, 2, 1, {}, true);
  for (const LayerOps& l : differ.program.layers) EXPECT_FALSE(l.fused);
  // Same kernel, outputs no longer back to back.
  ReplayedGpu same(m, gpu_f32_plan(cpu_plan), 2, 1, {}, true);
  const StepProgram unstacked =
      make_step_program(m.config, same.bound, 2, [&](const gguf::Tensor* t) { return same.device_address.at(t); },
                        same.layout, same.scratch.data(), same.kv.data(), Stacking{false, true});
  for (const LayerOps& l : unstacked.layers) EXPECT_FALSE(l.fused) << "--no-stack-gate-up";
  StepProgram moved = same.program;
  for (LayerOps& l : moved.layers) l.fused = false;
  moved.up = moved.gate + moved.n_ff + 1;
  EXPECT_EQ(stack_gate_up(moved), 0);
  moved.up = moved.gate + moved.n_ff;
  EXPECT_EQ(stack_gate_up(moved), m.config.n_layers);
}

// q, k and v on one matrix: in the device layout each layer's q and k stack into one
// attn_qkv call, with v where it runs their kernel (Q4_K_M gives some layers' v more
// bits), and the step is the same as with three calls.
TEST(GpuStepReplay, QkvStackInTheDeviceLayoutAndGiveTheSameStep) {
  expect_stacking_keeps_the_step(
      {"llama", "qwen2", "qwen3"}, [](LayerOps& l) { l.qkv_stacked = 0; },  // three calls, whatever the layout
      [](const LoadedModel& m, const std::string& mix, const ReplayedGpu& stacked) {
        const int q_rows = m.config.n_head * m.config.head_dim, kv_rows = m.config.n_head_kv * m.config.head_dim;
        std::uint64_t qkv_bytes = 0;
        int with_v = 0, without_v = 0;
        for (std::size_t i = 0; i < stacked.program.layers.size(); ++i) {
          const LayerOps& l = stacked.program.layers[i];
          const bool v_shares = l.v.kernel == l.q.kernel;
          ASSERT_EQ(l.qkv_stacked, v_shares ? 3 : 2) << "layer " << i;
          (v_shares ? with_v : without_v) += 1;
          EXPECT_EQ(l.qkv.part, Op::AttnQkv);
          EXPECT_EQ(l.qkv.shape.rows, q_rows + kv_rows + (v_shares ? kv_rows : 0));
          EXPECT_EQ(l.qkv.w, l.q.w);
          EXPECT_EQ(l.qkv.w_bytes, l.q.w_bytes + l.k.w_bytes + (v_shares ? l.v.w_bytes : 0));
          qkv_bytes += l.qkv.w_bytes;
        }
        if (mix == "q4_K_m") {
          EXPECT_GT(with_v, 0);
          EXPECT_GT(without_v, 0) << "a layer whose v has more bits";
        } else {
          EXPECT_EQ(without_v, 0);
        }
        // The breakdown's bytes follow the calls, and none are lost.
        BoundModel moved = stacked.bound;
        move_stacked_bytes(stacked.program, moved);
        EXPECT_EQ(moved.part_bytes[static_cast<int>(Op::AttnQkv)], qkv_bytes);
        EXPECT_EQ(moved.part_bytes[static_cast<int>(Op::AttnQ)], 0u);
        EXPECT_EQ(moved.part_bytes[static_cast<int>(Op::AttnK)], 0u);
        EXPECT_EQ(std::accumulate(moved.part_bytes.begin(), moved.part_bytes.end(), std::uint64_t{0}),
                  std::accumulate(stacked.bound.part_bytes.begin(), stacked.bound.part_bytes.end(), std::uint64_t{0}));
      });
}

// q and k that cannot be one call stay apart: different kernels, outputs or weights not
// back to back, or --no-stack-qkv.
TEST(GpuStepReplay, QkvStayApartWhenTheyCannotStack) {
  const LoadedModel m(testing::synthetic_model("llama", "q8_0"));
  const auto cpu_plan = testing::cpu_f32_plan(m.weights);
  auto plan = gpu_f32_plan(cpu_plan);
  for (PlannedMatvec& p : plan)
    if (p.op == Op::AttnK) p.kernel = stand_in(p.weight, ActFormat::Q8_1);
  ReplayedGpu differ(m, plan, 2, 1, {}, true);
  for (const LayerOps& l : differ.program.layers) EXPECT_EQ(l.qkv_stacked, 0) << "q and k run different kernels";
  ReplayedGpu same(m, gpu_f32_plan(cpu_plan), 2, 1, {}, true);
  for (const LayerOps& l : same.program.layers) ASSERT_EQ(l.qkv_stacked, 3);
  const StepProgram unstacked =
      make_step_program(m.config, same.bound, 2, [&](const gguf::Tensor* t) { return same.device_address.at(t); },
                        same.layout, same.scratch.data(), same.kv.data(), Stacking{true, false});
  for (const LayerOps& l : unstacked.layers) EXPECT_EQ(l.qkv_stacked, 0) << "--no-stack-qkv";
  StepProgram moved = unstacked;
  moved.k = moved.q + moved.q_width + 1;
  EXPECT_EQ(stack_qkv(moved), 0) << "k's output not right after q's";
  moved.k = moved.q + moved.q_width;
  moved.v = moved.k + moved.kv_width + 1;
  EXPECT_EQ(stack_qkv(moved), m.config.n_layers);
  for (const LayerOps& l : moved.layers) EXPECT_EQ(l.qkv_stacked, 2) << "v's output not right after k's";
  StepProgram host = unstacked;
  for (LayerOps& l : host.layers) l.k.w = static_cast<const std::uint8_t*>(l.k.w) + 256;
  EXPECT_EQ(stack_qkv(host), 0) << "k's weights not right after q's";
}

TEST(GpuStepReplay, Q8_1PlansQuantizeEachVectorOnceAndStayCloseToTheCpu) {
  const LoadedModel m(testing::synthetic_model("llama", "q4_K_m"));
  const auto cpu_plan = testing::cpu_f32_plan(m.weights);
  // Every matvec with a Q8_1 stand-in: one quantization per activation vector.
  const auto q8_plan = testing::gpu_plan(cpu_plan, [](const PlannedMatvec& p) { return stand_in(p.weight, ActFormat::Q8_1); });
  const int tokens = 8;
  CpuForward cpu(m.config, m.weights, cpu_plan, 1, tokens);
  ReplayedGpu gpu(m, q8_plan, tokens, 2);
  ASSERT_TRUE(gpu.bound.needs_q8_1);
  std::mt19937 rng(fresh_seed());
  int agree = 0;
  double worst = 0;
  for (int i = 0; i < tokens; ++i) {
    const int token = std::uniform_int_distribution<int>(0, m.config.vocab_size - 1)(rng);
    const auto ref = cpu.step(token);
    gpu.exec.quantizations = 0;
    gpu.exec.fused_quantizations = 0;
    const int sampled = gpu.step(token);
    // The norms (q, k, v; gate and up; lm_head) and SwiGLU (down) quantize what they
    // write; only the attention output (o) takes the quantizer.
    EXPECT_EQ(gpu.exec.quantizations, m.config.n_layers);
    EXPECT_EQ(gpu.exec.fused_quantizations, 3 * m.config.n_layers + 1);
    const std::vector<float> want(ref.begin(), ref.end());
    worst = std::max(worst, nmse(gpu.logits(), want));
    agree += sampled == testing::argmax(want.data(), m.config.vocab_size);
  }
  std::printf("Q8_1 plan against the CPU's f32 plan: top-1 agreement %d/%d, worst NMSE %.3g\n", agree, tokens, worst);
  EXPECT_GT(worst, 0.0);
  EXPECT_LT(worst, 1e-2);  // int8 activations cost accuracy, little on Gaussian data
  EXPECT_GE(agree, tokens - 2);
}

// The fused head step and attention (GpuForwardOptions::fuse_attention): the same
// logits as the two kernels, bit for bit, token after token (the cache the fused step
// writes is what the next token reads), and the attention output's Q8_1 copy written
// with it, so no vector of the step takes the standalone quantizer.
TEST(GpuStepReplay, FusedAttentionIsTheSeparateStepsAndQuantizesItsOutput) {
  for (const char* arch : {"llama", "qwen2", "qwen3"}) {  // qwen2: q, k, v biases; qwen3: per-head norms
    SCOPED_TRACE(arch);
    const LoadedModel m(testing::synthetic_model(arch, "q4_K_m"));
    ASSERT_EQ(m.config.head_dim % kQ8_1Block, 0);
    const auto cpu_plan = testing::cpu_f32_plan(m.weights);
    const auto q8_plan =
        testing::gpu_plan(cpu_plan, [](const PlannedMatvec& p) { return stand_in(p.weight, ActFormat::Q8_1); });
    const int tokens = 6;
    ReplayedGpu apart(m, q8_plan, tokens, 3), fused(m, q8_plan, tokens, 3);
    fused.exec.fuse_attention = true;
    std::mt19937 rng(fresh_seed());
    for (int i = 0; i < tokens; ++i) {
      const int token = std::uniform_int_distribution<int>(0, m.config.vocab_size - 1)(rng);
      fused.exec.quantizations = 0;
      fused.exec.fused_quantizations = 0;
      fused.exec.fused_attentions = 0;
      ASSERT_EQ(fused.step(token), apart.step(token)) << "token " << i;
      ASSERT_EQ(fused.logits(), apart.logits()) << "token " << i;
      EXPECT_EQ(fused.exec.fused_attentions, m.config.n_layers);
      EXPECT_EQ(fused.exec.quantizations, 0);
      EXPECT_EQ(fused.exec.fused_quantizations, 4 * m.config.n_layers + 1);
    }
  }
}

// Runs everywhere: the fused attention refuses, before any launch, heads its shared
// memory cannot hold, a Q8_1 copy of heads that are no whole number of blocks, and a
// launch without its split counters.
TEST(GpuOps, FusedAttentionRefusesWhatItCannotRun) {
#ifndef QMV_HAVE_CUDA
  GTEST_SKIP() << "no CUDA device: built with QMV_CUDA=OFF, the GPU kernels are not compiled";
#else
  unsigned counters[4] = {};
  BlockQ8_1 blocks[8];
  FusedAttentionArgs f;
  f.attn.n_head = f.attn.n_head_kv = f.head.n_head = f.head.n_head_kv = 4;
  f.split_counters = counters;
  f.attn.head_dim = f.head.head_dim = f.head.rope_dim = kMaxHeadDim + 32;
  Status st = launch_fused_attention(f, nullptr);
  EXPECT_NE(st.error.find("head_dim " + std::to_string(kMaxHeadDim + 32)), std::string::npos) << st.error;
  f.attn.head_dim = f.head.head_dim = f.head.rope_dim = 48;
  f.out_q8_1 = blocks;
  st = launch_fused_attention(f, nullptr);
  EXPECT_NE(st.error.find("multiple of 32"), std::string::npos) << st.error;
  f.out_q8_1 = nullptr;
  f.split_counters = nullptr;
  st = launch_fused_attention(f, nullptr);
  EXPECT_NE(st.error.find("split counters"), std::string::npos) << st.error;
#endif
}

// Every matvec an int8 (Q8_1) stand-in routed at k to the f32 kernel gpu_f32_plan runs.
std::vector<PlannedMatvec> routed_q8_1_plan(const std::vector<PlannedMatvec>& cpu, double k) {
  auto plan = testing::gpu_plan(cpu, [](const PlannedMatvec& p) { return stand_in(p.weight, ActFormat::Q8_1); });
  const auto f32 = gpu_f32_plan(cpu);
  for (std::size_t i = 0; i < plan.size(); ++i) {
    plan[i].outlier_kernel = f32[i].kernel;
    plan[i].outlier_k = k;
  }
  return plan;
}

TEST(GpuStepReplay, OutlierRoutingRunsTheF32SiblingOnExactlyTheVectorsThatTrip) {
  const LoadedModel m(testing::synthetic_model("llama", "q4_0"));
  const auto cpu_plan = testing::cpu_f32_plan(m.weights);
  const auto q8_plan = testing::gpu_plan(cpu_plan, [](const PlannedMatvec& p) { return stand_in(p.weight, ActFormat::Q8_1); });
  const int tokens = 5, per_step = outlier_slots(m.config);
  std::mt19937 rng(fresh_seed());
  std::vector<int> prompt;
  for (int i = 0; i < tokens; ++i) prompt.push_back(std::uniform_int_distribution<int>(0, m.config.vocab_size - 1)(rng));

  // k = 0 routes every (non-zero) vector: the f32 plan's step exactly. A k no vector
  // reaches routes none: the Q8_1 plan's step exactly.
  for (const double k : {0.0, 1e9}) {
    ReplayedGpu routed(m, routed_q8_1_plan(cpu_plan, k), tokens, 2);
    ReplayedGpu same(m, k == 0 ? gpu_f32_plan(cpu_plan) : q8_plan, tokens, 2);
    ASSERT_TRUE(routed.bound.routes_outliers);
    EXPECT_EQ(routed.layout.outlier_slots, per_step);
    for (int t : prompt) {
      routed.step(t);
      same.step(t);
      EXPECT_EQ(routed.logits(), same.logits()) << "k " << k;
    }
    const StepTimes& r = routed.routing;
    EXPECT_EQ(r.calls[static_cast<int>(Op::OutlierTest)], tokens * per_step) << "one test per vector";
    for (int i = 0; i < static_cast<int>(Op::kCount); ++i) {
      if (!is_matvec(static_cast<Op>(i)) || r.routable[i] == 0) continue;
      EXPECT_EQ(r.routed[i], k == 0 ? r.routable[i] : 0) << to_string(static_cast<Op>(i)) << " k " << k;
    }
    // q, k and v lie back to back in the file too: one stacked, routed call a layer.
    EXPECT_EQ(r.routable[static_cast<int>(Op::AttnQkv)], tokens * m.config.n_layers);
    EXPECT_EQ(r.routable[static_cast<int>(Op::AttnQ)], 0);
    EXPECT_EQ(r.routable[static_cast<int>(Op::LmHead)], tokens);
  }

  // Thresholds between: each verdict is kernels/outliers.h's on that vector, each
  // routed call ran the kernel its vector's verdict picks, and the counts add up.
  std::int64_t mixed_steps = 0;
  for (const double k : {2.0, 2.5, 3.0, 3.5, 4.5}) {
    ReplayedGpu g(m, routed_q8_1_plan(cpu_plan, k), tokens, 2);
    for (int t : prompt) g.step(t);
    const auto& tests = g.exec.tests;
    ASSERT_EQ(static_cast<int>(tests.size()), tokens * per_step);
    int tripped = 0;
    for (const auto& test : tests) {
      EXPECT_EQ(test.verdict, has_massive_activation_reference(test.x.data(), static_cast<std::int64_t>(test.x.size()), k))
          << "k " << k << " max/rms " << peak_to_rms(test.x.data(), static_cast<std::int64_t>(test.x.size()));
      tripped += test.verdict;
    }
    std::int64_t routed_calls = 0;
    for (const auto& call : g.exec.routed_calls) {
      const bool trips = tests[call.test].verdict;
      EXPECT_EQ(call.ran->act, trips ? ActFormat::F32 : ActFormat::Q8_1) << to_string(call.part) << " k " << k;
      routed_calls += trips;
    }
    std::int64_t counted = 0, routable = 0;
    for (int i = 0; i < static_cast<int>(Op::kCount); ++i) {
      counted += g.routing.routed[i];
      routable += g.routing.routable[i];
    }
    EXPECT_EQ(counted, routed_calls);
    EXPECT_EQ(routable, static_cast<std::int64_t>(g.exec.routed_calls.size()));
    mixed_steps += tripped > 0 && tripped < static_cast<int>(tests.size());
    std::printf("outlier routing at k %.1f: %d of %zu vectors tripped, %lld of %lld int8 calls routed\n", k, tripped,
                tests.size(), static_cast<long long>(counted), static_cast<long long>(routable));
  }
  EXPECT_GT(mixed_steps, 0) << "no threshold gave both verdicts: the middle case was not exercised";
}

// CUDA lets a conditional handle drive one graph node: a test sets the handle of each
// node that reads its vector, whatever order the nodes of different tests come in.
TEST(GpuStepReplay, RouteTableRowsHoldEachTestsOwnNodes) {
  std::mt19937_64 rng(fresh_seed());
  const int slots = 9;
  RouteTable table;
  table.reset(slots);
  std::vector<std::vector<unsigned long long>> want(slots);
  for (int node = 0; node < 2 * slots; ++node) {
    int slot = static_cast<int>(rng() % slots);
    while (want[slot].size() == static_cast<std::size_t>(kRouteHandlesPerTest)) slot = (slot + 1) % slots;
    want[slot].push_back(rng());
    table.add(slot, want[slot].back());
  }
  for (int slot = 0; slot < slots; ++slot) {
    std::vector<unsigned long long> got;
    for_each_route_handle(table.row(slot), [&](unsigned long long h) { got.push_back(h); });
    EXPECT_EQ(got, want[slot]) << "slot " << slot;
  }
  const int full = static_cast<int>(rng() % slots);
  while (want[full].size() < static_cast<std::size_t>(kRouteHandlesPerTest)) {
    want[full].push_back(rng());
    table.add(full, want[full].back());
  }
  EXPECT_THROW(table.add(full, rng()), std::logic_error);
  EXPECT_THROW(table.add(slots, rng()), std::logic_error);
  EXPECT_THROW(table.add(-1, rng()), std::logic_error);
  table.reset(slots);  // a new capture starts from empty rows
  for (int slot = 0; slot < slots; ++slot) EXPECT_EQ(table.row(slot)[0], 0u);
}

TEST(GpuPlan, OutlierSiblingsMustBeF32CudaKernelsForTheShape) {
  const LoadedModel m(testing::synthetic_model("llama", "q4_0"));
  const auto cpu_plan = testing::cpu_f32_plan(m.weights);
  auto expect_refused = [&](std::vector<PlannedMatvec> plan, const KernelSpec* sibling, const std::string& needle) {
    for (auto& p : plan)
      if (p.op == Op::FfnDown) p.outlier_kernel = sibling;
    try {
      bind_gpu_plan(m.config, m.weights, plan);
      ADD_FAILURE() << "accepted a sibling that should fail with '" << needle << "'";
    } catch (const PlanError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  const auto plan = routed_q8_1_plan(cpu_plan, 8.0);
  EXPECT_TRUE(bind_gpu_plan(m.config, m.weights, plan).routes_outliers);
  expect_refused(plan, global_registry().find("q4_0.cpu.scalar_f32"), "a cpu kernel");
  expect_refused(plan, stand_in(WeightType::Q4_0, ActFormat::Q8_1), "reads q8_1 activations, not f32");
  expect_refused(plan, stand_in(WeightType::Q8_0, ActFormat::F32), "does not take q4_0");
  // Without routing no verdict slots are laid out.
  EXPECT_EQ(scratch_layout(m.config, 2, true).outlier_slots, 0);
}

// ---------------------------------------------------------------------------------
// The plan binding, the memory need and the refusal.

TEST(GpuPlan, BindingRefusesWhatTheGpuStepCannotRun) {
  const LoadedModel m(testing::synthetic_model("llama", "q4_0"));
  const auto cpu_plan = testing::cpu_f32_plan(m.weights);
  auto expect_refused = [&](const std::vector<PlannedMatvec>& plan, const std::string& needle) {
    try {
      bind_gpu_plan(m.config, m.weights, plan);
      ADD_FAILURE() << "accepted a plan that should fail with '" << needle << "'";
    } catch (const PlanError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_refused(cpu_plan, "attn_q (q4_0");
  expect_refused(cpu_plan, "a cpu kernel; the GPU decode runs CUDA kernels");
  auto plan = gpu_f32_plan(cpu_plan);
  EXPECT_NO_THROW(bind_gpu_plan(m.config, m.weights, plan));
  auto missing = plan;
  missing.erase(std::remove_if(missing.begin(), missing.end(), [](const PlannedMatvec& p) { return p.op == Op::AttnV; }),
                missing.end());
  expect_refused(missing, "no kernel planned for attn_v");
  auto q8k = plan;
  for (auto& p : q8k)
    if (p.op == Op::FfnDown) p.kernel = stand_in(p.weight, ActFormat::Q8_K);
  expect_refused(q8k, "reads q8_K activations");
  auto fused_as_plain = plan;
  for (auto& p : fused_as_plain)
    if (p.op == Op::AttnOut) p.kernel = stand_in(p.weight, ActFormat::F32, OpKind::FusedUpGate);
  expect_refused(fused_as_plain, "attn_out");
}

TEST(GpuPlan, WeightBytesAndTensorsAreCountedAsOnTheCpu) {
  for (const char* arch : {"llama", "qwen2", "qwen3"}) {
    for (bool tied : {true, false}) {
      SyntheticSpec spec;
      spec.arch = arch;
      spec.mix = "q4_K_m";
      spec.tied = tied;
      spec.seed = fresh_seed();
      const std::string path = testing::tmp(fmt::format("gpu-bytes-{}-{}.gguf", arch, tied));
      make_model(spec, path);
      const LoadedModel m(path);
      const auto cpu_plan = testing::cpu_f32_plan(m.weights);
      const CpuForward cpu(m.config, m.weights, cpu_plan, 1, 4);
      const BoundModel b = bind_gpu_plan(m.config, m.weights, gpu_f32_plan(cpu_plan));
      EXPECT_EQ(b.weight_bytes, cpu.weight_bytes()) << arch << " tied " << tied;
      for (int i = 0; i < static_cast<int>(Op::kCount); ++i)
        EXPECT_EQ(b.part_bytes[i], cpu.part_weight_bytes(static_cast<Op>(i))) << arch << " " << i;
      // Every tensor of the file is read by the step, and uploaded once.
      std::uint64_t file_bytes = 0;
      for (const auto& t : m.file.tensors()) file_bytes += t.bytes;
      EXPECT_EQ(b.tensor_bytes, file_bytes) << arch << " tied " << tied;
      EXPECT_EQ(b.tensors.size(), m.file.tensors().size());
      EXPECT_FALSE(b.needs_q8_1);
    }
  }
}

TEST(GpuMemory, NeedIsWeightsCacheAndScratchAndTheLayoutDoesNotOverlap) {
  const LoadedModel m(testing::synthetic_model("qwen3", "q8_0"));
  const ModelConfig& c = m.config;
  const auto plan = gpu_f32_plan(testing::cpu_f32_plan(m.weights));
  const int context = 200;
  const DeviceMemoryNeed need = device_memory_need(c, m.weights, plan, context, 132);
  std::uint64_t tensors = 0;
  for (const auto& t : m.file.tensors()) tensors += t.bytes;
  EXPECT_GE(need.weights, tensors);
  EXPECT_LT(need.weights, tensors + 256 * m.file.tensors().size());
  EXPECT_EQ(need.kv_cache, 2ull * c.n_layers * context * c.n_head_kv * c.head_dim * sizeof(float));
  EXPECT_EQ(need.context, context);
  const int splits = attention_splits(132, c.n_head, context);
  for (const auto& [q8_1, routing] : std::initializer_list<std::pair<bool, bool>>{{false, false}, {true, false}, {true, true}}) {
    const ScratchLayout l = scratch_layout(c, splits, q8_1, routing);
    if (!q8_1) {
      EXPECT_EQ(need.scratch, l.bytes);
    }
    const int qw = c.n_head * c.head_dim, kvw = c.n_head_kv * c.head_dim;
    std::vector<std::pair<std::size_t, std::size_t>> regions = {
        {l.x, c.n_embd * 4},   {l.xn, std::max(c.n_embd, qw) * 4}, {l.q, qw * 4},         {l.k, kvw * 4},
        {l.v, kvw * 4},        {l.att, qw * 4},                    {l.att_out, c.n_embd * 4}, {l.gate, c.n_ff * 4},
        {l.up, c.n_ff * 4},    {l.ffn_out, c.n_embd * 4},          {l.logits, c.vocab_size * 4u},
        {l.rope_cos, c.rope_dim / 2 * 4}, {l.rope_sin, c.rope_dim / 2 * 4},
        {l.attn_partials, std::size_t(c.n_head) * splits * attention_partial_floats(c.head_dim) * 4},
        {l.state, sizeof(DecodeState)}};
    if (q8_1) {
      EXPECT_GE(l.act_q8_1_bytes, row_bytes(ActFormat::Q8_1, std::max({c.n_embd, qw, c.n_ff})));
      regions.push_back({l.act_q8_1, l.act_q8_1_bytes});
    } else {
      EXPECT_EQ(l.act_q8_1_bytes, 0u);
    }
    if (routing) {
      EXPECT_EQ(l.outlier_slots, outlier_slots(c));
      regions.push_back({l.outlier_verdicts, l.outlier_slots * sizeof(int)});
      regions.push_back({l.route_table, std::size_t(l.outlier_slots) * kRouteRowWords * sizeof(unsigned long long)});
    } else {
      EXPECT_EQ(l.outlier_slots, 0);
    }
    std::sort(regions.begin(), regions.end());
    for (std::size_t i = 0; i < regions.size(); ++i) {
      EXPECT_EQ(regions[i].first % 256, 0u);
      const std::size_t end = regions[i].first + regions[i].second;
      EXPECT_LE(end, i + 1 < regions.size() ? regions[i + 1].first : l.bytes) << "region " << i;
    }
  }
}

TEST(GpuMemory, RefusalNamesTheSizesAndTheFreeMemory) {
  DeviceMemoryNeed need;
  need.weights = 3ull << 30;
  need.kv_cache = 2ull << 30;
  need.scratch = 12ull << 20;
  need.context = 32768;
  const std::uint64_t exact = need.total() + kDeviceMemoryReserve;
  EXPECT_EQ(device_memory_refusal(need, exact, "NVIDIA Test (sm_90)"), "");
  EXPECT_EQ(device_memory_refusal(need, 80ull << 30, "NVIDIA Test (sm_90)"), "");
  const std::string msg = device_memory_refusal(need, exact - 1, "NVIDIA Test (sm_90)");
  ASSERT_FALSE(msg.empty());
  for (const char* part : {"NVIDIA Test (sm_90)", "5.01 GiB", "weights 3.00 GiB", "KV cache 2.00 GiB", "32768 positions",
                           "scratch 12.0 MiB", "256.0 MiB kept", "5.26 GiB is free", "--context"})
    EXPECT_NE(msg.find(part), std::string::npos) << "'" << part << "' missing from: " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos);
  need.kv_cache = 1ull << 20;  // a small cache: no point suggesting a shorter context
  EXPECT_EQ(device_memory_refusal(need, 1ull << 30, "X").find("--context"), std::string::npos);
}

TEST(GpuMemory, AttentionSplitsFillTheSmsWithinBounds) {
  for (int sm : {1, 20, 132}) {
    for (int heads : {4, 9, 32, 64}) {
      for (int context : {1, 16, 100, 4096, 131072}) {
        const int s = attention_splits(sm, heads, context);
        EXPECT_GE(s, 1);
        EXPECT_LE(s, 64);
        EXPECT_LE(s, std::max(1, context / 16));
        if (context / 16 >= 64 && s < 64) {
          EXPECT_GE(s * heads, 2 * sm) << sm << " " << heads << " " << context;
        }
      }
    }
  }
}

TEST(GpuDecodeCli, WithoutADeviceTheRunIsRefusedInOneLine) {
  const LoadedModel m(testing::synthetic_model("llama", "q8_0"));
  const auto plan = gpu_f32_plan(testing::cpu_f32_plan(m.weights));
  try {
    run_cuda_decode(m, plan, {1, 2, 3}, 4, SamplerConfig{}, 16, CudaDecodeOptions{}, [](int) { return true; });
    GTEST_SKIP() << "a CUDA device is present: this test is for machines without one";
  } catch (const std::exception& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
#ifdef QMV_HAVE_CUDA
    EXPECT_NE(msg.find("no CUDA device"), std::string::npos) << msg;
#else
    EXPECT_NE(msg.find("built without CUDA"), std::string::npos) << msg;
#endif
  }
}

}  // namespace
}  // namespace qmv
