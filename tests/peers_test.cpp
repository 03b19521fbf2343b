// Kernels with a weight transform (KernelSpec::prepare) through the check, the bench
// and the model runner; and the peer kernels, ggml's own CPU matvecs, through the same
// check and bench as qmvlab's.
#include <gtest/gtest.h>
#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <random>
#include <set>

#include "harness/bench.h"
#include "harness/check.h"
#include "harness/data.h"
#include "kernels/registry.h"
#include "model/forward.h"
#include "model/gguf.h"
#include "model/plan.h"
#include "tests/cli_run.h"
#include "tests/prepared_kernel.h"
#include "tests/skips.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

using testing::kPreparedKernel;
using testing::prepared_copies_live;
using testing::prepared_copies_made;

CheckConfig fresh_check() {
  CheckConfig c;
  c.seed = qmv::testing::fresh_seed();
  c.threads = 2;
  std::printf("check seed %llu\n", static_cast<unsigned long long>(c.seed));
  return c;
}

BenchConfig quick_bench(bool warm) {
  BenchConfig b;
  b.threads = {1};
  b.warm = warm;
  b.repetitions = 2;
  b.min_time_s = 0.002;
  b.seed = qmv::testing::fresh_seed();
  return b;
}

const KernelSpec& find(const std::string& name) {
  const KernelSpec* k = global_registry().find(name);
  if (!k) throw std::runtime_error(name + " is not registered");
  return *k;
}

TEST(PreparedWeights, CheckHandsTheKernelItsCopyOfEachMatrixAndFreesIt) {
  const int made_before = prepared_copies_made();
  const auto results = run_check({&find(kPreparedKernel)}, {{37, 512}, {256, 1024}}, fresh_check());
  ASSERT_EQ(results.size(), 2u);
  for (const auto& r : results) EXPECT_TRUE(r.passed()) << to_string(r.shape) << " " << r.skipped;
  EXPECT_GE(prepared_copies_made() - made_before, 2);
  EXPECT_EQ(prepared_copies_live(), 0);
}

TEST(PreparedWeights, AKernelWithoutItsPreparedCopyIsRefusedClearly) {
  const KernelSpec& k = find(kPreparedKernel);
  const Shape s{8, 256};
  const auto w = random_quantized_matrix(WeightType::Q4_K, s, qmv::testing::fresh_seed());
  const auto x = gaussian_vector(s.cols, qmv::testing::fresh_seed());
  std::vector<float> y(8);
  MatVecArgs a = matvec_args(s, w.data(), w.size(), x.data(), x.size() * sizeof(float), y.data());
  const Status st = invoke(k, a);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error.find("prepare the matrix first"), std::string::npos) << st.error;
}

TEST(PreparedWeights, BenchTimesEveryPointAndFreesEveryCopy) {
  for (bool warm : {true, false}) {
    const int made_before = prepared_copies_made();
    const auto out = run_bench({&find(kPreparedKernel), &find("q4_K.cpu.scalar_f32")}, {{64, 512}, {128, 256}},
                               quick_bench(warm), {});
    EXPECT_TRUE(out.skipped.empty()) << out.skipped.front().kernel << ": " << out.skipped.front().reason;
    EXPECT_EQ(out.rows.size(), 4u);
    EXPECT_GE(prepared_copies_made() - made_before, 2) << (warm ? "warm" : "cold");
    EXPECT_EQ(prepared_copies_live(), 0) << (warm ? "warm" : "cold");
  }
}

// Interleaved turns of different points do not re-make each other's copies: however
// many repetitions, one rotation per (kernel, shape), shared by the thread counts.
TEST(PreparedWeights, AnInterleavedBenchPreparesEachRotationOnce) {
  const std::vector<const KernelSpec*> kernels{&find(kPreparedKernel), &find("q4_K.cpu.scalar_f32")};
  const std::vector<Shape> shapes{{64, 512}, {128, 256}, {8, 1024}};
  auto copies_made = [&](int repetitions) {
    BenchConfig b = quick_bench(false);
    b.threads = {1, 2};
    b.repetitions = repetitions;
    b.interleave = true;
    const int before = prepared_copies_made();
    const auto out = run_bench(kernels, shapes, b, {});
    EXPECT_TRUE(out.skipped.empty()) << out.skipped.front().kernel << ": " << out.skipped.front().reason;
    EXPECT_EQ(out.rows.size(), kernels.size() * shapes.size() * 2);
    EXPECT_EQ(prepared_copies_live(), 0);
    return prepared_copies_made() - before;
  };
  const int once = copies_made(1);
  EXPECT_GE(once, 2 * static_cast<int>(shapes.size()));  // a cold rotation has at least two copies
  EXPECT_EQ(copies_made(6), once);
}

TEST(PreparedWeights, TheModelRunnerPreparesEachMatrixOnce) {
  const std::string path = testing::tmp("prepared-toy.gguf");
  const testing::CliRun made = testing::qmvlab(fmt::format(
      "make-model --preset toy --arch llama --mix q4_K_m --seed {} --out {}", qmv::testing::fresh_seed() % 100000 + 1, path));
  ASSERT_EQ(made.code, 0) << made.output;
  const LoadedModel m(path);
  std::mt19937 rng(qmv::testing::fresh_seed());
  std::vector<int> tokens(5);
  for (int& t : tokens) t = std::uniform_int_distribution<int>(0, m.config.vocab_size - 1)(rng);
  auto logits = [&](const std::string& plan) {
    const auto planned = resolve_plan(load_plan(plan), m.weights, 2);
    CpuForward fwd(m.config, m.weights, planned, 2, static_cast<int>(tokens.size()));
    std::vector<float> all;
    for (int t : tokens) {
      const auto l = fwd.step(t);
      all.insert(all.end(), l.begin(), l.end());
    }
    return all;
  };
  const int made_before = prepared_copies_made();
  // The same rows through the same scalar arithmetic: equal to the last bit.
  const auto prepared = logits(fmt::format("q4_K={},q6_K=q6_K.cpu.scalar_f32,ffn_up_gate=none", kPreparedKernel));
  const int copies = prepared_copies_made() - made_before;
  EXPECT_EQ(prepared, logits("q4_K=q4_K.cpu.scalar_f32,q6_K=q6_K.cpu.scalar_f32,ffn_up_gate=none"));
  // One copy per q4_K matrix, not one per step.
  EXPECT_GT(copies, 0);
  EXPECT_LE(copies, 7 * m.config.n_layers + 1);
  EXPECT_EQ(prepared_copies_live(), 0);
}

#ifdef QMV_HAVE_PEERS

std::vector<const KernelSpec*> ggml_kernels() { return global_registry().select("*.ggml.*"); }

TEST(Peers, GgmlHasAKernelForEveryWeightTypeAndItsRepackedOnes) {
  std::set<std::string> names;
  for (const KernelSpec* k : ggml_kernels()) {
    names.insert(k->name);
    EXPECT_EQ(k->peer, "ggml") << k->name;
    EXPECT_EQ(k->act, ActFormat::F32) << k->name;
    EXPECT_EQ(k->act_converted_to.empty(), k->weight == WeightType::F32) << k->name;
  }
  for (WeightType w : kAllWeightTypes) EXPECT_TRUE(names.count(fmt::format("{}.ggml.cpu", to_string(w)))) << to_string(w);
  EXPECT_TRUE(names.count("q4_0.ggml.cpu_repack"));
  EXPECT_TRUE(names.count("q4_K.ggml.cpu_repack"));
}

TEST(Peers, EveryGgmlKernelPassesTheSameCheck) {
  const auto kernels = ggml_kernels();
  // Rows that are and are not whole 8-row groups; cols of whole super-blocks, and a
  // length only the block-32 and float types take.
  const std::vector<Shape> shapes{{64, 512}, {40, 2048}, {13, 256}, {24, 96}};
  const auto results = run_check(kernels, shapes, fresh_check());
  ASSERT_EQ(results.size(), kernels.size() * shapes.size());
  int passed = 0;
  for (const auto& r : results) {
    if (!r.skipped.empty()) {
      EXPECT_NE(r.skipped.find("shape not supported"), std::string::npos) << r.spec->name << ": " << r.skipped;
      EXPECT_FALSE(r.spec->supports(r.shape)) << r.spec->name << " " << to_string(r.shape);
      continue;
    }
    for (const auto& c : r.cases)
      EXPECT_TRUE(c.passed) << r.spec->name << " " << to_string(r.shape) << " " << c.activation << ": " << c.failure;
    passed += r.passed();
  }
  EXPECT_GE(passed, static_cast<int>(kernels.size()) * 2);
}

TEST(Peers, TheCheckComparesWithTheActivationGgmlActuallyUses) {
  // Without its own conversion the check would compare ggml's int8 product with the
  // f32 one, and its bound for float rounding must then fail it: the conversion is
  // what makes the comparison tight, not a loose tolerance.
  for (const char* name : {"q4_K.ggml.cpu", "q4_0.ggml.cpu", "q5_1.ggml.cpu"}) {
    KernelSpec as_if_exact = find(name);
    as_if_exact.act_round_trip = nullptr;
    as_if_exact.act_converted_to.clear();
    const auto results = run_check({&as_if_exact}, {{96, 1024}}, fresh_check());
    ASSERT_EQ(results.size(), 1u);
    EXPECT_FALSE(results[0].passed()) << name;
    ASSERT_FALSE(results[0].cases.empty());
    EXPECT_NE(results[0].cases[0].failure.find("kernel"), std::string::npos) << results[0].cases[0].failure;
  }
}

TEST(Peers, TheRepackedKernelNeedsItsRepackAndRefusesWhatGgmlWouldNotRepack) {
  const KernelSpec& k = find("q4_K.ggml.cpu_repack");
  EXPECT_FALSE(k.supports({12, 256}));  // not whole groups of 8 rows
  const Shape s{16, 512};
  const auto w = random_quantized_matrix(WeightType::Q4_K, s, qmv::testing::fresh_seed());
  const auto x = gaussian_vector(s.cols, qmv::testing::fresh_seed());
  std::vector<float> y(16);
  const MatVecArgs a = matvec_args(s, w.data(), w.size(), x.data(), x.size() * sizeof(float), y.data());
  EXPECT_FALSE(invoke(k, a).ok());
}

TEST(Peers, BenchRowsSayWhoQuantizesTheActivation) {
  const auto out = run_bench({&find("q4_K.ggml.cpu"), &find("q4_K.ggml.cpu_repack"), &find("q4_K.cpu.scalar_q8k"),
                              &find("q4_K.cpu.scalar_f32")},
                             {{256, 1024}}, quick_bench(false), {});
  ASSERT_TRUE(out.skipped.empty()) << out.skipped.front().kernel << ": " << out.skipped.front().reason;
  std::map<std::string, BenchRow> by_kernel;
  for (const BenchRow& r : out.rows) by_kernel[r.kernel] = r;
  ASSERT_EQ(by_kernel.size(), 4u);
  EXPECT_EQ(by_kernel["q4_K.ggml.cpu"].act_quant, "in_call");
  EXPECT_EQ(by_kernel["q4_K.ggml.cpu_repack"].act_quant, "in_call");
  EXPECT_EQ(by_kernel["q4_K.cpu.scalar_q8k"].act_quant, "before");
  EXPECT_GT(by_kernel["q4_K.cpu.scalar_q8k"].act_quant_median_us, 0.0);
  EXPECT_EQ(by_kernel["q4_K.cpu.scalar_f32"].act_quant, "none");
  EXPECT_EQ(by_kernel["q4_K.cpu.scalar_f32"].act_quant_median_us, 0.0);
  for (const auto& [name, r] : by_kernel) EXPECT_GT(r.time_median_us, 0.0) << name;
}

TEST(Peers, AutoPlansNeverPickAPeerEvenWhenItIsFastest) {
  const std::string path = testing::tmp("peer-auto-toy.gguf");
  const testing::CliRun made = testing::qmvlab(fmt::format(
      "make-model --preset toy --arch llama --mix q4_K_m --seed {} --out {}", qmv::testing::fresh_seed() % 100000 + 1, path));
  ASSERT_EQ(made.code, 0) << made.output;
  const LoadedModel m(path);
  // Bench rows in which ggml is ten times faster than anything else, at every shape.
  std::vector<KernelSpeed> bench;
  for (const PlannedMatvec& p : resolve_plan(KernelPlan{}, m.weights, 1))
    for (const char* kernel : {"q4_K.ggml.cpu", "q6_K.ggml.cpu", "q4_K.cpu.scalar_f32", "q6_K.cpu.scalar_f32"})
      bench.push_back({kernel, std::string(to_string(find(kernel).weight)), p.shape.rows, p.shape.cols, 1,
                       std::string(kernel).find("ggml") != std::string::npos ? 100.0 : 10.0, 0.0, "test"});
  for (const PlannedMatvec& p : resolve_plan(KernelPlan{}, m.weights, 1, bench))
    EXPECT_TRUE(p.kernel->peer.empty()) << p.op << ": " << p.kernel->name;
}

#else

TEST(Peers, NotBuilt) {
  QMV_SKIP_UNLESS_CI("ggml peer kernels not built, so not tested (run scripts/install-peers.sh, then reconfigure)");
}

#endif

}  // namespace
}  // namespace qmv
