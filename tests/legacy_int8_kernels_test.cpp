// The legacy-quant (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) x Q8_1 CPU kernels (integer dot
// products at every ISA level) against the scalar reference kernel of the same
// weight type, run on the very values the Q8_1 activation stands for. Weights are
// random bytes (every nibble, fifth bit and Q8_0 quant, -128 included) with random
// fp16 scales and offsets of both signs; the activations are Gaussian with outlier
// channels, quantized by our Q8_1 quantizer, or random Q8_1 blocks at the quant
// extremes (-128, which our quantizer never emits). Column counts leave every
// remainder of the kernels' two- and four-block steps; row counts cover the four-row
// path and its remainders inside tiles of awkward sizes, on one and two threads. A
// second pass runs under the feature mask avx2,fma,f16c, where exactly the kernels
// that need no more than those are checked.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/activation_quantizers.h"
#include "kernels/cpu_features.h"
#include "kernels/cpu_tiling.h"
#include "kernels/registry.h"
#include "tests/int8_activations.h"
#include "tests/legacy_blocks.h"
#include "tests/skips.h"
#include "tests/tiling_guard.h"

namespace qmv {
namespace {

constexpr WeightType kLegacyTypes[] = {WeightType::Q4_0, WeightType::Q4_1, WeightType::Q5_0, WeightType::Q5_1,
                                       WeightType::Q8_0};

// Gaussian activations with a few outlier channels 20..50x the rms, quantized.
std::vector<BlockQ8_1> gaussian_q8_1(std::int64_t cols, std::mt19937& rng) {
  std::vector<float> x(static_cast<std::size_t>(cols));
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  for (auto& v : x) v = gauss(rng);
  std::uniform_int_distribution<std::int64_t> channel(0, cols - 1);
  std::uniform_real_distribution<float> outlier(20.0f, 50.0f);
  for (int i = 0; i < 3; ++i) x[static_cast<std::size_t>(channel(rng))] *= outlier(rng);
  std::vector<BlockQ8_1> q(static_cast<std::size_t>(cols / kQ8_1Block));
  quantize_row_q8_1(x.data(), q.data(), cols);
  return q;
}

// sum_j |w_ij x_j| per row, the scale of a row's float rounding.
std::vector<double> magnitudes(WeightType t, Shape s, const std::vector<std::uint8_t>& w,
                               const std::vector<float>& x) {
  std::vector<double> mag(static_cast<std::size_t>(s.rows), 0.0);
  std::vector<float> row(static_cast<std::size_t>(s.cols));
  for (std::int64_t r = 0; r < s.rows; ++r) {
    dequantize_row(t, w.data() + row_bytes(t, s.cols) * static_cast<std::size_t>(r), row.data(), s.cols);
    for (std::int64_t c = 0; c < s.cols; ++c) mag[r] += std::fabs(double(row[c]) * x[c]);
  }
  return mag;
}

// y (NaN-poisoned first) from kernel k on w and activation x, or a failed assertion.
std::vector<float> run_kernel(const KernelSpec& k, Shape s, const std::vector<std::uint8_t>& w, const void* x,
                              std::size_t x_bytes, int threads) {
  std::vector<float> y(static_cast<std::size_t>(s.rows), NAN);
  MatVecArgs a;
  a.shape = s;
  a.w = w.data();
  a.w_bytes = w.size();
  a.x = x;
  a.x_bytes = x_bytes;
  a.y = y.data();
  a.y_len = y.size();
  a.threads = threads;
  // Kernels with a weight layout of their own read it from a prepared copy.
  PreparedMatrix prepared;
  const Status prep = prepared.prepare(k, a);
  EXPECT_TRUE(prep.ok()) << k.name << ": " << prep.error;
  a.prepared = prepared.handle();
  const Status st = invoke(k, a);
  EXPECT_TRUE(st.ok()) << k.name << ": " << st.error;
  return y;
}

using test::TilingGuard;

class FeatureMaskGuard {
 public:
  explicit FeatureMaskGuard(std::uint32_t allowed) : saved_(cpu_feature_mask()) { set_cpu_feature_mask(allowed); }
  ~FeatureMaskGuard() { set_cpu_feature_mask(saved_); }

 private:
  std::uint32_t saved_;
};

constexpr const char* kVariants[] = {"avx2_q8_1", "avx2_x4_q8_1", "avx512vnni_q8_1", "avx512vnni_x4_q8_1"};
constexpr std::uint32_t kAvx2Features = CpuFeature::AVX2 | CpuFeature::FMA | CpuFeature::F16C;

// Every usable Q8_1 kernel of every legacy type against the scalar reference; returns
// the names of the kernels checked.
std::set<std::string> check_usable_kernels(std::mt19937& rng) {
  std::set<std::string> checked;
  const std::int64_t row_counts[] = {1, 3, 4, 5, 9, 67, 130};
  // 1..3 blocks past a multiple of four (odd counts leave a lone last block of the
  // two-block steps), none, and the real models' 576 and 1536.
  const std::int64_t col_counts[] = {32, 64, 96, 128, 160, 576, 1536};
  // Tiles of 5 rows leave a remainder in every tile; 64 is the default; the last one
  // keeps calls below 256 rows on one thread.
  const CpuTiling tilings[] = {{5, 0}, {64, 0}, {64, 256}};
  for (WeightType t : kLegacyTypes) {
    const std::string type(to_string(t));
    const KernelSpec* reference = global_registry().find(type + ".cpu.scalar_f32");
    EXPECT_NE(reference, nullptr) << type;
    if (reference == nullptr) continue;
    std::vector<const KernelSpec*> kernels;
    for (const KernelSpec* k : global_registry().select(type + ".cpu.*"))
      if (k->op == OpKind::MatVec && k->act == ActFormat::Q8_1 && missing_cpu_features(k->cpu_features) == 0)
        kernels.push_back(k);
    if (kernels.empty()) continue;  // this CPU runs none of them
    for (std::int64_t cols : col_counts) {
      for (std::int64_t rows : row_counts) {
        const Shape shape{rows, cols};
        const auto w = test::random_legacy_blocks(t, shape, rng);
        for (const auto& xq : {gaussian_q8_1(cols, rng), test::extreme_q8_1(cols, rng)}) {
          std::vector<float> seen(static_cast<std::size_t>(cols));
          dequantize_row_q8_1(xq.data(), seen.data(), cols);
          const auto ref = run_kernel(*reference, shape, w, seen.data(), seen.size() * sizeof(float), 1);
          const auto mag = magnitudes(t, shape, w, seen);
          for (const KernelSpec* k : kernels) {
            checked.insert(k->name);
            for (const CpuTiling& tiling : tilings) {
              for (int threads : {1, 2}) {
                TilingGuard guard(tiling);
                const auto y = run_kernel(*k, shape, w, xq.data(), xq.size() * sizeof(BlockQ8_1), threads);
                for (std::int64_t r = 0; r < rows; ++r) {
                  // Both are float sums of the same products in different orders.
                  EXPECT_NEAR(y[r], ref[r], 1e-5 * mag[r] + 1e-30)
                      << k->name << " " << to_string(shape) << " row " << r << " threads " << threads
                      << " tile " << tiling.tile_rows;
                  if (std::fabs(y[r] - ref[r]) > 1e-5 * mag[r] + 1e-30 || std::isnan(y[r])) return checked;
                }
              }
            }
          }
        }
      }
    }
  }
  return checked;
}

TEST(LegacyInt8Kernels, EveryTypeHasAllVariants) {
  for (WeightType t : kLegacyTypes) {
    for (const char* variant : kVariants) {
      const std::string name = std::string(to_string(t)) + ".cpu." + variant;
      const KernelSpec* k = global_registry().find(name);
      ASSERT_NE(k, nullptr) << name;
      EXPECT_EQ(k->act, ActFormat::Q8_1) << name;
      EXPECT_EQ(k->weight, t) << name;
    }
  }
}

TEST(LegacyInt8Kernels, RandomBlocksMatchTheScalarReference) {
  std::mt19937 rng(4321);
  const std::set<std::string> checked = check_usable_kernels(rng);
  std::vector<const KernelSpec*> variants;
  for (WeightType t : kLegacyTypes)
    for (const char* variant : kVariants)
      if (const KernelSpec* k = global_registry().find(std::string(to_string(t)) + ".cpu." + variant))
        variants.push_back(k);
  // Every variant this CPU can run was among them; the others are named.
  std::string not_run;
  for (const KernelSpec* k : testing::runnable_here(variants, not_run)) EXPECT_TRUE(checked.count(k->name)) << k->name;
  if (!not_run.empty()) GTEST_SKIP() << not_run;
}

// Under the mask avx2,fma,f16c: the kernels needing only those run, the rest are refused.
TEST(LegacyInt8Kernels, AvxTwoKernelsUnderTheAvx2Mask) {
  if (missing_cpu_features(kAvx2Features) != 0) GTEST_SKIP() << "this CPU lacks AVX2, FMA or F16C";
  FeatureMaskGuard mask(kAvx2Features);
  std::mt19937 rng(8765);
  const std::set<std::string> checked = check_usable_kernels(rng);
  for (WeightType t : kLegacyTypes) {
    const std::string type(to_string(t));
    for (const char* variant : {"avx2_q8_1", "avx2_x4_q8_1"})
      EXPECT_TRUE(checked.count(type + ".cpu." + variant)) << type << ".cpu." << variant;
    for (const char* variant : {"avx512vnni_q8_1", "avx512vnni_x4_q8_1"}) {
      const std::string name = type + ".cpu." + variant;
      EXPECT_FALSE(checked.count(name)) << name;
      const KernelSpec* k = global_registry().find(name);
      ASSERT_NE(k, nullptr) << name;
      EXPECT_NE(missing_cpu_features(k->cpu_features), 0u) << name;
    }
  }
}

}  // namespace
}  // namespace qmv
