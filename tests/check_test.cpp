#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "harness/check.h"
#include "harness/shapes.h"
#include "kernels/registry.h"
#include "tests/skips.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

CheckConfig fresh_config() {
  CheckConfig c;
  c.seed = testing::fresh_seed("check");
  c.threads = 2;
  return c;
}

TEST(Compare, NmseAndMaxAbs) {
  const float y[3] = {1.0f, 2.0f, 4.0f};
  const double r[3] = {1.0, 2.5, 4.0};
  const ErrorStats e = compare(y, r, 3);
  EXPECT_NEAR(e.nmse, 0.25 / (1 + 6.25 + 16), 1e-12);
  EXPECT_DOUBLE_EQ(e.max_abs, 0.5);
}

TEST(Compare, FloorKeepsACancellingRowFromDominating) {
  // One row whose products cancel to 1e-3 while each is ~1: rounding of 1e-6 is a
  // relative error of 1e-3 (NMSE 1e-6) without the floor, and tiny with it.
  const float y[1] = {1e-3f + 1e-6f};
  const double r[1] = {1e-3};
  const double a[1] = {256.0};
  EXPECT_GT(compare(y, r, 1).nmse, 1e-7);
  EXPECT_LT(compare(y, r, 1, a, 256).nmse, 1e-13);
  // On a typical row (|r| ~ a / sqrt(cols)) the floor changes nothing.
  const double typical[1] = {16.0};
  const float yt[1] = {16.001f};
  EXPECT_DOUBLE_EQ(compare(yt, typical, 1, a, 256).nmse, compare(yt, typical, 1).nmse);
}

TEST(Compare, NanNeverPasses) {
  const float y[2] = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  const double r[2] = {1.0, 2.0};
  EXPECT_TRUE(std::isinf(compare(y, r, 2).nmse));
  const float inf[1] = {std::numeric_limits<float>::infinity()};
  EXPECT_TRUE(std::isinf(compare(inf, r, 1).nmse));
}

TEST(Check, ReferenceKernelsPassOnAwkwardShapes) {
  // The single-vector references (batch_test.cpp checks the batch ones).
  const auto kernels = global_registry().select("q*_K.cpu.scalar*,!*batch*");
  ASSERT_EQ(kernels.size(), 6u);
  const auto results = run_check(kernels, parse_shapes("small"), fresh_config());
  ASSERT_EQ(results.size(), kernels.size() * parse_shapes("small").size());
  for (const auto& r : results) {
    EXPECT_TRUE(r.skipped.empty()) << r.spec->name << " " << r.skipped;
    ASSERT_EQ(r.cases.size(), 2u);
    for (const auto& c : r.cases) {
      EXPECT_TRUE(c.passed) << r.spec->name << " " << to_string(r.shape) << " " << c.activation << ": "
                            << c.failure;
      // The kernel error of a correct kernel is float rounding, far below the bound.
      EXPECT_LT(c.kernel.nmse, tolerance_for(*r.spec).kernel_nmse / 10) << r.spec->name;
    }
  }
}

TEST(Check, LegacyAndFloatKernelsPassOnOddCols) {
  const auto kernels =
      global_registry().select("q?_0.cpu.*,q?_1.cpu.*,f16.cpu.*,bf16.cpu.*,f32.cpu.*,!*batch*");
  // Five legacy types x {scalar_f32, avx2_f32, avx2_q8_1, avx2_x4_q8_1,
  // avx512vnni_q8_1, avx512vnni_x4_q8_1}, eight row-interleaved kernels per type
  // (AVX2: one, two and four streams, fused up+gate with two and four; VNNI: two and
  // four streams, fused up+gate with four), three float types x {scalar, avx2,
  // avx2_x4}.
  ASSERT_EQ(kernels.size(), 79u);
  std::string not_run;
  const auto runnable = testing::runnable_here(kernels, not_run);
  const auto shapes = parse_shapes("odd-cols");
  const auto results = run_check(runnable, shapes, fresh_config());
  ASSERT_EQ(results.size(), runnable.size() * shapes.size());
  for (const auto& r : results) {
    if (!r.skipped.empty()) {
      // Only a legacy kernel on a float-only length.
      const bool not_whole_blocks = r.spec->shape_rule == kBlock32ColsRule && r.shape.cols % 32 != 0;
      EXPECT_TRUE(not_whole_blocks) << r.spec->name << " " << to_string(r.shape) << " " << r.skipped;
      continue;
    }
    for (const auto& c : r.cases)
      EXPECT_TRUE(c.passed) << r.spec->name << " " << to_string(r.shape) << " " << c.activation << ": "
                            << c.failure;
  }
  if (!not_run.empty()) GTEST_SKIP() << not_run;
}

TEST(Check, OutliersCostInt8ActivationsAccuracy) {
  // The end-to-end error of an int8-activation kernel grows with outlier channels; with
  // f32 activations it stays at float rounding. This is what the check reports.
  const auto results = run_check({global_registry().find("q4_K.cpu.scalar_f32"),
                                  global_registry().find("q4_K.cpu.scalar_q8k")},
                                 {{64, 4096}}, fresh_config());
  ASSERT_EQ(results.size(), 2u);
  const auto& f32 = results[0].spec->act == ActFormat::F32 ? results[0] : results[1];
  const auto& q8k = results[0].spec->act == ActFormat::F32 ? results[1] : results[0];
  ASSERT_EQ(q8k.cases[1].activation, "outliers");
  EXPECT_GT(q8k.cases[1].end_to_end.nmse, q8k.cases[0].end_to_end.nmse);
  EXPECT_GT(q8k.cases[0].end_to_end.nmse, 1e3 * f32.cases[0].end_to_end.nmse);
}

struct WrongCase {
  const char* kernel;
  const char* expected_failure;
  // A 1% slip in a row whose sum cancels almost exactly hides below float rounding,
  // so the slightly wrong kernel need only be caught by one of the two cases.
  bool every_case_fails;
};

class WrongKernel : public ::testing::TestWithParam<WrongCase> {};

TEST_P(WrongKernel, FailsTheCheck) {
  const KernelSpec* k = global_registry().find(GetParam().kernel);
  ASSERT_NE(k, nullptr);
  for (Shape s : {Shape{3, 256}, Shape{67, 512}, Shape{130, 4096}}) {
    const auto results = run_check({k}, {s}, fresh_config());
    ASSERT_EQ(results.size(), 1u);
    EXPECT_FALSE(results[0].passed()) << GetParam().kernel << " passed on " << to_string(s);
    for (const auto& c : results[0].cases) {
      if (c.passed && !GetParam().every_case_fails) continue;
      EXPECT_NE(c.failure.find(GetParam().expected_failure), std::string::npos)
          << GetParam().kernel << " " << to_string(s) << " " << c.activation << ": " << c.failure;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Deliberate, WrongKernel,
    ::testing::Values(WrongCase{"test.q4_K.off_by_one_row", "kernel ", true},
                      WrongCase{"test.q4_K.unwritten_last", "NaN", true},
                      WrongCase{"test.q4_K.slightly_wrong", "kernel ", false}),
    [](const auto& info) { return std::string(info.param.kernel).substr(10); });

TEST(Check, UnsupportedShapeIsSkippedWithReason) {
  const auto results = run_check({global_registry().find("q4_K.cpu.scalar_f32")}, {{4, 100}}, fresh_config());
  ASSERT_EQ(results.size(), 1u);
  EXPECT_FALSE(results[0].passed());
  EXPECT_NE(results[0].skipped.find("cols % 256 == 0"), std::string::npos);
}

}  // namespace
}  // namespace qmv

namespace qmv {
namespace {

int unavailable_kernel_calls = 0;
Status count_call(const MatVecArgs&) {
  ++unavailable_kernel_calls;
  return Status::Ok();
}

TEST(Check, UnavailableKernelIsListedWithReasonAndNeverRun) {
  KernelSpec k;
  k.name = "q4_K.cuda.from_the_future";
  k.backend = Backend::CUDA;
  k.min_sm = 9999;  // no device has it, and without a device it is unavailable anyway
  k.shape_rule = kSuperBlockColsRule;
  k.supports = supports_superblock_cols;
  k.run = count_call;
  const auto results = run_check({&k}, {{3, 256}, {67, 512}}, fresh_config());
  ASSERT_EQ(results.size(), 2u);
  for (const auto& r : results) {
    EXPECT_FALSE(r.passed());
    EXPECT_EQ(r.skipped.rfind("unavailable: ", 0), 0u) << r.skipped;
  }
  EXPECT_EQ(unavailable_kernel_calls, 0);
}

}  // namespace
}  // namespace qmv
