// `qmvlab decode --batch B`: B sequences from one prompt, each sampled with its own
// seed, reported together; what it refuses.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <tuple>

#include "harness/auto_plan.h"
#include "harness/peak.h"
#include "harness/tuning_store.h"
#include "kernels/registry.h"
#include "model/batch_forward.h"
#include "tests/cli_run.h"
#include "tests/scoped_env.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

using testing::CliRun;
using testing::expect_error;
using testing::qmvlab;
using testing::tmp;

std::string toy_model() {
  static const std::string path = [] {
    const std::string p = tmp("batch-toy.gguf");
    const CliRun r = qmvlab(fmt::format("make-model --preset toy --arch llama --mix q4_K_m --seed {} --out {}",
                                        testing::fresh_seed("toy model"), p));
    EXPECT_EQ(r.code, 0) << r.output;
    return p;
  }();
  return path;
}

nlohmann::json batch_json(const std::string& args) {
  const std::string json = tmp("batch.json");
  std::filesystem::remove(json);
  const CliRun r = qmvlab("decode --model " + toy_model() + " --prompt-tokens 256,40,41 --ignore-eos --quiet "
                          "--no-peak --no-tune --threads 2 --json " + json + " " + args);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("tok/s in all"), std::string::npos) << r.output;
  std::ifstream in(json);
  return nlohmann::json::parse(in, nullptr, false);
}

TEST(DecodeBatchCli, EverySequenceGetsItsTokensAndTheRunIsCountedOnce) {
  const nlohmann::json j = batch_json("--batch 3 -n 6");
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["batch"], 3);
  ASSERT_EQ(j["generated_tokens"].size(), 3u);
  for (const auto& g : j["generated_tokens"]) EXPECT_EQ(g.size(), 6u);
  EXPECT_EQ(j["decode_steps"], 5);  // the first token of each comes with the prompt
  EXPECT_EQ(j["decoded_tokens"], 15);
  const double s = j["decode_s"].get<double>();
  ASSERT_GT(s, 0);
  EXPECT_NEAR(j["decode_tok_s"].get<double>(), 15 / s, 1e-9 * 15 / s);
  EXPECT_NEAR(j["decode_tok_s_per_sequence"].get<double>(), 5 / s, 1e-9 * 5 / s);
  // Greedy from one prompt: the sequences are alike.
  EXPECT_EQ(j["generated_tokens"][0], j["generated_tokens"][1]);
  EXPECT_EQ(j["generated_tokens"][0], j["generated_tokens"][2]);
  // Every matvec of the plan names a kernel, and some are batch kernels.
  int batch_kernels = 0;
  for (const auto& p : j["plan"]) {
    EXPECT_FALSE(p["kernel"].get<std::string>().empty()) << p;
    batch_kernels += p["why"].get<std::string>().find("batch of 3") != std::string::npos ||
                     p["kernel"].get<std::string>().find("batch") != std::string::npos;
  }
  EXPECT_GT(batch_kernels, 0) << j["plan"];
}

TEST(DecodeBatchCli, EachSequenceSamplesWithItsOwnSeed) {
  const nlohmann::json j = batch_json("--batch 2 -n 10 --temperature 1.5 --seed 7");
  ASSERT_FALSE(j.is_discarded());
  ASSERT_EQ(j["generated_tokens"].size(), 2u);
  // Ten draws at temperature 1.5 from a near-flat distribution: two seeds agreeing
  // everywhere would mean the seed is shared.
  EXPECT_NE(j["generated_tokens"][0], j["generated_tokens"][1]);
  // The same seeds again, the same tokens.
  EXPECT_EQ(batch_json("--batch 2 -n 10 --temperature 1.5 --seed 7")["generated_tokens"], j["generated_tokens"]);
}

// A store row as a bench run on this machine writes it: `kernel` at `n` vectors per call.
TuningRow store_row(const KernelSpec& k, Shape s, int n, double time_us, int threads, const std::string& cache) {
  BenchRow b;
  b.kernel = k.name;
  b.op = std::string(to_string(k.op));
  b.weight_type = std::string(to_string(k.weight));
  b.backend = "cpu";
  b.rows = s.rows;
  b.cols = s.cols;
  b.threads = threads;
  b.cache = cache;
  b.repetitions = 3;
  b.n = n;
  b.time_median_us = time_us;
  b.gbps_median = static_cast<double>(bytes_moved(k, s, n)) / (time_us * 1e3);
  b.rotation_bytes = cache == "cold" ? static_cast<std::int64_t>(cold_rotation_bytes()) : 0;
  return tuning_row(b, "test");
}

using PlanKey = std::tuple<std::string, std::string, std::string>;  // op, weight type, shape
std::map<PlanKey, nlohmann::json> plan_by_matvec(const nlohmann::json& j) {
  std::map<PlanKey, nlohmann::json> out;
  for (const auto& p : j["plan"]) out[{p["op"], p["weight_type"], p["shape"]}] = p;
  return out;
}

TEST(DecodeBatchCli, AutoTakesTheBatchKernelTheStoreSaysIsFastestAndStaticKeepsItsOrder) {
  const LoadedModel m(toy_model());
  const int threads = 2, batch = 2;
  KernelPlan fixed_rules = KernelPlan::static_order();
  fixed_rules.set("ffn_up_gate", "*", "none");
  const auto fixed = batch_plan(resolve_plan(fixed_rules, m.weights, threads), batch);
  // For each matvec, a batch kernel other than the static order's made the fastest way
  // to run its two vectors; the one-vector kernels twice, and the other batch kernels, slower.
  std::mt19937_64 rng(testing::fresh_seed("batch store times"));
  const double one_us = std::uniform_real_distribution<double>(5, 500)(rng);
  const std::string cache = model_cache_state(m.weights);
  std::vector<TuningRow> rows;
  std::map<PlanKey, std::string> fastest;
  for (const AutoMatvec& a : auto_matvecs(KernelPlan::parse_rules("ffn_up_gate=none"), m.weights)) {
    for (const KernelSpec* k : auto_candidates(a, Backend::CPU)) rows.push_back(store_row(*k, a.shape, 1, one_us, threads, cache));
    const auto batch_kernels = auto_candidates(a, Backend::CPU, batch);
    const auto static_choice = std::find_if(fixed.begin(), fixed.end(), [&](const PlannedMatvec& p) {
      return p.weight == a.weight && p.shape == a.shape;
    });
    ASSERT_NE(static_choice, fixed.end());
    const KernelSpec* chosen = nullptr;
    for (const KernelSpec* k : batch_kernels)
      if (!chosen && k != static_choice->kernel) chosen = k;
    for (const KernelSpec* k : batch_kernels)
      rows.push_back(store_row(*k, a.shape, batch, (k == chosen ? 0.6 : 1.5) * one_us, threads, cache));
    if (chosen)
      for (const Op op : a.ops) fastest[{std::string(to_string(op)), std::string(to_string(a.weight)), to_string(a.shape)}] = chosen->name;
  }
  if (fastest.empty()) GTEST_SKIP() << "no matvec of the toy model has two batch kernels that run here";
  const std::string store = tmp("batch-store.csv");
  std::filesystem::remove(store);
  ASSERT_EQ(TuningStore(store).add(rows), "");
  const testing::ScopedEnv env({{"QMV_TUNING_STORE", store}});

  const nlohmann::json tuned = batch_json(fmt::format("--batch {} -n 3", batch));
  ASSERT_FALSE(tuned.is_discarded());
  const auto planned = plan_by_matvec(tuned);
  for (const auto& [key, kernel] : fastest) {
    SCOPED_TRACE(std::get<0>(key) + " " + std::get<2>(key));
    ASSERT_EQ(planned.count(key), 1u);
    EXPECT_EQ(planned.at(key)["kernel"], kernel);
    EXPECT_EQ(planned.at(key)["source"].get<std::string>().rfind("store, ", 0), 0u) << planned.at(key);
    EXPECT_FALSE(planned.at(key)["runner_up"].get<std::string>().empty());
  }
  ASSERT_EQ(tuned["tuning"].size(), 2u);
  EXPECT_EQ(tuned["tuning"][1]["n"], batch);
  EXPECT_EQ(tuned["tuning"][1]["from_store"], tuned["tuning"][1]["matvecs"]);

  // The fixed order, whatever the store says.
  const nlohmann::json kept = batch_json(fmt::format("--batch {} -n 3 --plan static", batch));
  ASSERT_FALSE(kept.is_discarded());
  const auto kept_plan = plan_by_matvec(kept);
  for (const PlannedMatvec& p : fixed) {
    const PlanKey key{std::string(to_string(p.op)), std::string(to_string(p.weight)), to_string(p.shape)};
    ASSERT_EQ(kept_plan.count(key), 1u);
    EXPECT_EQ(kept_plan.at(key)["kernel"], p.kernel->name);
    EXPECT_EQ(kept_plan.at(key)["source"].get<std::string>().find("store"), std::string::npos) << kept_plan.at(key);
  }
}

TEST(DecodeBatchCli, TheSecondRunOfAModelAndBatchMeasuresNothing) {
  const std::string store = tmp("batch-tuning.csv");
  std::filesystem::remove(store);
  const testing::ScopedEnv env({{"QMV_TUNING_STORE", store}});
  const std::string json = tmp("batch-tuning.json");
  const std::string args = "decode --model " + toy_model() +
                           " --prompt-tokens 256,40 -n 3 --ignore-eos --quiet --no-peak --threads 2 --batch 2 "
                           "--tune-time 0.002 --json " + json;
  const CliRun first = qmvlab(args);
  ASSERT_EQ(first.code, 0) << first.output;
  EXPECT_NE(first.output.find("auto: timing"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("matvec_batch (n = 2) kernel(s)"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("| measured now"), std::string::npos) << first.output;
  int batch_rows = 0;
  for (const TuningRow& r : TuningStore(store).read_all()) batch_rows += r.n == 2 && r.op == "matvec_batch";
  EXPECT_GT(batch_rows, 0);

  const CliRun second = qmvlab(args);
  ASSERT_EQ(second.code, 0) << second.output;
  EXPECT_EQ(second.output.find("auto: timing"), std::string::npos) << second.output;
  // The one-vector plan's figures and the batch kernels', both from the store.
  EXPECT_EQ(testing::count_lines(second.output, "; nothing timed"), 2) << second.output;
  EXPECT_EQ(second.output.find("measured now"), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("| store, "), std::string::npos) << second.output;
  std::ifstream in(json);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  ASSERT_FALSE(j.is_discarded());
  ASSERT_EQ(j["tuning"].size(), 2u);
  for (const auto& t : j["tuning"]) EXPECT_EQ(t["measured"], 0) << t;
  EXPECT_EQ(j["tuning"][1]["n"], 2);
  EXPECT_GT(j["tuning"][1]["from_store"].get<int>(), 0);
}

TEST(DecodeBatchCli, WhatItCannotDoIsOneClearLine) {
  const std::string base = "decode --model " + toy_model() + " --prompt-tokens 256,40 -n 3 --no-peak --no-tune ";
  EXPECT_EQ(qmvlab(base + "--batch 9").code, 2);
  EXPECT_EQ(qmvlab(base + "--batch 0").code, 2);
  expect_error(base + "--batch 2 --device cuda", "--batch runs on the CPU");
  expect_error(base + "--batch 2 --out " + tmp("batch.csv"), "--batch writes --json, not --out");
  expect_error(base + "--batch 2 --route-outliers", "--batch does not route outliers");
}

}  // namespace
}  // namespace qmv
