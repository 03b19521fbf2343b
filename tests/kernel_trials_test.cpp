// Trials in the run (model/kernel_trials.h): which candidate each layer runs, which one
// a trial keeps from the call times it is given, when trials take turns or give up;
// which kernels auto offers for a trial; and, on a real forward, that trying kernels
// shares the prepared copies and keeps the logits.
#include "model/kernel_trials.h"

#include <gtest/gtest.h>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "harness/csv.h"
#include "kernels/cpu_features.h"
#include "kernels/registry.h"
#include "model/forward.h"
#include "model/gguf.h"
#include "model/plan.h"
#include "tests/cli_run.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

using testing::fresh_seed;

double nmse(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size() && i < ref.size(); ++i) {
    num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return a.size() == ref.size() ? num / den : 1e300;
}

const KernelSpec& kernel(const char* name) {
  const KernelSpec* k = global_registry().find(name);
  if (!k) throw std::runtime_error(fmt::format("no kernel {}", name));
  return *k;
}

// Two kernels on one repacked copy, and one on the plain layout.
const KernelSpec& r8x2() { return kernel("q4_K.cpu.avx2_r8x2_q8k"); }
const KernelSpec& r8x4() { return kernel("q4_K.cpu.avx2_r8x4_q8k"); }
const KernelSpec& r8() { return kernel("q4_K.cpu.avx2_r8_q8k"); }
const KernelSpec& plain() { return kernel("q4_K.cpu.scalar_q8k"); }

// A program of `layers` layers whose q and k run `pick` on one shape.
StepProgram program_of(int layers, const KernelSpec& pick, Shape s) {
  StepProgram p;
  p.layers.resize(static_cast<std::size_t>(layers));
  for (LayerOps& l : p.layers) {
    l.q = {&pick, s, Op::AttnQ};
    l.k = {&pick, s, Op::AttnK};
  }
  return p;
}

PlannedMatvec entry(Op op, const KernelSpec& pick, Shape s, std::vector<const KernelSpec*> others) {
  PlannedMatvec p;
  p.op = op;
  p.weight = pick.weight;
  p.shape = s;
  p.kernel = &pick;
  p.trial_kernels = std::move(others);
  return p;
}

// Runs steps until no trial runs (at most `max_steps`): each step's call of `op` on a
// layer takes the layer's base time times `slowness` of the kernel it ran, with a
// little noise; every other op's calls are timed too, one per layer.
int run_steps(KernelTrials& trials, StepProgram& program, std::mt19937& rng,
              const std::map<const KernelSpec*, double>& slowness, double noise_amplitude = 0.005) {
  std::uniform_real_distribution<double> base(40e-6, 90e-6), noise(1 - noise_amplitude, 1 + noise_amplitude);
  std::vector<double> layer_base(program.layers.size());
  for (double& b : layer_base) b = base(rng);
  int steps = 0;
  while (trials.running() && steps < 100) {
    trials.before_step(program);
    StepCallSeconds seconds;
    for (std::size_t l = 0; l < program.layers.size(); ++l)
      for (const Op op : {Op::AttnQ, Op::AttnK}) {
        const KernelSpec* k = matvec_slot(program.layers[l], op).kernel;
        seconds[static_cast<int>(op)].push_back(layer_base[l] * slowness.at(k) * noise(rng));
      }
    trials.after_step(program, seconds);
    ++steps;
  }
  return steps;
}

TEST(KernelTrials, KeepTheKernelWhoseCallsTakeLeastOnTheSameLayers) {
  ASSERT_TRUE(reads_same_weights(r8x2(), r8x4()));
  ASSERT_TRUE(reads_same_weights(r8x2(), r8()));
  std::mt19937 rng(fresh_seed());
  const Shape s{256, 512};
  const int layers = std::uniform_int_distribution<int>(kTrialMinLayers, 12)(rng);
  // The faster kernel is each of the three in turn; the pick is always r8x2.
  for (const KernelSpec* fastest : {&r8x2(), &r8x4(), &r8()}) {
    std::map<const KernelSpec*, double> slowness = {{&r8x2(), 1.08}, {&r8x4(), 1.08}, {&r8(), 1.08}};
    slowness[fastest] = 1.0;
    StepProgram program = program_of(layers, r8x2(), s);
    KernelTrials trials({entry(Op::AttnQ, r8x2(), s, {&r8x4(), &r8()})}, program);
    ASSERT_EQ(trials.trials().size(), 1u);
    run_steps(trials, program, rng, slowness);
    const KernelTrials::Trial& t = trials.trials().front();
    ASSERT_FALSE(trials.running()) << fastest->name;
    EXPECT_FALSE(t.abandoned);
    EXPECT_EQ(t.kept(), fastest) << fastest->name;
    for (const KernelTrials::Candidate& c : t.candidates) {
      EXPECT_GE(static_cast<int>(c.seconds.size()), kTrialCalls) << c.kernel->name;
      EXPECT_GT(c.median_s, 0.0);
    }
    EXPECT_GE(t.steps, kTrialSteps);
    // Every layer runs the winner from now on, and k, never tried, its pick.
    for (const LayerOps& l : program.layers) {
      EXPECT_EQ(l.q.kernel, fastest);
      EXPECT_EQ(l.k.kernel, &r8x2());
    }
  }
}

TEST(KernelTrials, EveryCandidateMeetsEveryLayer) {
  std::mt19937 rng(fresh_seed());
  const Shape s{256, 512};
  const int layers = std::uniform_int_distribution<int>(kTrialMinLayers, 9)(rng);
  StepProgram program = program_of(layers, r8x2(), s);
  KernelTrials trials({entry(Op::AttnQ, r8x2(), s, {&r8x4(), &r8()})}, program);
  std::map<std::pair<int, const KernelSpec*>, int> met;
  while (trials.running()) {
    trials.before_step(program);
    StepCallSeconds seconds;
    for (int l = 0; l < layers; ++l) {
      ++met[{l, program.layers[static_cast<std::size_t>(l)].q.kernel}];
      seconds[static_cast<int>(Op::AttnQ)].push_back(50e-6);
      seconds[static_cast<int>(Op::AttnK)].push_back(50e-6);
    }
    trials.after_step(program, seconds);
  }
  // Each layer ran each candidate, and as often as the others.
  ASSERT_EQ(met.size(), static_cast<std::size_t>(layers) * 3);
  for (const auto& [layer_kernel, times] : met) EXPECT_EQ(times, met.begin()->second);
}

TEST(KernelTrials, ThePickStaysWhenNoneBeatsItByTheMargin) {
  std::mt19937 rng(fresh_seed());
  const Shape s{256, 512};
  StepProgram program = program_of(8, r8x2(), s);
  KernelTrials trials({entry(Op::AttnQ, r8x2(), s, {&r8x4()})}, program);
  // Half the margin faster, with a tenth of the margin's noise.
  run_steps(trials, program, rng, {{&r8x2(), 1.0}, {&r8x4(), 1.0 - kTrialMargin / 2}}, kTrialMargin / 10);
  ASSERT_FALSE(trials.running());
  EXPECT_EQ(trials.trials().front().winner, 0);
  for (const LayerOps& l : program.layers) EXPECT_EQ(l.q.kernel, &r8x2());
}

TEST(KernelTrials, TrialsOfOneCallGroupTakeTurns) {
  std::mt19937 rng(fresh_seed());
  const Shape s{256, 512};
  StepProgram program = program_of(6, r8x2(), s);
  KernelTrials trials({entry(Op::AttnQ, r8x2(), s, {&r8x4()}), entry(Op::AttnK, r8x2(), s, {&r8x4()})}, program);
  ASSERT_EQ(trials.trials().size(), 2u);
  const std::map<const KernelSpec*, double> slowness = {{&r8x2(), 1.1}, {&r8x4(), 1.0}};
  // While q's trial runs, k runs its pick on every layer: a group's time is one.
  int steps_of_q = 0;
  while (trials.trials()[0].winner < 0) {
    trials.before_step(program);
    for (const LayerOps& l : program.layers) EXPECT_EQ(l.k.kernel, &r8x2());
    StepCallSeconds seconds;
    for (const LayerOps& l : program.layers) {
      seconds[static_cast<int>(Op::AttnQ)].push_back(50e-6 * slowness.at(l.q.kernel));
      seconds[static_cast<int>(Op::AttnK)].push_back(50e-6 * slowness.at(l.q.kernel) * slowness.at(l.k.kernel));
    }
    trials.after_step(program, seconds);
    ASSERT_LT(++steps_of_q, 100);
  }
  EXPECT_EQ(trials.trials()[1].steps, 0);
  EXPECT_TRUE(trials.running());
  run_steps(trials, program, rng, slowness);
  EXPECT_EQ(trials.trials()[0].kept(), &r8x4());
  EXPECT_EQ(trials.trials()[1].kept(), &r8x4());
}

TEST(KernelTrials, CallsThatDoNotMatchTheLayersEndTheTrialKeepingThePick) {
  const Shape s{256, 512};
  StepProgram program = program_of(6, r8x2(), s);
  KernelTrials trials({entry(Op::AttnQ, r8x2(), s, {&r8x4()})}, program);
  trials.before_step(program);
  StepCallSeconds seconds;
  seconds[static_cast<int>(Op::AttnQ)].assign(12, 50e-6);  // two calls per layer
  trials.after_step(program, seconds);
  ASSERT_FALSE(trials.running());
  EXPECT_TRUE(trials.trials().front().abandoned);
  for (const LayerOps& l : program.layers) EXPECT_EQ(l.q.kernel, &r8x2());
}

TEST(KernelTrials, OnlyKernelsOnTheSameWeightsOnEnoughLayersAreTried) {
  const Shape s{256, 512};
  ASSERT_FALSE(reads_same_weights(r8x2(), plain()));
  StepProgram program = program_of(8, r8x2(), s);
  // Another layout, or a kernel of another op: no trial.
  EXPECT_TRUE(KernelTrials({entry(Op::AttnQ, r8x2(), s, {&plain()})}, program).trials().empty());
  const KernelSpec& fused = kernel("q4_K.cpu.avx2_r8x2_up_gate_q8k");
  EXPECT_TRUE(KernelTrials({entry(Op::AttnQ, r8x2(), s, {&fused})}, program).trials().empty());
  // Too few layers, or a routed matvec.
  StepProgram few = program_of(kTrialMinLayers - 1, r8x2(), s);
  EXPECT_TRUE(KernelTrials({entry(Op::AttnQ, r8x2(), s, {&r8x4()})}, few).trials().empty());
  StepProgram routed = program_of(8, r8x2(), s);
  routed.layers[3].q.outlier_kernel = &kernel("q4_K.cpu.scalar_f32");
  EXPECT_TRUE(KernelTrials({entry(Op::AttnQ, r8x2(), s, {&r8x4()})}, routed).trials().empty());
  // Another shape's matvecs are not this entry's.
  for (std::size_t l = 0; l < program.layers.size(); l += 2) program.layers[l].q.shape = Shape{512, 512};
  KernelTrials half({entry(Op::AttnQ, r8x2(), s, {&r8x4()})}, program);
  ASSERT_EQ(half.trials().size(), 1u);
  EXPECT_EQ(half.trials().front().layers, (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(half.trials().front().call_index, (std::vector<int>{1, 3, 5, 7}));
}

// Auto offers for a trial the kernels within kTrialReach of its pick that read the
// same weights, fastest first, at most kMaxTrialKernels.
TEST(KernelTrials, AutoOffersTheNearKernelsOnThePicksWeights) {
  std::mt19937 rng(fresh_seed());
  const std::string path = testing::tmp("trials-toy.gguf");
  const testing::CliRun made = testing::qmvlab(
      fmt::format("make-model --preset toy --mix q4_K --seed {} --out {}", fresh_seed("trials toy"), path));
  ASSERT_EQ(made.code, 0) << made.output;
  const LoadedModel m(path);
  const gguf::Tensor* wq = m.weights.layers[0].wq;
  const Shape q{static_cast<std::int64_t>(wq->dims[1]), static_cast<std::int64_t>(wq->dims[0])};
  const double pick_us = std::uniform_real_distribution<double>(50, 200)(rng);
  auto row = [&](const KernelSpec& k, double times_the_pick) {
    KernelSpeed r;
    r.kernel = k.name;
    r.weight_type = "q4_K";
    r.rows = q.rows;
    r.cols = q.cols;
    r.threads = 2;
    r.time_median_us = pick_us * times_the_pick;
    r.gbps_median = 1e3 / r.time_median_us;
    r.source = "test";
    return r;
  };
  const double inside = 1 + (kTrialReach - 1) * 0.5, outside = kTrialReach * 1.02;
  const std::vector<KernelSpeed> speeds = {row(r8x2(), 1.0), row(r8(), inside), row(plain(), 1.01),
                                           row(r8x4(), outside)};
  int tried = 0;
  for (const PlannedMatvec& p :
       resolve_plan(load_plan("q4_K=q4_K.cpu.scalar_q8k,q6_K=q6_K.cpu.scalar_q8k,attn_q.q4_K=auto,ffn_up_gate=none"),
                    m.weights, 2, speeds)) {
    if (p.op != Op::AttnQ) {
      EXPECT_TRUE(p.trial_kernels.empty()) << to_string(p.op) << ": named, not auto";
      continue;
    }
    ++tried;
    EXPECT_EQ(p.kernel, &r8x2());
    // The plain kernel is near but reads other weights; r8x4 is the same copy but too slow.
    EXPECT_EQ(p.trial_kernels, (std::vector<const KernelSpec*>{&r8()}));
  }
  EXPECT_EQ(tried, 1);
}

// On a real forward: the tried kernels share the pick's prepared copy (no matrix is
// made twice), every trial ends, and the logits are the untried forward's within what
// the kernels' order of arithmetic allows.
TEST(KernelTrials, TryingKernelsInTheForwardSharesTheCopyAndKeepsTheLogits) {
  if (missing_cpu_features(r8x2().cpu_features) != 0) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  std::mt19937 rng(fresh_seed());
  const std::string path = testing::tmp("trials-6-layers.gguf");
  const testing::CliRun made = testing::qmvlab(fmt::format(
      "make-model --preset toy --layers 6 --mix q4_K --seed {} --out {}", fresh_seed("trials 6 layers"), path));
  ASSERT_EQ(made.code, 0) << made.output;
  const LoadedModel m(path);
  // Enough steps for q's, k's and v's trials in turn: three candidates on six layers.
  std::vector<int> tokens(24);
  for (int& t : tokens) t = std::uniform_int_distribution<int>(0, m.config.vocab_size - 1)(rng);
  auto planned = resolve_plan(load_plan("q4_K=q4_K.cpu.avx2_r8x2_q8k,ffn_up_gate=none"), m.weights, 2);
  for (PlannedMatvec& p : planned)
    if (p.kernel == &r8x2()) p.trial_kernels = {&r8x4(), &r8()};
  auto run = [&](CpuForward& fwd) {
    std::vector<float> all;
    for (const int t : tokens) {
      const auto l = fwd.step(t);
      all.insert(all.end(), l.begin(), l.end());
    }
    return all;
  };
  const int context = static_cast<int>(tokens.size());
  CpuForward untried(m.config, m.weights, planned, 2, context), tried(m.config, m.weights, planned, 2, context);
  tried.set_kernel_trials(true);
  const std::vector<float> reference = run(untried), with_trials = run(tried);
  ASSERT_FALSE(tried.kernel_trials().trials().empty());
  EXPECT_TRUE(untried.kernel_trials().trials().front().candidates.front().seconds.empty()) << "off by default";
  for (const KernelTrials::Trial& t : tried.kernel_trials().trials()) {
    EXPECT_GE(t.winner, 0) << to_string(t.part);
    EXPECT_FALSE(t.abandoned) << to_string(t.part);
    for (const KernelTrials::Candidate& c : t.candidates)
      EXPECT_GE(static_cast<int>(c.seconds.size()), kTrialCalls) << to_string(t.part) << " " << c.kernel->name;
  }
  EXPECT_GT(untried.prepared_matrices(), 0);
  EXPECT_EQ(tried.prepared_matrices(), untried.prepared_matrices());
  EXPECT_EQ(tried.prepared_bytes(), untried.prepared_bytes());
  EXPECT_EQ(tried.prepared_bytes(), tried.weight_repack().bytes);
  // The same Q8_K arithmetic in another order: within what the int8 activations
  // themselves lose against f32 ones.
  const auto f32_plan = resolve_plan(load_plan("q4_K=q4_K.cpu.scalar_f32,ffn_up_gate=none"), m.weights, 2);
  CpuForward f32(m.config, m.weights, f32_plan, 2, context);
  const std::vector<float> exact = run(f32);
  EXPECT_LE(nmse(with_trials, reference), nmse(reference, exact));
  EXPECT_GT(nmse(reference, exact), 0.0);
}

// `decode` tries the near kernels a bench CSV ranks within reach and reports them: a
// table, the plan's kept kernels and the JSON's trials; --no-trials runs the picks.
TEST(KernelTrials, DecodeReportsItsTrialsAndNoTrialsRunsThePicks) {
  if (missing_cpu_features(r8x2().cpu_features | r8x4().cpu_features) != 0)
    GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  const std::string model = testing::tmp("trials-decode.gguf");
  const testing::CliRun made = testing::qmvlab(fmt::format(
      "make-model --preset toy --layers 6 --mix q4_K --seed {} --out {}", fresh_seed("trials decode"), model));
  ASSERT_EQ(made.code, 0) << made.output;
  // Every Q4_K shape of the model: r8x2 fastest, r8x4 within reach (same copy).
  const LoadedModel m(model);
  std::set<std::pair<std::int64_t, std::int64_t>> shapes;
  for (const LayerWeights& l : m.weights.layers)
    for (const gguf::Tensor* t : {l.wq, l.wk, l.wv, l.wo, l.ffn_gate, l.ffn_up, l.ffn_down})
      shapes.insert({static_cast<std::int64_t>(t->dims[1]), static_cast<std::int64_t>(t->dims[0])});
  const std::string csv = testing::tmp("trials-bench.csv");
  {
    CsvWriter out(csv, bench_header(), false);
    const RunContext ctx = current_context("test");
    for (const auto& [rows, cols] : shapes)
      for (const auto& [k, us] : {std::pair{&r8x2(), 10.0}, std::pair{&r8x4(), 10.3}}) {
        BenchRow r;
        r.kernel = k->name;
        r.op = "matvec";
        r.weight_type = "q4_K";
        r.act_format = "q8_K";
        r.backend = "cpu";
        r.rows = rows;
        r.cols = cols;
        r.threads = 2;
        r.cache = "cold";
        r.repetitions = 3;
        r.time_min_us = r.time_median_us = r.time_max_us = us;
        r.bytes_per_call = 1000;
        r.gbps_median = r.gbps_best = 1e3 / (us * 1e3);
        out.write(bench_fields(ctx, r));
      }
  }
  auto decode = [&](const std::string& extra) {
    const std::string json = testing::tmp("trials-decode.json");
    std::filesystem::remove(json);
    const testing::CliRun r = testing::qmvlab(
        fmt::format("decode --model {} --bench-csv {} --threads 2 --prompt-tokens 1,2,3 -n 40 --ignore-eos --quiet "
                    "--no-peak --json {} {}",
                    model, csv, json, extra));
    EXPECT_EQ(r.code, 0) << r.output;
    std::ifstream in(json);
    return std::pair{r.output, nlohmann::json::parse(in, nullptr, false)};
  };
  const auto [tried_out, tried] = decode("");
  EXPECT_NE(tried_out.find("trials in the run: "), std::string::npos) << tried_out;
  ASSERT_TRUE(tried.contains("trials")) << tried_out;
  ASSERT_FALSE(tried["trials"].empty()) << tried_out;
  for (const auto& t : tried["trials"]) {
    EXPECT_TRUE(t["ended"].get<bool>()) << t.dump();
    ASSERT_EQ(t["candidates"].size(), 2u) << t.dump();
    EXPECT_EQ(t["candidates"][0]["kernel"], r8x2().name);
    EXPECT_EQ(t["candidates"][1]["kernel"], r8x4().name);
    EXPECT_TRUE(t["kept"] == r8x2().name || t["kept"] == r8x4().name) << t.dump();
    const std::string rule = fmt::format("{}.q4_K={}", t["op"].get<std::string>(), t["kept"].get<std::string>());
    EXPECT_NE(tried["plan_kernels"].get<std::string>().find(rule), std::string::npos) << rule;
  }
  const auto [picks_out, picks] = decode("--no-trials");
  EXPECT_EQ(picks_out.find("trials in the run"), std::string::npos) << picks_out;
  EXPECT_FALSE(picks.contains("trials"));
  EXPECT_EQ(picks["plan_kernels"].get<std::string>().find(r8x4().name), std::string::npos) << "the picks are r8x2";
  EXPECT_EQ(testing::qmvlab(fmt::format("decode --model {} --no-trials=maybe", model)).code, 2);
}

}  // namespace
}  // namespace qmv
