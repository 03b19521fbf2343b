// The row-interleaved (R8) kernels (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K), plain and fused
// up+gate: the repack keeps every weight, and the kernels on the repacked copy match a
// float64 dot product of the very blocks they read, on row counts that leave every remainder of the eight-row groups, column counts of one
// block and more, activations at the quant extremes, threads 1 and 2 (and the
// threaded path forced on small matrices), outputs NaN-poisoned first.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/cpu/row_interleaved.h"
#include "kernels/cpu_features.h"
#include "kernels/cpu_tiling.h"
#include "kernels/registry.h"
#include "tests/int8_activations.h"
#include "tests/tiling_guard.h"

namespace qmv {
namespace {

constexpr const char* kQ4_0x8Kernel = "q4_0.cpu.avx2_r8_q8_1";
// The K-quant R8 kernels: one weight stream per thread, two, and (Q4_K) four, with and
// (Q4_K, Q6_K) without software prefetch; and the AVX-512 VNNI ones on the same copies.
const std::vector<const char*> kKQuantX8Kernels = {
    "q4_K.cpu.avx2_r8_q8k",      "q4_K.cpu.avx2_r8x2_q8k",      "q4_K.cpu.avx2_r8x4_q8k",
    "q4_K.cpu.avx2_r8_nopf_q8k", "q4_K.cpu.avx2_r8x2_nopf_q8k", "q5_K.cpu.avx2_r8_q8k",
    "q5_K.cpu.avx2_r8x2_q8k",    "q5_K.cpu.avx2_r8x4_q8k",      "q6_K.cpu.avx2_r8_q8k",
    "q6_K.cpu.avx2_r8x2_q8k",    "q6_K.cpu.avx2_r8x4_q8k",      "q6_K.cpu.avx2_r8_nopf_q8k",
    "q6_K.cpu.avx2_r8x2_nopf_q8k"};
const std::vector<const char*> kKQuantX8VnniKernels = {"q4_K.cpu.avx512vnni_r8x2_q8k", "q4_K.cpu.avx512vnni_r8x4_q8k",
                                                       "q5_K.cpu.avx512vnni_r8x2_q8k", "q5_K.cpu.avx512vnni_r8x4_q8k"};

// Whether this CPU (under the feature mask) lacks what one of the kernels named needs;
// `missing` then says what, in one line, for the test's skip.
bool lacks_features_for(const std::vector<const char*>& names, std::string& missing) {
  for (const char* name : names) {
    const KernelSpec* k = global_registry().find(name);
    if (k && missing_cpu_features(k->cpu_features) != 0) {
      missing = std::string("this CPU lacks ") + cpu_feature_names(missing_cpu_features(k->cpu_features)) +
                " for " + name;
      return true;
    }
  }
  return false;
}

std::vector<BlockQ4_0> random_q4_0(Shape s, std::mt19937& rng) {
  std::vector<BlockQ4_0> w(static_cast<std::size_t>(s.rows * (s.cols / kLegacyBlock)));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-1.0f, 1.0f);
  for (auto& b : w) {
    b.d = fp32_to_fp16(scale(rng));
    for (auto& q : b.qs) q = static_cast<std::uint8_t>(byte(rng));
  }
  return w;
}

// Row r's exact dot and the sum of its terms' magnitudes.
struct Expected {
  double dot = 0, magnitude = 0;
};
Expected exact_row(const BlockQ4_0* w, const BlockQ8_1* x, std::int64_t nb) {
  Expected e;
  for (std::int64_t b = 0; b < nb; ++b) {
    const double scale = double(fp16_to_fp32(w[b].d)) * fp16_to_fp32(x[b].d);
    for (int i = 0; i < kLegacyBlock; ++i) {
      const int q = i < 16 ? (w[b].qs[i] & 15) : (w[b].qs[i - 16] >> 4);
      const double term = scale * (q - 8) * x[b].qs[i];
      e.dot += term;
      e.magnitude += std::fabs(term);
    }
  }
  return e;
}

using test::TilingGuard;

// One call of kernel k on its prepared weights pm, with `threads` threads, into y.
Status invoke_prepared(const KernelSpec& k, const PreparedMatrix& pm, Shape s, const void* w, std::size_t w_bytes,
                       const void* x, std::size_t x_bytes, std::vector<float>& y, int threads) {
  MatVecArgs a = matvec_args(s, w, w_bytes, x, x_bytes, y.data());
  a.threads = threads;
  a.prepared = pm.handle();
  return invoke(k, a);
}

// The one-stream R8 kernel of a fused R8 kernel's type and activation.
std::string r8_kernel_name(const KernelSpec& fused) {
  return std::string(to_string(fused.weight)) + ".cpu.avx2_r8_" + (fused.act == ActFormat::Q8_K ? "q8k" : "q8_1");
}

const KernelSpec& q4_0x8_kernel() {
  const KernelSpec* k = global_registry().find(kQ4_0x8Kernel);
  if (!k) throw std::runtime_error(std::string(kQ4_0x8Kernel) + " is not registered");
  return *k;
}

TEST(RowInterleaved, RepackKeepsEveryWeightOfEveryRow) {
  std::mt19937 rng(11);
  const Shape s{13, 96};
  const auto w = random_q4_0(s, rng);
  const KernelSpec& k = q4_0x8_kernel();
  ASSERT_TRUE(k.prepare && k.release);
  PreparedMatrix pm;
  ASSERT_TRUE(pm.prepare(k, matvec_args(s, w.data(), w.size() * sizeof(BlockQ4_0), nullptr, 0, nullptr)).ok());
  const auto* m = static_cast<const interleave::Q4_0x8Matrix*>(pm.handle());
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->groups, 2);
  EXPECT_EQ(m->blocks, 3);
  EXPECT_EQ(pm.bytes(), 2u * 8u * 3u * sizeof(BlockQ4_0));
  for (std::int64_t r = 0; r < 16; ++r)
    for (std::int64_t b = 0; b < 3; ++b) {
      const interleave::BlockQ4_0x8& blk = m->data[(r / 8) * 3 + b];
      const int lane = static_cast<int>(r % 8);
      for (int i = 0; i < 16; ++i) {
        const std::uint8_t got = blk.qs[i / 4][4 * lane + i % 4];
        // Rows past the matrix are zero padding.
        const std::uint8_t want = r < s.rows ? w[static_cast<std::size_t>(r * 3 + b)].qs[i] : 0;
        ASSERT_EQ(got, want) << "row " << r << " block " << b << " byte " << i;
      }
      ASSERT_EQ(blk.d[lane], r < s.rows ? w[static_cast<std::size_t>(r * 3 + b)].d : 0);
    }
}

void expect_q4_0_exact_on_every_remainder(const std::vector<const char*>& kernels) {
  std::string missing;
  if (lacks_features_for(kernels, missing)) GTEST_SKIP() << missing;
  std::mt19937 rng(5);
  int checked = 0;
  for (const char* name : kernels)
  for (const std::int64_t cols : {32, 96, 576, 4096})
    for (const std::int64_t rows : {1, 7, 8, 9, 23, 64, 130, 257}) {
      const Shape s{rows, cols};
      const auto w = random_q4_0(s, rng);
      const auto x = test::extreme_q8_1(cols, rng);
      const KernelSpec* found = global_registry().find(name);
      ASSERT_NE(found, nullptr) << name;
      const KernelSpec& k = *found;
      PreparedMatrix pm;
      ASSERT_TRUE(pm.prepare(k, matvec_args(s, w.data(), w.size() * sizeof(BlockQ4_0), nullptr, 0, nullptr)).ok());
      for (const int threads : {1, 2})
        for (const std::int64_t min_parallel : {std::int64_t{1}, std::int64_t{128}}) {
          TilingGuard tiling({64, min_parallel});
          std::vector<float> y(static_cast<std::size_t>(rows) + 3, NAN);
          const Status st = invoke_prepared(k, pm, s, w.data(), w.size() * sizeof(BlockQ4_0), x.data(),
                                            x.size() * sizeof(BlockQ8_1), y, threads);
          ASSERT_TRUE(st.ok()) << st.error;
          for (std::int64_t r = 0; r < rows; ++r) {
            const Expected e = exact_row(w.data() + r * (cols / kLegacyBlock), x.data(), cols / kLegacyBlock);
            ASSERT_NEAR(y[static_cast<std::size_t>(r)], e.dot, 1e-5 * e.magnitude + 1e-6)
                << name << " " << to_string(s) << " row " << r << " threads " << threads;
          }
          for (std::size_t r = static_cast<std::size_t>(rows); r < y.size(); ++r)
            ASSERT_TRUE(std::isnan(y[r])) << "wrote past the last row, at " << r;
          ++checked;
        }
    }
  EXPECT_EQ(checked, static_cast<int>(kernels.size()) * 4 * 8 * 4);
}

TEST(RowInterleaved, Q4_0MatchesTheExactDotOnEveryRemainder) {
  expect_q4_0_exact_on_every_remainder({kQ4_0x8Kernel, "q4_0.cpu.avx2_r8x2_q8_1", "q4_0.cpu.avx2_r8x4_q8_1"});
}

TEST(RowInterleaved, Q4_0Avx512VnniMatchesTheExactDotOnEveryRemainder) {
  expect_q4_0_exact_on_every_remainder({"q4_0.cpu.avx512vnni_r8x2_q8_1", "q4_0.cpu.avx512vnni_r8x4_q8_1"});
}

// Q4_1, Q5_0, Q5_1 and Q8_0: every byte random (every nibble, fifth bit and Q8_0
// quant, -128 included), finite fp16 d (and m) of both signs; the expected dot from
// the dequantized weights. Each kernel meets activations with -128s (near certain at
// 96 columns and more) and without (Q8_0's avx2_r8x4 takes its sign-trick path only
// then).
struct LegacyCase {
  WeightType type;
  std::vector<const char*> kernels;
};

void expect_legacy_exact_on_every_remainder(const std::vector<LegacyCase>& cases) {
  std::vector<const char*> all;
  for (const LegacyCase& t : cases) all.insert(all.end(), t.kernels.begin(), t.kernels.end());
  std::string missing;
  if (lacks_features_for(all, missing)) GTEST_SKIP() << missing;
  std::mt19937 rng(6);
  int checked = 0;
  const int kernels = static_cast<int>(all.size());
  for (const LegacyCase& t : cases)
    for (const char* name : t.kernels) {
      const KernelSpec* k = global_registry().find(name);
      ASSERT_NE(k, nullptr) << name;
      const bool has_min = t.type == WeightType::Q4_1 || t.type == WeightType::Q5_1;
      for (const std::int64_t cols : {32, 96, 576})
        for (const std::int64_t rows : {1, 7, 9, 23, 130}) {
          const Shape s{rows, cols};
          std::vector<std::uint8_t> w(row_bytes(t.type, cols) * static_cast<std::size_t>(rows));
          std::uniform_int_distribution<int> byte(0, 255);
          for (auto& b : w) b = static_cast<std::uint8_t>(byte(rng));
          std::uniform_real_distribution<float> scale(-1.0f, 1.0f);
          for (std::size_t off = 0; off < w.size(); off += block_bytes(t.type)) {
            const fp16_bits d = fp32_to_fp16(scale(rng)), m = fp32_to_fp16(scale(rng));
            std::memcpy(&w[off], &d, sizeof(d));  // every legacy block starts with d, then m if any
            if (has_min) std::memcpy(&w[off + 2], &m, sizeof(m));
          }
          PreparedMatrix pm;
          ASSERT_TRUE(pm.prepare(*k, matvec_args(s, w.data(), w.size(), nullptr, 0, nullptr)).ok());
          for (const bool with_minus_128 : {true, false})
            for (const int threads : {1, 2}) {
              const auto x = with_minus_128 ? test::extreme_q8_1(cols, rng) : test::quantizer_range_q8_1(cols, rng);
              TilingGuard tiling({64, 1});
              std::vector<float> y(static_cast<std::size_t>(rows) + 3, NAN), wf(static_cast<std::size_t>(cols));
              const Status st =
                  invoke_prepared(*k, pm, s, w.data(), w.size(), x.data(), x.size() * sizeof(BlockQ8_1), y, threads);
              ASSERT_TRUE(st.ok()) << st.error;
              for (std::int64_t r = 0; r < rows; ++r) {
                dequantize_row(t.type, w.data() + row_bytes(t.type, cols) * static_cast<std::size_t>(r), wf.data(),
                               cols);
                double dot = 0, magnitude = 0;
                for (std::int64_t i = 0; i < cols; ++i) {
                  const double term = double(wf[static_cast<std::size_t>(i)]) *
                                      fp16_to_fp32(x[static_cast<std::size_t>(i / 32)].d) *
                                      x[static_cast<std::size_t>(i / 32)].qs[i % 32];
                  dot += term;
                  magnitude += std::fabs(term);
                }
                ASSERT_NEAR(y[static_cast<std::size_t>(r)], dot, 1e-5 * magnitude + 1e-6)
                    << name << " " << to_string(s) << " row " << r << " threads " << threads
                    << (with_minus_128 ? " (activation with -128s)" : " (activation in [-127, 127])");
              }
              for (std::size_t r = static_cast<std::size_t>(rows); r < y.size(); ++r) ASSERT_TRUE(std::isnan(y[r]));
              ++checked;
            }
        }
    }
  EXPECT_EQ(checked, kernels * 3 * 5 * 2 * 2);
}

TEST(RowInterleaved, Q4_1Q5_0Q5_1Q8_0MatchTheExactDotOnEveryRemainder) {
  expect_legacy_exact_on_every_remainder(
      {{WeightType::Q4_1, {"q4_1.cpu.avx2_r8_q8_1", "q4_1.cpu.avx2_r8x2_q8_1", "q4_1.cpu.avx2_r8x4_q8_1"}},
       {WeightType::Q5_0, {"q5_0.cpu.avx2_r8_q8_1", "q5_0.cpu.avx2_r8x2_q8_1", "q5_0.cpu.avx2_r8x4_q8_1"}},
       {WeightType::Q5_1, {"q5_1.cpu.avx2_r8_q8_1", "q5_1.cpu.avx2_r8x2_q8_1", "q5_1.cpu.avx2_r8x4_q8_1"}},
       {WeightType::Q8_0, {"q8_0.cpu.avx2_r8_q8_1", "q8_0.cpu.avx2_r8x2_q8_1", "q8_0.cpu.avx2_r8x4_q8_1"}}});
}

// The AVX-512 VNNI forms; Q8_0's flipped quants are exact with -128 activations too.
TEST(RowInterleaved, Q4_1Q5_0Q5_1Q8_0Avx512VnniMatchTheExactDotOnEveryRemainder) {
  expect_legacy_exact_on_every_remainder(
      {{WeightType::Q4_1, {"q4_1.cpu.avx512vnni_r8x2_q8_1", "q4_1.cpu.avx512vnni_r8x4_q8_1"}},
       {WeightType::Q5_0, {"q5_0.cpu.avx512vnni_r8x2_q8_1", "q5_0.cpu.avx512vnni_r8x4_q8_1"}},
       {WeightType::Q5_1, {"q5_1.cpu.avx512vnni_r8x2_q8_1", "q5_1.cpu.avx512vnni_r8x4_q8_1"}},
       {WeightType::Q8_0, {"q8_0.cpu.avx512vnni_r8x2_q8_1", "q8_0.cpu.avx512vnni_r8x4_q8_1"}}});
}

// Random K-quant blocks (Q4_K, Q5_K, Q6_K): every byte random (so the scales and mins
// take every value), finite fp16 d (and dmin) of both signs.
std::vector<std::uint8_t> random_k_quant(WeightType type, Shape s, std::mt19937& rng) {
  std::vector<std::uint8_t> w(row_bytes(type, s.cols) * static_cast<std::size_t>(s.rows));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : w) b = static_cast<std::uint8_t>(byte(rng));
  std::uniform_real_distribution<float> scale(-1.0f, 1.0f);
  for (std::size_t off = 0; off < w.size(); off += block_bytes(type)) {
    const fp16_bits d = fp32_to_fp16(scale(rng)), dmin = fp32_to_fp16(scale(rng));
    if (type == WeightType::Q6_K) {  // d last; its int8 scales stay random bytes
      std::memcpy(&w[off + offsetof(BlockQ6K, d)], &d, sizeof(d));
      continue;
    }
    std::memcpy(&w[off], &d, sizeof(d));  // Q4_K and Q5_K both start with d, dmin
    std::memcpy(&w[off + 2], &dmin, sizeof(dmin));
  }
  return w;
}

void expect_k_quants_exact_on_every_remainder(const std::vector<const char*>& kernels) {
  std::string missing;
  if (lacks_features_for(kernels, missing)) GTEST_SKIP() << missing;
  std::mt19937 rng(9);
  int checked = 0;
  for (const char* name : kernels) {
    const KernelSpec* k = global_registry().find(name);
    ASSERT_NE(k, nullptr) << name;
    for (const std::int64_t cols : {256, 768, 2048})
      for (const std::int64_t rows : {1, 7, 8, 9, 23, 40, 130}) {
        const Shape s{rows, cols};
        const auto w = random_k_quant(k->weight, s, rng);
        const auto x = test::extreme_q8_K(cols, rng);
        std::vector<float> xf(static_cast<std::size_t>(cols)), wf(static_cast<std::size_t>(cols));
        for (std::int64_t i = 0; i < cols; ++i)
          xf[static_cast<std::size_t>(i)] = x[static_cast<std::size_t>(i / kSuperBlock)].d *
                                            x[static_cast<std::size_t>(i / kSuperBlock)].qs[i % kSuperBlock];
        PreparedMatrix pm;
        ASSERT_TRUE(pm.prepare(*k, matvec_args(s, w.data(), w.size(), nullptr, 0, nullptr)).ok());
        for (const int threads : {1, 2})
          for (const std::int64_t min_parallel : {std::int64_t{1}, std::int64_t{128}}) {
            TilingGuard tiling({64, min_parallel});
            std::vector<float> y(static_cast<std::size_t>(rows) + 3, NAN);
            const Status st =
                invoke_prepared(*k, pm, s, w.data(), w.size(), x.data(), x.size() * sizeof(BlockQ8K), y, threads);
            ASSERT_TRUE(st.ok()) << st.error;
            for (std::int64_t r = 0; r < rows; ++r) {
              dequantize_row(k->weight, w.data() + row_bytes(k->weight, cols) * static_cast<std::size_t>(r),
                             wf.data(), cols);
              double dot = 0, magnitude = 0;
              for (std::size_t i = 0; i < wf.size(); ++i) {
                dot += double(wf[i]) * xf[i];
                magnitude += std::fabs(double(wf[i]) * xf[i]);
              }
              ASSERT_NEAR(y[static_cast<std::size_t>(r)], dot, 1e-5 * magnitude + 1e-6)
                  << name << " " << to_string(s) << " row " << r << " threads " << threads;
            }
            for (std::size_t r = static_cast<std::size_t>(rows); r < y.size(); ++r)
              ASSERT_TRUE(std::isnan(y[r])) << "wrote past the last row, at " << r;
            ++checked;
          }
      }
  }
  EXPECT_EQ(checked, static_cast<int>(kernels.size()) * 3 * 7 * 4);
}

TEST(RowInterleaved, KQuantsMatchTheExactDotOnEveryRemainder) {
  expect_k_quants_exact_on_every_remainder(kKQuantX8Kernels);
}

TEST(RowInterleaved, KQuantsAvx512VnniMatchTheExactDotOnEveryRemainder) {
  expect_k_quants_exact_on_every_remainder(kKQuantX8VnniKernels);
}

// Random weights of a row-interleaved type: every byte random, then finite fp16 scales
// of both signs where a block keeps them (legacy: d, and m for the _1 types; Q4_K, Q5_K: d,
// dmin; Q6_K: d).
std::vector<std::uint8_t> random_weights(WeightType type, Shape s, std::mt19937& rng) {
  if (block_values(type) == kSuperBlock) return random_k_quant(type, s, rng);
  std::vector<std::uint8_t> w(row_bytes(type, s.cols) * static_cast<std::size_t>(s.rows));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : w) b = static_cast<std::uint8_t>(byte(rng));
  std::uniform_real_distribution<float> scale(-1.0f, 1.0f);
  const bool has_min = type == WeightType::Q4_1 || type == WeightType::Q5_1;
  for (std::size_t off = 0; off < w.size(); off += block_bytes(type)) {
    const fp16_bits d = fp32_to_fp16(scale(rng)), m = fp32_to_fp16(scale(rng));
    std::memcpy(&w[off], &d, sizeof(d));
    if (has_min) std::memcpy(&w[off + 2], &m, sizeof(m));
  }
  return w;
}

// The fused up+gate kernels on repacked pairs: one group of each matrix per step (r8)
// or two (r8x2, four streams; Q6_K only these), AVX2 and AVX-512 VNNI.
const std::vector<const char*> kFusedAvx2Kernels = {
    "q4_0.cpu.avx2_r8_up_gate_q8_1", "q4_0.cpu.avx2_r8x2_up_gate_q8_1", "q4_1.cpu.avx2_r8_up_gate_q8_1",
    "q4_1.cpu.avx2_r8x2_up_gate_q8_1", "q5_0.cpu.avx2_r8_up_gate_q8_1", "q5_0.cpu.avx2_r8x2_up_gate_q8_1",
    "q5_1.cpu.avx2_r8_up_gate_q8_1", "q5_1.cpu.avx2_r8x2_up_gate_q8_1", "q8_0.cpu.avx2_r8_up_gate_q8_1",
    "q8_0.cpu.avx2_r8x2_up_gate_q8_1", "q4_K.cpu.avx2_r8_up_gate_q8k",   "q4_K.cpu.avx2_r8x2_up_gate_q8k",
    "q5_K.cpu.avx2_r8_up_gate_q8k",   "q5_K.cpu.avx2_r8x2_up_gate_q8k",   "q6_K.cpu.avx2_r8x2_up_gate_q8k",
    "q4_K.cpu.avx2_r8_up_gate_nopf_q8k", "q4_K.cpu.avx2_r8x2_up_gate_nopf_q8k", "q6_K.cpu.avx2_r8x2_up_gate_nopf_q8k",
    "q4_K.cpu.avx2_r8_up_gate_pf4k_q8k"};
const std::vector<const char*> kFusedVnniKernels = {
    "q4_0.cpu.avx512vnni_r8x2_up_gate_q8_1", "q4_1.cpu.avx512vnni_r8x2_up_gate_q8_1",
    "q5_0.cpu.avx512vnni_r8x2_up_gate_q8_1", "q5_1.cpu.avx512vnni_r8x2_up_gate_q8_1",
    "q8_0.cpu.avx512vnni_r8x2_up_gate_q8_1", "q4_K.cpu.avx512vnni_r8x2_up_gate_q8k",
    "q5_K.cpu.avx512vnni_r8x2_up_gate_q8k"};

// A fused kernel's activation: Q8_K, or Q8_1 with -128s (near certain at 96 columns
// and more) or without (Q8_0's four-stream kernel takes its sign-trick path only then).
std::vector<std::uint8_t> fused_activation(const KernelSpec& k, std::int64_t cols, bool with_minus_128,
                                           std::mt19937& rng) {
  const auto bytes = [](const auto& q) {
    const auto* b = reinterpret_cast<const std::uint8_t*>(q.data());
    return std::vector<std::uint8_t>(b, b + q.size() * sizeof(q[0]));
  };
  if (k.act == ActFormat::Q8_K) return bytes(test::extreme_q8_K(cols, rng));
  return bytes(with_minus_128 ? test::extreme_q8_1(cols, rng) : test::quantizer_range_q8_1(cols, rng));
}

// Each fused kernel named on its repacked pair: y from w and y2 from w2 (two different
// random matrices, so a swap or a mix-up fails), each matching the float64 dot of its
// own matrix on every group remainder and split of the groups between the streams,
// threads 1 and 2, both outputs NaN-poisoned and untouched past the last row.
void expect_fused_match_on_every_remainder(const std::vector<const char*>& kernels) {
  std::string missing;
  if (lacks_features_for(kernels, missing)) GTEST_SKIP() << missing;
  std::mt19937 rng(13);
  int checked = 0;
  for (const char* name : kernels) {
    const KernelSpec* kernel = global_registry().find(name);
    ASSERT_NE(kernel, nullptr) << name;
    const KernelSpec& k = *kernel;
    ASSERT_EQ(k.op, OpKind::FusedUpGate) << name;
    const std::int64_t block = block_values(k.weight);
    for (const std::int64_t cols : {block, 3 * block})
      for (const std::int64_t rows : {1, 7, 8, 9, 23, 40, 130}) {
        const Shape s{rows, cols};
        const auto w = random_weights(k.weight, s, rng), w2 = random_weights(k.weight, s, rng);
        std::vector<float> xf(static_cast<std::size_t>(cols)), wf(static_cast<std::size_t>(cols));
        MatVecArgs a = matvec_args(s, w.data(), w.size(), nullptr, 0, nullptr, w2.data(), w2.size());
        PreparedMatrix pm;
        ASSERT_TRUE(pm.prepare(k, a).ok()) << k.name;
        PreparedMatrix single;  // the pair holds two matrices of one repacked matrix's size
        ASSERT_TRUE(single.prepare(*global_registry().find(r8_kernel_name(k)), a).ok()) << k.name;
        EXPECT_EQ(pm.bytes(), 2 * single.bytes()) << k.name;
        for (const bool with_minus_128 : {true, false})
          for (const int threads : {1, 2}) {
            const auto x = fused_activation(k, cols, with_minus_128, rng);
            dequantize_activation(k.act, x.data(), xf.data(), cols);
            TilingGuard tiling({64, 1});
            std::vector<float> y(static_cast<std::size_t>(rows) + 3, NAN), y2 = y;
            a = matvec_args(s, w.data(), w.size(), x.data(), x.size(), y.data(), w2.data(), w2.size(), y2.data());
            a.threads = threads;
            a.prepared = pm.handle();
            const Status st = invoke(k, a);
            ASSERT_TRUE(st.ok()) << st.error;
            for (const auto& [weights, out] : {std::pair{&w, &y}, std::pair{&w2, &y2}})
              for (std::int64_t r = 0; r < rows; ++r) {
                dequantize_row(k.weight, weights->data() + row_bytes(k.weight, cols) * static_cast<std::size_t>(r),
                               wf.data(), cols);
                double dot = 0, magnitude = 0;
                for (std::size_t i = 0; i < wf.size(); ++i) {
                  dot += double(wf[i]) * xf[i];
                  magnitude += std::fabs(double(wf[i]) * xf[i]);
                }
                ASSERT_NEAR((*out)[static_cast<std::size_t>(r)], dot, 1e-5 * magnitude + 1e-6)
                    << k.name << " " << to_string(s) << (out == &y ? " y" : " y2") << " row " << r << " threads "
                    << threads << (with_minus_128 ? "" : " (activation in [-127, 127])");
              }
            for (std::size_t r = static_cast<std::size_t>(rows); r < y.size(); ++r)
              ASSERT_TRUE(std::isnan(y[r]) && std::isnan(y2[r])) << k.name << " wrote past the last row, at " << r;
            ++checked;
          }
      }
  }
  EXPECT_EQ(checked, static_cast<int>(kernels.size()) * 2 * 7 * 2 * 2);
}

TEST(RowInterleaved, FusedUpGateMatchesBothMatricesOnEveryRemainder) {
  expect_fused_match_on_every_remainder(kFusedAvx2Kernels);
}

TEST(RowInterleaved, FusedUpGateAvx512VnniMatchesBothMatricesOnEveryRemainder) {
  expect_fused_match_on_every_remainder(kFusedVnniKernels);
}

// A fused kernel on a repacked pair that the lists above miss would go unchecked.
TEST(RowInterleaved, EveryFusedRepackedKernelIsChecked) {
  int listed = 0;
  for (const KernelSpec& k : global_registry().all()) {
    if (k.op != OpKind::FusedUpGate || !k.prepare || k.backend != Backend::CPU) continue;
    const auto named = [&](const std::vector<const char*>& list) {
      return std::any_of(list.begin(), list.end(), [&](const char* n) { return k.name == std::string_view(n); });
    };
    EXPECT_TRUE(named(kFusedAvx2Kernels) || named(kFusedVnniKernels)) << k.name << " is in no fused test list";
    ++listed;
  }
  EXPECT_EQ(listed, static_cast<int>(kFusedAvx2Kernels.size() + kFusedVnniKernels.size()));
}

TEST(RowInterleaved, FusedPrepareWithoutTheSecondMatrixIsAnError) {
  const KernelSpec* k = global_registry().find("q4_0.cpu.avx2_r8_up_gate_q8_1");
  ASSERT_NE(k, nullptr);
  std::mt19937 rng(4);
  const Shape s{16, 64};
  const auto w = random_q4_0(s, rng);
  PreparedMatrix pm;
  const Status st = pm.prepare(*k, matvec_args(s, w.data(), w.size() * sizeof(BlockQ4_0), nullptr, 0, nullptr));
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(pm.handle(), nullptr);
}

TEST(RowInterleaved, RefusesToRunWithoutItsPreparedCopy) {
  const KernelSpec& k = q4_0x8_kernel();
  std::mt19937 rng(3);
  const Shape s{16, 64}, other{8, 64};
  const auto w = random_q4_0(s, rng);
  const auto x = test::extreme_q8_1(s.cols, rng);
  std::vector<float> y(16, NAN);
  MatVecArgs a = matvec_args(s, w.data(), w.size() * sizeof(BlockQ4_0), x.data(), x.size() * sizeof(BlockQ8_1), y.data());
  EXPECT_FALSE(invoke(k, a).ok());
  // A copy made for another shape is refused too, by the kernel itself.
  PreparedMatrix pm;
  ASSERT_TRUE(pm.prepare(k, matvec_args(other, w.data(), w.size() * sizeof(BlockQ4_0), nullptr, 0, nullptr)).ok());
  a.prepared = pm.handle();
  if (missing_cpu_features(k.cpu_features) == 0) {
    const Status st = k.run(a);
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.error.find("row-interleaved"), std::string::npos) << st.error;
  }
  for (float v : y) EXPECT_TRUE(std::isnan(v));
}

TEST(RowInterleaved, AvailableUnderTheAvx2Mask) {
  const std::uint32_t saved = cpu_feature_mask();
  set_cpu_feature_mask(parse_cpu_features("avx2,fma,f16c"));
  const std::uint32_t missing = missing_cpu_features(q4_0x8_kernel().cpu_features);
  const std::uint32_t vnni_missing = missing_cpu_features(global_registry().find("q4_0.cpu.avx512vnni_q8_1")->cpu_features);
  set_cpu_feature_mask(saved);
  const std::uint32_t avx2 = parse_cpu_features("avx2,fma,f16c");
  if (missing_cpu_features(avx2) != 0) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  EXPECT_EQ(missing, 0u);
  EXPECT_NE(vnni_missing, 0u);
}

}  // namespace
}  // namespace qmv
