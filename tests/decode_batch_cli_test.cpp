// `qmvlab decode --batch B`: B sequences from one prompt, each sampled with its own
// seed, reported together; what it refuses.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/cli_run.h"
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
