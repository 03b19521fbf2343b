// The AVX2 K-quant x Q8_K kernels (q4_K/q5_K/q6_K .cpu.avx2*_q8k: one-row and
// multi-row) on inputs the check's quantizer never makes: every scale byte random (so
// every 6-bit scale and min with its high bits, and Q6_K int8 scales down to -128),
// random fp16 d/dmin of both signs, quants over their full range, and Q8_K activations
// with a quarter of the quants at -128 or 127 (bsums computed from them). Outputs
// start as NaN, so a row a kernel skips fails. Row counts exercise the four- and two-row paths,
// their remainders (n % 4, n % 2) and tiles of fewer rows than a step, in tiles of awkward
// heights, on one and two threads; one test repeats it under the AVX2-only mask.
// The reference: the dequantized weights times the dequantized activations, in double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/cpu_tiling.h"
#include "kernels/registry.h"
#include "tests/int8_activations.h"
#include "tests/skips.h"
#include "tests/tiling_guard.h"

namespace qmv {
namespace {

std::uint16_t random_half(std::mt19937& rng) {
  std::uniform_real_distribution<float> scale(-1.0f, 1.0f);
  return fp32_to_fp16(scale(rng));
}

// Raw blocks of any K-quant, every byte random, then d (and dmin) made finite.
template <class Block>
std::vector<Block> random_blocks(std::int64_t n, std::mt19937& rng) {
  std::vector<Block> w(static_cast<std::size_t>(n));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : w) {
    auto* p = reinterpret_cast<unsigned char*>(&b);
    for (std::size_t i = 0; i < sizeof(Block); ++i) p[i] = static_cast<unsigned char>(byte(rng));
    if constexpr (requires { b.dmin; }) b.dmin = random_half(rng);
    b.d = random_half(rng);
  }
  return w;
}

using test::TilingGuard;

class MaskGuard {
 public:
  explicit MaskGuard(std::uint32_t allowed) : saved_(cpu_feature_mask()) { set_cpu_feature_mask(allowed); }
  ~MaskGuard() { set_cpu_feature_mask(saved_); }

 private:
  std::uint32_t saved_;
};

struct TypeCase {
  const char* pattern;  // the kernels under test
  WeightType type;
  std::size_t block_bytes;
  // Random blocks for rows x cols, as bytes; and a row of them dequantized.
  std::function<std::vector<unsigned char>(std::int64_t, std::mt19937&)> make;
  std::function<void(const void*, float*, std::int64_t)> dequantize;
};

template <class Block>
TypeCase type_case(const char* pattern, WeightType t, void (*deq)(const Block*, float*, std::int64_t)) {
  return {pattern, t, sizeof(Block),
          [](std::int64_t n_blocks, std::mt19937& rng) {
            const auto v = random_blocks<Block>(n_blocks, rng);
            std::vector<unsigned char> bytes(v.size() * sizeof(Block));
            std::memcpy(bytes.data(), v.data(), bytes.size());
            return bytes;
          },
          [deq](const void* w, float* y, std::int64_t n) { deq(static_cast<const Block*>(w), y, n); }};
}

std::vector<TypeCase> type_cases() {
  return {type_case<BlockQ4K>("q4_K.cpu.avx2*_q8k", WeightType::Q4_K, dequantize_row_q4_K),
          type_case<BlockQ5K>("q5_K.cpu.avx2*_q8k", WeightType::Q5_K, dequantize_row_q5_K),
          type_case<BlockQ6K>("q6_K.cpu.avx2*_q8k", WeightType::Q6_K, dequantize_row_q6_K)};
}

// Runs every usable kernel of each type on the adversarial inputs; returns how many
// kernels ran, so a caller can insist the ones it expects were there. `not_run` names
// those this CPU (or the mask) lacks features for.
int check_all(const std::vector<std::int64_t>& row_counts, const std::vector<std::int64_t>& col_counts,
              std::string& not_run) {
  std::mt19937 rng(20240614);
  // Tiles of 5 and 7 rows leave a remainder in every tile (one and three rows); 64 is
  // the default; min_parallel_rows 0 makes two threads split even small calls.
  const CpuTiling tilings[] = {{5, 0}, {7, 0}, {64, 0}, {64, 128}};
  int ran = 0;
  std::vector<const KernelSpec*> candidates;
  for (const TypeCase& tc : type_cases())
    for (const KernelSpec* k : global_registry().select(tc.pattern))
      if (k->op == OpKind::MatVec && k->act == ActFormat::Q8_K) candidates.push_back(k);
  const auto runnable = testing::runnable_here(candidates, not_run);
  for (const TypeCase& tc : type_cases()) {
    std::vector<const KernelSpec*> kernels;
    for (const KernelSpec* k : runnable)
      if (k->weight == tc.type) kernels.push_back(k);
    ran += static_cast<int>(kernels.size());
    for (std::int64_t cols : col_counts) {
      const std::int64_t nb = cols / kSuperBlock;
      const auto xq = test::extreme_q8_K(cols, rng);
      std::vector<float> xf(static_cast<std::size_t>(cols)), row(static_cast<std::size_t>(cols));
      dequantize_row_q8_K(xq.data(), xf.data(), cols);
      for (std::int64_t rows : row_counts) {
        const auto w = tc.make(rows * nb, rng);
        std::vector<double> ref(static_cast<std::size_t>(rows)), mag(ref.size());
        for (std::int64_t r = 0; r < rows; ++r) {
          tc.dequantize(w.data() + r * nb * tc.block_bytes, row.data(), cols);
          for (std::int64_t c = 0; c < cols; ++c) {
            ref[r] += static_cast<double>(row[c]) * xf[c];
            mag[r] += std::fabs(static_cast<double>(row[c]) * xf[c]);
          }
        }
        for (const KernelSpec* k : kernels) {
          for (const CpuTiling& t : tilings) {
            for (int threads : {1, 2}) {
              TilingGuard guard(t);
              std::vector<float> y(static_cast<std::size_t>(rows), NAN);
              MatVecArgs a;
              a.shape = Shape{rows, cols};
              a.w = w.data();
              a.w_bytes = w.size();
              a.x = xq.data();
              a.x_bytes = xq.size() * sizeof(BlockQ8K);
              a.y = y.data();
              a.y_len = y.size();
              a.threads = threads;
              // Kernels with their own weight layout get it made first (a no-op for the rest).
              PreparedMatrix pm;
              const Status prep = pm.prepare(*k, a);
              EXPECT_TRUE(prep.ok()) << k->name << ": " << prep.error;
              if (!prep.ok()) return ran;
              a.prepared = pm.handle();
              const Status st = invoke(*k, a);
              EXPECT_TRUE(st.ok()) << k->name << ": " << st.error;
              if (!st.ok()) return ran;
              for (std::int64_t r = 0; r < rows; ++r) {
                // Float rounding of the per-super-block products, relative to sum |w x|.
                EXPECT_NEAR(y[r], ref[r], 1e-5 * mag[r] + 1e-30)
                    << k->name << " " << rows << "x" << cols << " row " << r << " threads " << threads
                    << " tile " << t.tile_rows << "/" << t.min_parallel_rows;
                if (!(std::fabs(y[r] - ref[r]) <= 1e-5 * mag[r] + 1e-30)) return ran;
              }
            }
          }
        }
      }
    }
  }
  return ran;
}

bool cpu_has_avx2() { return missing_cpu_features(parse_cpu_features("avx2,fma,f16c")) == 0; }

// The kernels these tests are for must be registered, whatever the CPU.
TEST(kquant_avx2, KernelsAreRegistered) {
  for (const char* name : {"q4_K.cpu.avx2_q8k", "q4_K.cpu.avx2_x4_q8k", "q5_K.cpu.avx2_q8k",
                           "q5_K.cpu.avx2_x4_q8k", "q6_K.cpu.avx2_q8k", "q6_K.cpu.avx2_x4_q8k",
                           "q6_K.cpu.avx2_x2_q8k"}) {
    const KernelSpec* k = global_registry().find(name);
    ASSERT_NE(k, nullptr) << name;
    EXPECT_EQ(k->act, ActFormat::Q8_K) << name;
  }
}

TEST(kquant_avx2, AdversarialBlocksMatchTheReference) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  std::string not_run;
  const int ran = check_all({1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 67, 130}, {256, 512, 2816}, not_run);
  EXPECT_GE(ran, 6);
  if (!not_run.empty()) GTEST_SKIP() << not_run;
}

// Under the mask avx2,fma,f16c the same kernels must be selectable and correct (the
// mask is restored afterwards).
TEST(kquant_avx2, AdversarialBlocksUnderTheAvx2Mask) {
  if (!cpu_has_avx2()) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  MaskGuard mask(parse_cpu_features("avx2,fma,f16c"));
  for (const char* name : {"q4_K.cpu.avx2_x4_q8k", "q5_K.cpu.avx2_x4_q8k", "q6_K.cpu.avx2_x4_q8k",
                           "q6_K.cpu.avx2_x2_q8k"})
    EXPECT_EQ(missing_cpu_features(global_registry().find(name)->cpu_features), 0u) << name;
  EXPECT_NE(missing_cpu_features(global_registry().find("q4_K.cpu.avx512vnni_x4_q8k")->cpu_features), 0u);
  std::string masked_out;  // the AVX-512 kernels: what the mask is for
  const int ran = check_all({3, 4, 9, 67}, {256, 2816}, masked_out);
  EXPECT_GE(ran, 6);
}

}  // namespace
}  // namespace qmv
