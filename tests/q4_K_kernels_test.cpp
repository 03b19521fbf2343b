// The Q4_K CPU kernels on inputs the check's quantizer never makes: every scale byte
// pattern (all 12 packed bytes random, so every 6-bit scale and min and their high
// bits), random fp16 d/dmin of both signs, nibbles over the full range, and Q8_K
// activations that include -128 (which our activation quantizer never emits, but a
// Q8_K producer may). Row counts cover the 4-row and 2+2-row paths and their
// remainders, inside tiles of awkward sizes, on one and two threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/cpu_tiling.h"
#include "kernels/registry.h"
#include "tests/int8_activations.h"
#include "tests/skips.h"
#include "tests/tiling_guard.h"

namespace qmv {
namespace {

std::vector<BlockQ4K> random_q4k(std::int64_t rows, std::int64_t cols, std::mt19937& rng) {
  std::vector<BlockQ4K> w(static_cast<std::size_t>(rows * cols / kSuperBlock));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-1.0f, 1.0f);
  for (auto& b : w) {
    b.d = fp32_to_fp16(scale(rng));
    b.dmin = fp32_to_fp16(scale(rng));
    for (auto& s : b.scales) s = static_cast<std::uint8_t>(byte(rng));
    for (auto& q : b.qs) q = static_cast<std::uint8_t>(byte(rng));
  }
  return w;
}

// Double-precision W x on the dequantized weights; also sum |W||x| per row.
void reference(const std::vector<BlockQ4K>& w, const std::vector<float>& x, std::int64_t rows,
               std::int64_t cols, std::vector<double>& y, std::vector<double>& mag) {
  std::vector<float> row(static_cast<std::size_t>(cols));
  y.assign(static_cast<std::size_t>(rows), 0.0);
  mag.assign(static_cast<std::size_t>(rows), 0.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    dequantize_row_q4_K(w.data() + r * (cols / kSuperBlock), row.data(), cols);
    for (std::int64_t c = 0; c < cols; ++c) {
      y[r] += static_cast<double>(row[c]) * x[c];
      mag[r] += std::fabs(static_cast<double>(row[c]) * x[c]);
    }
  }
}

using test::TilingGuard;

TEST(Q4KKernels, AdversarialBlocksMatchTheReference) {
  std::string not_run;
  const auto kernels = testing::runnable_here(global_registry().select("q4_K.cpu.*"), not_run);
  ASSERT_FALSE(kernels.empty());
  std::mt19937 rng(1234);
  const std::int64_t row_counts[] = {1, 2, 3, 4, 5, 7, 9, 67, 130};
  const std::int64_t col_counts[] = {256, 512, 2816};
  // Tiles of 5 rows leave a remainder in every tile; 64 is the default.
  const CpuTiling tilings[] = {{5, 0}, {64, 0}, {64, 256}};
  for (std::int64_t cols : col_counts) {
    for (std::int64_t rows : row_counts) {
      const Shape shape{rows, cols};
      const auto w = random_q4k(rows, cols, rng), w2 = random_q4k(rows, cols, rng);
      const auto xq = test::extreme_q8_K(cols, rng);
      std::vector<float> xq_f(static_cast<std::size_t>(cols)), xf(static_cast<std::size_t>(cols));
      dequantize_row_q8_K(xq.data(), xq_f.data(), cols);
      std::normal_distribution<float> gauss(0.0f, 1.0f);
      for (auto& v : xf) v = gauss(rng);
      std::vector<double> ref_q, mag_q, ref_q2, mag_q2, ref_f, mag_f, ref_f2, mag_f2;
      reference(w, xq_f, rows, cols, ref_q, mag_q);
      reference(w2, xq_f, rows, cols, ref_q2, mag_q2);
      reference(w, xf, rows, cols, ref_f, mag_f);
      reference(w2, xf, rows, cols, ref_f2, mag_f2);
      for (const KernelSpec* k : kernels) {
        if (k->act != ActFormat::Q8_K && k->act != ActFormat::F32) continue;
        const bool q8 = k->act == ActFormat::Q8_K;
        const bool fused = k->op == OpKind::FusedUpGate;
        // Kernels with their own weight layout read the copy made from w (and w2, fused).
        PreparedMatrix prepared;
        ASSERT_TRUE(prepared
                        .prepare(*k, matvec_args(shape, w.data(), w.size() * sizeof(BlockQ4K), nullptr, 0, nullptr,
                                                 fused ? w2.data() : nullptr, fused ? w2.size() * sizeof(BlockQ4K) : 0))
                        .ok());
        for (const CpuTiling& t : tilings) {
          for (int threads : {1, 2}) {
            TilingGuard guard(t);
            std::vector<float> y(static_cast<std::size_t>(rows), NAN), y2(y);
            MatVecArgs a;
            a.shape = shape;
            a.w = w.data();
            a.w_bytes = w.size() * sizeof(BlockQ4K);
            a.x = q8 ? static_cast<const void*>(xq.data()) : static_cast<const void*>(xf.data());
            a.x_bytes = q8 ? xq.size() * sizeof(BlockQ8K) : xf.size() * sizeof(float);
            a.y = y.data();
            a.y_len = y.size();
            if (fused) {
              a.w2 = w2.data();
              a.w2_bytes = w2.size() * sizeof(BlockQ4K);
              a.y2 = y2.data();
              a.y2_len = y2.size();
            }
            a.threads = threads;
            a.prepared = prepared.handle();
            const Status st = invoke(*k, a);
            ASSERT_TRUE(st.ok()) << k->name << ": " << st.error;
            for (int m = 0; m < (fused ? 2 : 1); ++m) {
              const auto& out = m == 0 ? y : y2;
              const auto& ref = q8 ? (m == 0 ? ref_q : ref_q2) : (m == 0 ? ref_f : ref_f2);
              const auto& mag = q8 ? (m == 0 ? mag_q : mag_q2) : (m == 0 ? mag_f : mag_f2);
              for (std::int64_t r = 0; r < rows; ++r) {
                // Float rounding of the per-super-block products, relative to sum |w x|.
                ASSERT_NEAR(out[r], ref[r], 1e-5 * mag[r] + 1e-30)
                    << k->name << " " << to_string(shape) << " output " << m << " row " << r
                    << " threads " << threads << " tile " << t.tile_rows;
              }
            }
          }
        }
      }
    }
  }
  if (!not_run.empty()) GTEST_SKIP() << not_run;
}

}  // namespace
}  // namespace qmv
