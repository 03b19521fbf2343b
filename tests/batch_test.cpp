// The batch op (OpKind::MatVecBatch): every batch kernel against the reference for
// every count of vectors it takes, the check's power to see a mixed-up column, and the
// arguments a batch call is refused for.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "harness/check.h"
#include "harness/shapes.h"
#include "kernels/availability.h"
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

// The registry's batch kernels, the test binary's deliberately wrong ones aside.
std::vector<std::string> batch_kernel_names() {
  std::vector<std::string> names;
  for (const KernelSpec& k : global_registry().all())
    if (k.op == OpKind::MatVecBatch && k.name.rfind("test.", 0) != 0) names.push_back(k.name);
  return names;
}

class BatchKernel : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchKernel, PassesTheCheckForEveryCount) {
  const KernelSpec* k = global_registry().find(GetParam());
  ASSERT_NE(k, nullptr);
  ASSERT_GT(k->max_n, 1) << k->name;
  std::string not_run;
  if (testing::runnable_here({k}, not_run).empty()) GTEST_SKIP() << not_run;
  if (const Availability av = availability(*k); !av.available)
    GTEST_SKIP() << k->name << " not checked: " << av.reason;
  // The awkward shapes (one row, rows not a multiple of a group, short and long rows)
  // and, for the legacy and float types, odd multiples of their blocks; and whole groups
  // of eight rows, which ggml's repacked kernels need.
  std::vector<Shape> shapes = parse_shapes("small");
  for (Shape s : parse_shapes("odd-cols")) shapes.push_back(s);
  shapes.push_back({16, 512});
  shapes.push_back({64, 2560});
  const auto results = run_check({k}, shapes, fresh_config());
  int checked = 0;
  for (const CheckResult& r : results) {
    if (!r.skipped.empty()) {
      EXPECT_FALSE(k->supports(r.shape)) << k->name << " " << to_string(r.shape) << ": " << r.skipped;
      continue;
    }
    ++checked;
    // Both activation kinds for each n in 1..max_n.
    ASSERT_EQ(r.cases.size(), 2u * static_cast<std::size_t>(k->max_n)) << k->name;
    for (std::size_t i = 0; i < r.cases.size(); ++i) {
      const CaseResult& c = r.cases[i];
      EXPECT_EQ(c.n, static_cast<int>(i / 2) + 1);
      EXPECT_TRUE(c.passed) << k->name << " " << to_string(r.shape) << " " << case_label(c) << ": " << c.failure;
    }
  }
  EXPECT_GT(checked, 0) << k->name << " supports none of the shapes";
}

INSTANTIATE_TEST_SUITE_P(Registry, BatchKernel, ::testing::ValuesIn(batch_kernel_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& ch : name)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return name;
                         });

TEST(BatchKernels, EveryWeightTypeHasAScalarReference) {
  for (WeightType t : kAllWeightTypes) {
    const bool is_float = t == WeightType::F16 || t == WeightType::BF16 || t == WeightType::F32;
    const std::string name = std::string(to_string(t)) + ".cpu.scalar_batch" + (is_float ? "" : "_f32");
    const KernelSpec* k = global_registry().find(name);
    ASSERT_NE(k, nullptr) << name;
    EXPECT_EQ(k->op, OpKind::MatVecBatch);
    EXPECT_EQ(k->max_n, 8);
    EXPECT_EQ(k->act, ActFormat::F32);
  }
}

// A batch kernel that gets its last column wrong must fail the check, on every shape
// and activation case with more than one vector, naming that vector. With one vector
// the copying kernel is right and passes; the one that never writes its last vector
// writes nothing and fails.
TEST(BatchCheck, AWrongColumnFails) {
  for (const char* name : {"test.q4_K.batch_wrong_column", "test.q4_K.batch_unwritten_column"}) {
    const bool passes_with_one = std::string(name) == "test.q4_K.batch_wrong_column";
    const KernelSpec* k = global_registry().find(name);
    ASSERT_NE(k, nullptr) << name;
    const auto shapes = parse_shapes("small");
    const auto results = run_check({k}, shapes, fresh_config());
    ASSERT_EQ(results.size(), shapes.size());
    for (const CheckResult& r : results) {
      ASSERT_TRUE(r.skipped.empty()) << r.skipped;
      EXPECT_FALSE(r.passed()) << name << " " << to_string(r.shape);
      for (const CaseResult& c : r.cases) {
        if (c.n == 1) {
          EXPECT_EQ(c.passed, passes_with_one) << name << " " << to_string(r.shape) << " " << case_label(c) << ": " << c.failure;
        } else {
          EXPECT_FALSE(c.passed) << name << " " << to_string(r.shape) << " " << case_label(c);
          EXPECT_NE(c.failure.find(std::to_string(c.n - 1) + " of " + std::to_string(c.n)), std::string::npos)
              << "the failure names the wrong vector: " << c.failure;
        }
      }
    }
  }
}

TEST(BatchCheck, CaseLabelsReadBack) {
  CaseResult c;
  c.activation = "outliers";
  c.n = 7;
  EXPECT_EQ(case_label(c), "outliers n=7");
  CaseResult back;
  parse_case_label(case_label(c), back);
  EXPECT_EQ(back.activation, "outliers");
  EXPECT_EQ(back.n, 7);
  parse_case_label("gaussian", back);
  EXPECT_EQ(back.activation, "gaussian");
  EXPECT_EQ(back.n, 0);
}

// Arguments of a q4_K batch call of n vectors on a 16x256 matrix, the buffers sized
// for `n_buffers` vectors.
struct BatchCall {
  std::vector<std::uint8_t> w;
  std::vector<float> x, y;
  MatVecArgs args;
  BatchCall(int n, int n_buffers) {
    const Shape s{16, 256};
    w.assign(row_bytes(WeightType::Q4_K, s.cols) * s.rows, 0);
    x.assign(static_cast<std::size_t>(s.cols * n_buffers), 1.0f);
    y.assign(static_cast<std::size_t>(s.rows * n_buffers), 0.0f);
    args = matvec_args(s, w.data(), w.size(), x.data(), x.size() * sizeof(float), y.data());
    args.y_len = y.size();
    args.n = n;
  }
};

TEST(BatchCheckArgs, RefusesCountsOutsideOneToMaxN) {
  const KernelSpec* k = global_registry().find("q4_K.cpu.scalar_batch_f32");
  ASSERT_NE(k, nullptr);
  EXPECT_TRUE(check_args(*k, BatchCall(8, 8).args).ok());
  EXPECT_TRUE(check_args(*k, BatchCall(1, 1).args).ok());
  const Status zero = check_args(*k, BatchCall(0, 1).args);
  EXPECT_NE(zero.error.find("takes 1 to 8 activation vectors per call, got n = 0"), std::string::npos) << zero.error;
  const Status nine = check_args(*k, BatchCall(9, 9).args);
  EXPECT_NE(nine.error.find("takes 1 to 8 activation vectors per call, got n = 9"), std::string::npos) << nine.error;
  // A single-vector kernel takes exactly one.
  const KernelSpec* plain = global_registry().find("q4_K.cpu.scalar_f32");
  ASSERT_NE(plain, nullptr);
  const Status two = check_args(*plain, BatchCall(2, 2).args);
  EXPECT_NE(two.error.find("takes one activation vector per call, got n = 2"), std::string::npos) << two.error;
}

TEST(BatchCheckArgs, RefusesBuffersShortOfNVectors) {
  const KernelSpec* k = global_registry().find("q4_K.cpu.scalar_batch_f32");
  ASSERT_NE(k, nullptr);
  BatchCall short_x(4, 4);
  short_x.args.x_bytes = 3 * 256 * sizeof(float);
  const Status x = check_args(*k, short_x.args);
  EXPECT_NE(x.error.find("activation holds 3072 bytes, 4 vectors of f32 x 256 cols need 4096"), std::string::npos)
      << x.error;
  BatchCall short_y(4, 4);
  short_y.args.y_len = 4 * 16 - 1;
  const Status y = check_args(*k, short_y.args);
  EXPECT_NE(y.error.find("output holds 63 floats, shape 16x256 with n = 4 vectors needs 64"), std::string::npos)
      << y.error;
}

TEST(BatchCheckArgs, BytesAndFlopsCountTheWeightsOnce) {
  const KernelSpec* k = global_registry().find("q4_K.cpu.scalar_batch_f32");
  ASSERT_NE(k, nullptr);
  const Shape s{4096, 4096};
  const std::size_t weights = row_bytes(WeightType::Q4_K, s.cols) * s.rows;
  const std::size_t per_vector = s.cols * sizeof(float) + s.rows * sizeof(float);
  EXPECT_EQ(bytes_moved(*k, s), weights + per_vector);
  EXPECT_EQ(bytes_moved(*k, s, 4), weights + 4 * per_vector);
  EXPECT_DOUBLE_EQ(flops(*k, s, 4), 4 * flops(*k, s));
}

TEST(BatchRegistry, RefusesABatchKernelWithoutMaxN) {
  Registry r;
  KernelSpec s;
  s.name = "q4_K.cpu.batch_without_max_n";
  s.op = OpKind::MatVecBatch;
  s.supports = supports_superblock_cols;
  s.run = [](const MatVecArgs&) { return Status::Ok(); };
  EXPECT_NE(r.add(s).error.find("max_n"), std::string::npos);
  s.max_n = 4;
  EXPECT_TRUE(r.add(s).ok());
  KernelSpec plain = s;
  plain.name = "q4_K.cpu.plain_with_max_n";
  plain.op = OpKind::MatVec;
  EXPECT_NE(r.add(plain).error.find("max_n"), std::string::npos);
  EXPECT_EQ(to_string(OpKind::MatVecBatch), "matvec_batch");
}

}  // namespace
}  // namespace qmv
