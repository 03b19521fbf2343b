// Outlier routing in the CPU forward pass (model/forward.h): int8-activation matvecs
// run their f32 siblings on vectors that trip max|x| > k rms. On synthetic models
// (fresh seeds): a k that trips every vector gives exactly the logits of the f32
// siblings' plan; a k that trips none changes nothing; the routed counts follow the
// vectors, each vector tested once.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "kernels/formats/formats.h"
#include "kernels/outliers.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/plan.h"
#include "model/synthetic.h"
#include "tests/cli_run.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

using testing::fresh_seed;

// A toy model (width 256, FFN 512, vocab 512) of `mix` with `layers` layers.
std::string toy_model(const std::string& mix, int layers) {
  static std::map<std::string, std::string> made;
  const std::string key = fmt::format("{}-{}", mix, layers);
  if (auto it = made.find(key); it != made.end()) return it->second;
  SyntheticSpec spec;
  spec.preset = "toy";
  spec.mix = mix;
  spec.layers = layers;
  spec.seed = fresh_seed();
  // The seed in the name: ctest runs the tests of this file as parallel processes.
  const std::string path = testing::tmp(fmt::format("routing-toy-{}-{}.gguf", key, spec.seed));
  make_model(spec, path);
  return made[key] = path;
}

struct Decoded {
  std::vector<float> logits;
  StepTimes times;
};

Decoded run(const LoadedModel& m, const std::vector<PlannedMatvec>& planned, const std::vector<int>& tokens) {
  CpuForward fwd(m.config, m.weights, planned, 2, static_cast<int>(tokens.size()));
  Decoded r;
  for (int t : tokens) {
    const auto l = fwd.step(t);
    r.logits.insert(r.logits.end(), l.begin(), l.end());
  }
  r.times = fwd.times();
  return r;
}

std::vector<PlannedMatvec> routed_plan(const LoadedModel& m, const std::string& rules, double k) {
  KernelPlan plan = load_plan(rules);
  plan.set_outlier_routing(true, k);
  return resolve_plan(plan, m.weights, 2);
}

// The plan that runs, everywhere, what the routed plan runs on outlier vectors.
std::string sibling_rules(const std::vector<PlannedMatvec>& routed) {
  std::string rules;
  auto add = [&](const std::string& op, WeightType w, const std::string& kernel) {
    rules += fmt::format("{}{}.{}={}", rules.empty() ? "" : ",", op, to_string(w), kernel);
  };
  for (const auto& p : routed) {
    const KernelSpec* k = p.outlier_kernel ? p.outlier_kernel : p.kernel;
    if (p.op == Op::FfnUpGate && k->op == OpKind::MatVec) {
      add("ffn_up_gate", p.weight, kNoKernel);
      add("ffn_gate", p.weight, k->name);
      add("ffn_up", p.weight, k->name);
    } else {
      add(std::string(to_string(p.op)), p.weight, k->name);
    }
  }
  return rules;
}

double nmse(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return num / den;
}

std::vector<int> random_tokens(int n, int vocab, std::mt19937& rng) {
  std::vector<int> t(n);
  for (int& x : t) x = std::uniform_int_distribution<int>(0, vocab - 1)(rng);
  return t;
}

bool any_int8(const std::vector<PlannedMatvec>& planned) {
  return std::any_of(planned.begin(), planned.end(), [](const PlannedMatvec& p) { return p.kernel->act != ActFormat::F32; });
}

constexpr Op kMatvecParts[] = {Op::AttnQ,     Op::AttnK,  Op::AttnV,
                                     Op::AttnOut,   Op::FfnGate, Op::FfnUp,
                                     Op::FfnUpGate, Op::FfnDown, Op::LmHead};
int idx(Op p) { return static_cast<int>(p); }

TEST(ForwardRouting, TrippingEveryVectorGivesTheF32SiblingsLogits) {
  std::mt19937 rng(fresh_seed());
  // q4_K_m: Q8_K kernels (fused gate+up where one runs); q4_1: the Q8_1 VNNI kernels.
  for (const char* mix : {"q4_K_m", "q4_1"}) {
    const LoadedModel m(toy_model(mix, 2));
    const auto int8 = resolve_plan(KernelPlan{}, m.weights, 2);
    if (!any_int8(int8)) {
      std::printf("%s: no int8-activation kernel runs on this CPU; nothing to route\n", mix);
      continue;
    }
    const auto tokens = random_tokens(7, m.config.vocab_size, rng);
    // k = 0 trips every non-zero vector.
    const auto routed = routed_plan(m, "auto", 0.0);
    const auto f32 = resolve_plan(load_plan(sibling_rules(routed)), m.weights, 2);
    ASSERT_FALSE(any_int8(f32)) << sibling_rules(routed);
    const Decoded all_routed = run(m, routed, tokens), siblings = run(m, f32, tokens), plain = run(m, int8, tokens);
    // The same kernels on the same vectors: the same bits.
    EXPECT_EQ(all_routed.logits, siblings.logits) << mix;
    // Without routing the int8 plan differs by what int8 activations lose, not by
    // float rounding (~1e-13), and not by more than int8 loses on Gaussian data.
    const double loss = nmse(plain.logits, siblings.logits);
    EXPECT_GT(loss, 1e-9) << mix;
    EXPECT_LT(loss, 1e-2) << mix;
    // Every int8 call routed, nothing quantized.
    for (Op part : kMatvecParts) {
      const int i = idx(part);
      EXPECT_EQ(all_routed.times.routed[i], all_routed.times.routable[i]) << to_string(part);
      EXPECT_EQ(all_routed.times.routable[i], all_routed.times.matvecs[i]) << to_string(part);
      EXPECT_EQ(plain.times.routable[i], 0) << to_string(part);
    }
    EXPECT_EQ(all_routed.times.calls[idx(Op::ActQuant)], 0) << mix;
    // One test per vector that int8 kernels read: per layer the attention input, the
    // attention output, the FFN input and the SwiGLU output; then the final norm.
    EXPECT_EQ(all_routed.times.calls[idx(Op::OutlierTest)],
              static_cast<std::int64_t>(tokens.size()) * (4 * m.config.n_layers + 1))
        << mix;
  }
}

TEST(ForwardRouting, AKNoVectorReachesChangesNothing) {
  std::mt19937 rng(fresh_seed());
  const LoadedModel m(toy_model("q4_K_m", 2));
  const auto int8 = resolve_plan(KernelPlan{}, m.weights, 2);
  if (!any_int8(int8)) GTEST_SKIP() << "no int8-activation kernel runs on this CPU";
  const auto tokens = random_tokens(6, m.config.vocab_size, rng);
  // max|x| <= sqrt(n) rms: k = 1e6 cannot trip a vector of fewer than 10^12 values.
  const Decoded never = run(m, routed_plan(m, "auto", 1e6), tokens), plain = run(m, int8, tokens);
  EXPECT_EQ(never.logits, plain.logits);
  for (Op part : kMatvecParts) {
    const int i = idx(part);
    EXPECT_EQ(never.times.routed[i], 0) << to_string(part);
    EXPECT_EQ(never.times.routable[i], never.times.matvecs[i]) << to_string(part);
  }
}

// The attention input of layer 0 is rms_norm(embedding(token)) * attn_norm, whatever
// came before: its verdict, computed here in double, predicts how many attn_q, attn_k
// and attn_v calls a one-layer model routes.
double first_input_peak_to_rms(const LoadedModel& m, int token) {
  const gguf::Tensor* e = m.weights.token_embd;
  WeightType type;
  EXPECT_TRUE(parse_weight_type(e->type->name, type));
  const int n = m.config.n_embd;
  std::vector<float> row(static_cast<std::size_t>(n));
  dequantize_row(type, e->data + static_cast<std::size_t>(token) * row_bytes(type, n), row.data(), n);
  const auto* w = reinterpret_cast<const float*>(m.weights.layers[0].attn_norm->data);
  double ss = 0;
  for (float v : row) ss += double(v) * v;
  const double scale = 1.0 / std::sqrt(ss / n + m.config.rms_eps);
  std::vector<float> xn(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) xn[i] = static_cast<float>(row[i] * scale * w[i]);
  return peak_to_rms(xn.data(), n);
}

TEST(ForwardRouting, RoutedCountsFollowTheVectors) {
  std::mt19937 rng(fresh_seed());
  const LoadedModel m(toy_model("q4_K_m", 1));
  if (!any_int8(resolve_plan(KernelPlan{}, m.weights, 2))) GTEST_SKIP() << "no int8-activation kernel runs here";
  const auto tokens = random_tokens(24, m.config.vocab_size, rng);
  std::vector<double> ratios;
  for (int t : tokens) ratios.push_back(first_input_peak_to_rms(m, t));
  std::vector<double> sorted = ratios;
  std::sort(sorted.begin(), sorted.end());
  // A k between two of the tokens' ratios, clear of both by more than float rounding.
  double k = 0;
  for (std::size_t i = sorted.size() / 2; i + 1 < sorted.size() && k == 0; ++i)
    if (sorted[i + 1] - sorted[i] > 1e-3 * sorted[i]) k = 0.5 * (sorted[i] + sorted[i + 1]);
  ASSERT_GT(k, 0) << "no gap between the tokens' max/rms ratios";
  const auto expected = std::count_if(ratios.begin(), ratios.end(), [&](double r) { return r > k; });
  ASSERT_GT(expected, 0);
  ASSERT_LT(expected, static_cast<std::int64_t>(tokens.size()));

  const Decoded r = run(m, routed_plan(m, "auto", k), tokens);
  // q, k and v read one vector, tested once: the same verdict for the three.
  for (Op part : {Op::AttnQ, Op::AttnK, Op::AttnV}) {
    EXPECT_EQ(r.times.routed[idx(part)], expected) << to_string(part) << " at k = " << k;
    EXPECT_EQ(r.times.routable[idx(part)], static_cast<std::int64_t>(tokens.size())) << to_string(part);
  }
  // Gate and up share a vector too (or run as one fused call).
  EXPECT_EQ(r.times.routed[idx(Op::FfnGate)], r.times.routed[idx(Op::FfnUp)]);
  // Larger k routes no more calls anywhere.
  std::array<std::int64_t, static_cast<int>(Op::kCount)> previous{};
  for (const double kk : {0.0, 1.5, 2.5, 3.5, 5.0, 8.0}) {
    const Decoded s = run(m, routed_plan(m, "auto", kk), tokens);
    for (Op part : kMatvecParts) {
      if (kk > 0) {
        EXPECT_LE(s.times.routed[idx(part)], previous[idx(part)]) << to_string(part) << " at k = " << kk;
      }
      previous[idx(part)] = s.times.routed[idx(part)];
    }
  }
}

TEST(DecodeCliRouting, DecodeReportsRoutedCallsPerOpAndThePlanShowsSiblings) {
  const std::string model = toy_model("q4_K_m", 2);
  if (!any_int8(resolve_plan(KernelPlan{}, LoadedModel(model).weights, 2)))
    GTEST_SKIP() << "no int8-activation kernel runs here";
  const testing::CliRun r = testing::qmvlab("decode --model " + model +
                                            " --prompt-tokens 256,40,41 -n 5 --ignore-eos --quiet --no-peak "
                                            "--route-outliers=0 --tune-time 0.002");
  ASSERT_EQ(r.code, 0) << r.output;
  // 7 tokens through 2 layers, every int8 call routed at k = 0.
  for (const char* text : {"outlier routing over the prompt and decode", "| attn_q ", "| ffn_down ",
                           "| outlier_test ", "on outlier vectors", "if max|x| > 0 rms",
                           "outliers.route=true,outliers.k=0"})
    EXPECT_NE(r.output.find(text), std::string::npos) << text << "\n" << r.output;
  EXPECT_NE(r.output.find("(100.00%)"), std::string::npos) << r.output;
  const testing::CliRun plan = testing::qmvlab("plan --model " + model + " --route-outliers");
  ASSERT_EQ(plan.code, 0) << plan.output;
  EXPECT_NE(plan.output.find("if max|x| > 8 rms"), std::string::npos) << plan.output;
  testing::expect_error("decode --model " + model + " --prompt hi -n 2 --route-outliers=-3",
                        "outliers.k must be a number >= 0");
  testing::expect_error("logits --model " + model + " --tokens 1,2 --route-outliers=x --out " +
                            testing::tmp("routing.npy"),
                        "--route-outliers");
}

}  // namespace
}  // namespace qmv
