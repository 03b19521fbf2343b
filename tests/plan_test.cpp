#include "kernels/availability.h"
#include "model/plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <random>
#include <set>

#include "harness/machine.h"
#include "kernels/registry.h"
#include "tests/tiny_model.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

using qmv::testing::TinySpec;

using qmv::testing::TinyQ4K;

std::string error_of(const KernelPlan& plan, const ModelWeights& w) {
  try {
    resolve_plan(plan, w, 1);
  } catch (const PlanError& e) {
    return e.what();
  }
  return "";
}

// The fused Q4_K kernel `auto` takes without a bench CSV: the first available in
// kAutoOrderFused, else the first by name.
const KernelSpec* available_fused_q4_K() {
  for (const char* v : kAutoOrderFused)
    if (const KernelSpec* k = global_registry().find(std::string("q4_K.cpu.") + v); k && availability(*k).available)
      return k;
  for (const KernelSpec& k : global_registry().all())
    if (k.op == OpKind::FusedUpGate && k.weight == WeightType::Q4_K && k.backend == Backend::CPU &&
        availability(k).available)
      return &k;
  return nullptr;
}

TEST(KernelPlan, AFormerKernelNameInARuleResolvesToTheKernelItNamesNow) {
  const TinyQ4K m;
  for (const auto& p : resolve_plan(KernelPlan::parse_rules("q4_K=q4_K.cpu.scalar,ffn_up_gate=none"), m.weights, 1)) {
    ASSERT_NE(p.kernel, nullptr) << p.op;
    EXPECT_EQ(p.kernel->name, "q4_K.cpu.scalar_f32") << p.op;
  }
}

TEST(KernelPlan, AutoTakesTheFirstAvailableKernelInTheDefaultOrder) {
  const TinyQ4K m;
  const auto planned = resolve_plan(KernelPlan{}, m.weights, 1);
  const KernelSpec* fused = available_fused_q4_K();
  // Six layer ops (gate and up fused) or seven, two layers each, and lm_head.
  ASSERT_EQ(planned.size(), fused ? 7u : 8u);
  std::string expected;
  for (const char* v : kAutoOrder) {
    const KernelSpec* k = global_registry().find(std::string("q4_K.cpu.") + v);
    if (k && availability(*k).available) {
      expected = k->name;
      break;
    }
  }
  for (const auto& p : planned) {
    EXPECT_EQ(p.kernel->name, p.op == Op::FfnUpGate ? fused->name : expected) << p.op;
    EXPECT_EQ(p.count, p.op == Op::LmHead ? 1 : 2) << p.op;
  }
}

TEST(KernelPlan, FusedGateUpIsChosenNamedOrTurnedOff) {
  const TinyQ4K m;
  auto ops = [&](const KernelPlan& plan, const std::vector<KernelSpeed>& bench = {}) {
    std::set<std::string> s;
    for (const auto& p : resolve_plan(plan, m.weights, 1, bench)) s.insert(std::string(to_string(p.op)));
    return s;
  };
  const std::set<std::string> separate = {"attn_q", "attn_k", "attn_v", "attn_out", "ffn_gate", "ffn_up",
                                          "ffn_down", "lm_head"};
  EXPECT_EQ(ops(KernelPlan::parse_rules("ffn_up_gate=none")), separate);
  // Pinning either half keeps the pair apart: fusion would silently override it.
  EXPECT_EQ(ops(KernelPlan::parse_rules("ffn_up.q4_K=q4_K.cpu.scalar_f32")), separate);
  EXPECT_NE(error_of(KernelPlan::parse_rules("ffn_up_gate=q4_K.cpu.scalar_f32"), m.weights)
                .find("ffn_up_gate (q4_K 512x256) cannot use q4_K.cpu.scalar_f32: it is a plain matvec"),
            std::string::npos);
  const KernelSpec* fused = available_fused_q4_K();
  if (!fused) GTEST_SKIP() << "no fused q4_K kernel runs on this CPU";
  std::set<std::string> with_fused = separate;
  with_fused.erase("ffn_gate");
  with_fused.erase("ffn_up");
  with_fused.insert("ffn_up_gate");
  EXPECT_EQ(ops(KernelPlan::parse_rules("ffn_up_gate=" + fused->name + ",ffn_up=q4_K.cpu.scalar_f32")), with_fused);

  // With a bench CSV, fusion must be at least as fast as the best single kernel.
  auto row = [](const std::string& kernel, double gbps) {
    KernelSpeed r;
    r.kernel = kernel;
    r.weight_type = "q4_K";
    r.rows = 512;
    r.cols = 256;
    r.threads = 1;
    r.gbps_median = gbps;
    return r;
  };
  EXPECT_EQ(ops(KernelPlan{}, {row(fused->name, 10), row("q4_K.cpu.avx2_q8k", 12)}), separate);
  EXPECT_EQ(ops(KernelPlan{}, {row(fused->name, 14), row("q4_K.cpu.avx2_q8k", 12)}), with_fused);
}

TEST(KernelPlan, LoadPlanTakesAutoRulesOrAFile) {
  EXPECT_EQ(load_plan("auto").describe(), "*=auto");
  EXPECT_EQ(load_plan("static").describe(), "static");
  EXPECT_TRUE(load_plan("static").uses_static_order());
  EXPECT_FALSE(load_plan("auto").uses_static_order());
  EXPECT_EQ(load_plan("ffn_down.q4_K=q4_K.cpu.scalar_f32").lookup(Op::FfnDown, WeightType::Q4_K), "q4_K.cpu.scalar_f32");
  const std::string dir = std::string(QMV_TEST_TMP) + "/plan";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/load.toml") << "[attn_k]\nq4_K = \"q4_K.cpu.avx2_q8k\"\n";
  EXPECT_EQ(load_plan(dir + "/load.toml").lookup(Op::AttnK, WeightType::Q4_K), "q4_K.cpu.avx2_q8k");
  EXPECT_THROW(load_plan(dir + "/missing.toml"), PlanError);
}

TEST(KernelPlan, MostSpecificRuleWins) {
  const KernelPlan plan = KernelPlan::parse_rules(
      "*=q4_K.cpu.scalar_q8k,q4_K=q4_K.cpu.avx2_q8k,ffn_down=q4_K.cpu.avx2_f32,ffn_down.q4_K=q4_K.cpu.scalar_f32,"
      "attn_q=auto");
  EXPECT_EQ(plan.lookup(Op::FfnDown, WeightType::Q4_K), "q4_K.cpu.scalar_f32");  // (op, type)
  EXPECT_EQ(plan.lookup(Op::FfnDown, WeightType::Q6_K), "q4_K.cpu.avx2_f32");  // (op, *)
  EXPECT_EQ(plan.lookup(Op::FfnUp, WeightType::Q4_K), "q4_K.cpu.avx2_q8k");  // (*, type)
  EXPECT_EQ(plan.lookup(Op::FfnUp, WeightType::Q6_K), "q4_K.cpu.scalar_q8k");  // (*, *)
  EXPECT_EQ(plan.lookup(Op::AttnQ, WeightType::Q4_K), "auto");
  EXPECT_EQ(KernelPlan{}.lookup(Op::LmHead, WeightType::Q8_0), "auto");

  const TinyQ4K m;
  int ffn_down = 0, ffn_up = 0;
  for (const auto& p : resolve_plan(plan, m.weights, 1)) {
    if (p.op == Op::FfnDown) {
      ++ffn_down;
      EXPECT_EQ(p.kernel->name, "q4_K.cpu.scalar_f32");
    }
    if (p.op == Op::FfnUp) {
      ++ffn_up;
      EXPECT_EQ(p.kernel->name, "q4_K.cpu.avx2_q8k");
    }
    if (p.op != Op::AttnQ) {
      EXPECT_EQ(p.why, "plan");
    }
  }
  // Both ops are in the plan, so the two checks above ran.
  EXPECT_EQ(ffn_down, 1);
  EXPECT_EQ(ffn_up, 1);
}

TEST(KernelPlan, AutoPicksTheFastestAtTheNearestBenchShape) {
  const TinyQ4K m;
  auto row = [](const char* kernel, std::int64_t rows, std::int64_t cols, double gbps) {
    KernelSpeed r;
    r.kernel = kernel;
    r.weight_type = "q4_K";
    r.rows = rows;
    r.cols = cols;
    r.threads = 1;
    r.gbps_median = gbps;
    return r;
  };
  // At 512x256 the scalar reference is made "fastest"; far away another kernel is.
  const std::vector<KernelSpeed> bench = {row("q4_K.cpu.scalar_f32", 512, 256, 9.0), row("q4_K.cpu.avx2_q8k", 512, 256, 3.0),
                                       row("q4_K.cpu.avx2_q8k", 32000, 4096, 50.0)};
  int ffn_up = 0;
  for (const auto& p : resolve_plan(KernelPlan{}, m.weights, 1, bench)) {
    if (p.op == Op::FfnUp) {
      ++ffn_up;
      EXPECT_EQ(p.kernel->name, "q4_K.cpu.scalar_f32");
      EXPECT_EQ(p.why, "auto: fastest measured");
      EXPECT_DOUBLE_EQ(p.gbps, 9.0);
      ASSERT_NE(p.runner_up, nullptr);
      EXPECT_EQ(p.runner_up->name, "q4_K.cpu.avx2_q8k");
    }
  }
  // Measured plain kernels and no fused one: gate and up stay apart, so ffn_up is there.
  EXPECT_EQ(ffn_up, 1);
}

TEST(KernelPlan, ImpossibleChoicesAreRefusedNamingOpAndKernel) {
  const TinyQ4K m;
  EXPECT_NE(error_of(KernelPlan::parse_rules("ffn_up=q6_K.cpu.scalar_f32"), m.weights)
                .find("ffn_up (q4_K 512x256) cannot use q6_K.cpu.scalar_f32: it reads q6_K weights"),
            std::string::npos);
  EXPECT_NE(error_of(KernelPlan::parse_rules("attn_v=q4_K.cpu.nope"), m.weights).find("no such kernel"),
            std::string::npos);
  EXPECT_NE(error_of(KernelPlan::parse_rules("ffn_gate=q4_K.cpu.avx512vnni_up_gate_q8k"), m.weights)
                .find("it is a fused op"),
            std::string::npos);
  EXPECT_THROW(KernelPlan::parse_rules("ffn_sideways=q4_K.cpu.scalar_f32"), PlanError);
  EXPECT_THROW(KernelPlan::parse_rules("q9_K=q4_K.cpu.scalar_f32"), PlanError);
  EXPECT_THROW(KernelPlan::parse_rules("no-equals-sign"), PlanError);
}

TEST(KernelPlan, TomlFile) {
  const std::string dir = std::string(QMV_TEST_TMP) + "/plan";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/good.toml") << "[default]\nq4_K = \"q4_K.cpu.avx2_q8k\"\n\"*\" = \"auto\"\n"
                                       "[ffn_down]\nQ4_K = \"q4_K.cpu.scalar_f32\"\n";
  const KernelPlan plan = KernelPlan::load_toml(dir + "/good.toml");
  EXPECT_EQ(plan.lookup(Op::FfnDown, WeightType::Q4_K), "q4_K.cpu.scalar_f32");
  EXPECT_EQ(plan.lookup(Op::AttnK, WeightType::Q4_K), "q4_K.cpu.avx2_q8k");
  EXPECT_EQ(plan.lookup(Op::AttnK, WeightType::Q6_K), "auto");
  std::ofstream(dir + "/bad.toml") << "[default]\nq4_K = \n";
  try {
    KernelPlan::load_toml(dir + "/bad.toml");
    FAIL();
  } catch (const PlanError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.toml"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
  std::ofstream(dir + "/badop.toml") << "[ffn_sideways]\nq4_K = \"q4_K.cpu.scalar_f32\"\n";
  EXPECT_THROW(KernelPlan::load_toml(dir + "/badop.toml"), PlanError);
  EXPECT_THROW(KernelPlan::load_toml(dir + "/no-such-plan.toml"), PlanError);
}

// Each fault comes after a random number of comment and blank lines (good sections
// follow it: a key at the top level must come before any table); the error names the
// file, the fault and its line.
TEST(KernelPlan, TomlErrorsNameFileAndLine) {
  std::mt19937 g(qmv::testing::fresh_seed());
  const char* good_ops[] = {"attn_k", "attn_v", "attn_out"};
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[default]\nq4_K = 5", "default.q4_K must be a kernel name string"},
      {"[ffn_down]\nq9_K = \"x\"", "unknown weight type 'q9_K'"},
      {"[ffn_down]\nq4_K = \"\"", "empty kernel for ffn_down.q4_K"},
      {"[ffn_sideways]\nq4_K = \"q4_K.cpu.scalar_f32\"", "unknown op 'ffn_sideways'"},
      // The GPU's stacked q/k/v runs q's kernel: no plan picks one for it.
      {"[attn_qkv]\nq4_K = \"q4_K.cpu.scalar_f32\"", "unknown op 'attn_qkv'"},
      {"attn_q = \"q4_K.cpu.scalar_f32\"", "[attn_q] must be a table"},
      {"outliers = 3", "[outliers] must be a table"},
      {"[outliers]\nroute = \"yes\"", "outliers.route must be true or false"},
      {"[outliers]\nk = -1", "outliers.k must be a number >= 0"},
      {"[outliers]\nk = nan", "outliers.k must be a number >= 0"},
      {"[outliers]\nq4_K = 1", "outliers.q4_K must be a kernel name string"},
      {"[outliers]\nq9_K = \"x\"", "outliers.q9_K is neither route, k nor a weight type"},
      {"[default]\nq4_K = ", "(line"},  // TOML syntax
  };
  for (const auto& [fault, want] : cases) {
    std::string text;
    const int before = static_cast<int>(g() % 5);
    for (int i = 0; i < before; ++i) text += g() % 2 ? "# a comment\n" : "\n";
    text += fault + "\n";
    for (const char* op : good_ops) text += "[" + std::string(op) + "]\nq6_K = \"q6_K.cpu.scalar_f32\"\n";
    const int line = before + static_cast<int>(std::count(fault.begin(), fault.end(), '\n')) + 1;
    try {
      KernelPlan::parse_toml(text, "bad-plan.toml");
      ADD_FAILURE() << "accepted " << fault;
    } catch (const PlanError& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("bad-plan.toml: ", 0), 0u) << m;
      EXPECT_NE(m.find(want), std::string::npos) << m;
      EXPECT_NE(m.find("(line " + std::to_string(line) + ")"), std::string::npos) << fault << ": " << m;
    }
  }
}

// The f32 kernel auto would pick for a weight type: the first available f32-activation
// kernel of kAutoOrder, found here by name without the plan's code.
std::string first_f32_in_auto_order(WeightType w) {
  for (const char* v : kAutoOrder) {
    const KernelSpec* k = global_registry().find(std::string(to_string(w)) + ".cpu." + v);
    if (k && k->act == ActFormat::F32 && availability(*k).available) return k->name;
  }
  return "";
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const PlanError& e) {
    return e.what();
  }
  return "";
}

TEST(OutlierRouting, OffByDefaultAndOnEveryInt8MatvecWhenAsked) {
  const TinyQ4K m;
  for (const auto& p : resolve_plan(KernelPlan{}, m.weights, 1)) EXPECT_EQ(p.outlier_kernel, nullptr) << p.op;
  KernelPlan plan = KernelPlan::parse_rules("attn_q=q4_K.cpu.scalar_f32,attn_k=q4_K.cpu.scalar_q8k");
  route_outliers_option(plan, "");
  EXPECT_TRUE(plan.outlier_routing().route);
  EXPECT_EQ(plan.outlier_routing().k, kDefaultOutlierK);
  const std::string sibling = first_f32_in_auto_order(WeightType::Q4_K);
  ASSERT_FALSE(sibling.empty());
  for (const auto& p : resolve_plan(plan, m.weights, 1)) {
    if (p.kernel->act == ActFormat::F32) {
      EXPECT_EQ(p.outlier_kernel, nullptr) << p.op << ": an f32 kernel needs no sibling";
      continue;
    }
    ASSERT_NE(p.outlier_kernel, nullptr) << p.op;
    EXPECT_EQ(p.outlier_kernel->act, ActFormat::F32) << p.op;
    EXPECT_EQ(p.outlier_k, kDefaultOutlierK);
    if (p.op == Op::FfnUpGate) {
      // No fused f32 kernel: the plain one runs once per matrix.
      EXPECT_EQ(p.outlier_kernel->op, OpKind::MatVec);
    }
    EXPECT_EQ(p.outlier_kernel->name, sibling) << p.op;
    EXPECT_NE(p.outlier_why.find("auto"), std::string::npos) << p.outlier_why;
  }
}

TEST(OutlierRouting, TomlRulesAndTheOptionSetRouteKAndSiblings) {
  const std::string dir = std::string(QMV_TEST_TMP) + "/plan";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/route.toml") << "[default]\nq4_K = \"q4_K.cpu.scalar_q8k\"\n"
                                        "[outliers]\nroute = true\nk = 6.5\nq4_K = \"q4_K.cpu.scalar_f32\"\n";
  KernelPlan plan = load_plan(dir + "/route.toml");
  EXPECT_TRUE(plan.outlier_routing().route);
  EXPECT_EQ(plan.outlier_routing().k, 6.5);
  EXPECT_EQ(plan.lookup_outlier_kernel(WeightType::Q4_K), "q4_K.cpu.scalar_f32");
  EXPECT_EQ(plan.lookup_outlier_kernel(WeightType::Q6_K), "");
  const TinyQ4K m;
  for (const auto& p : resolve_plan(plan, m.weights, 1)) {
    ASSERT_NE(p.outlier_kernel, nullptr) << p.op;
    EXPECT_EQ(p.outlier_kernel->name, "q4_K.cpu.scalar_f32");
    EXPECT_EQ(p.outlier_k, 6.5);
    EXPECT_EQ(p.outlier_why, "plan");
  }
  // Command-line rules after the file: k changes, routing stays on; the description
  // reads back as the same plan.
  plan.merge(KernelPlan::parse_rules("outliers.k=3"));
  EXPECT_TRUE(plan.outlier_routing().route);
  EXPECT_EQ(plan.outlier_routing().k, 3.0);
  const KernelPlan again = KernelPlan::parse_rules(plan.describe());
  EXPECT_EQ(again.describe(), plan.describe());
  EXPECT_TRUE(again.outlier_routing().route);
  EXPECT_EQ(again.outlier_routing().k, 3.0);
  EXPECT_EQ(again.lookup_outlier_kernel(WeightType::Q4_K), "q4_K.cpu.scalar_f32");
  // --route-outliers=K sets k; plain --route-outliers keeps the plan's.
  route_outliers_option(plan, "");
  EXPECT_EQ(plan.outlier_routing().k, 3.0);
  route_outliers_option(plan, "0");
  EXPECT_EQ(plan.outlier_routing().k, 0.0);
  KernelPlan off = KernelPlan::parse_rules("outliers.route=false,outliers.k=2");
  EXPECT_FALSE(off.outlier_routing().route);
  for (const auto& p : resolve_plan(off, m.weights, 1)) EXPECT_EQ(p.outlier_kernel, nullptr);
}

TEST(OutlierRouting, BadSettingsAreRefusedNamingThem) {
  EXPECT_NE(message_of([] { KernelPlan::parse_rules("outliers.k=-1"); }).find("outliers.k must be a number >= 0"),
            std::string::npos);
  EXPECT_NE(message_of([] { KernelPlan::parse_rules("outliers.k=eight"); }).find("'eight'"), std::string::npos);
  EXPECT_NE(message_of([] { KernelPlan::parse_rules("outliers.k=nan"); }).find("outliers.k"), std::string::npos);
  EXPECT_NE(message_of([] { KernelPlan::parse_rules("outliers.route=maybe"); }).find("true or false"),
            std::string::npos);
  EXPECT_NE(message_of([] { KernelPlan::parse_rules("outliers.q9_K=x"); }).find("neither route, k nor a weight type"),
            std::string::npos);
  EXPECT_NE(message_of([] { KernelPlan::parse_rules("outliers=true"); }).find("needs a key"), std::string::npos);
  KernelPlan plan;
  EXPECT_NE(message_of([&] { route_outliers_option(plan, "x"); }).find("--route-outliers"), std::string::npos);

  const std::string dir = std::string(QMV_TEST_TMP) + "/plan";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/badk.toml") << "[outliers]\nroute = true\nk = \"eight\"\n";
  EXPECT_NE(message_of([&] { KernelPlan::load_toml(dir + "/badk.toml"); }).find("outliers.k must be a number"),
            std::string::npos);
  std::ofstream(dir + "/badroute.toml") << "[outliers]\nroute = 1\n";
  EXPECT_NE(message_of([&] { KernelPlan::load_toml(dir + "/badroute.toml"); }).find("true or false"),
            std::string::npos);

  // A named sibling must read f32 activations and the matvec's weights.
  const TinyQ4K m;
  EXPECT_NE(error_of(KernelPlan::parse_rules("outliers.route=true,outliers.q4_K=q4_K.cpu.scalar_q8k"), m.weights)
                .find("cannot route outlier vectors to q4_K.cpu.scalar_q8k: it reads q8_K activations"),
            std::string::npos);
  EXPECT_NE(error_of(KernelPlan::parse_rules("outliers.route=true,outliers.q4_K=q6_K.cpu.scalar_f32"), m.weights)
                .find("it reads q6_K weights"),
            std::string::npos);
}

}  // namespace
}  // namespace qmv
