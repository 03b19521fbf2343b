// The CPU forward pass and `qmvlab decode` / `qmvlab logits` on synthetic models made
// by `qmvlab make-model` (fresh seeds). The logits themselves are checked against the
// float64 reference in tests/forward_reference_test.py; here: invariants of the
// forward pass (threads, plans, repeat runs), the decode loop and its outputs, and
// the errors.
#include <algorithm>
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cmath>
#include <filesystem>
#include <cstring>
#include <map>
#include <fstream>
#include <random>
#include <sstream>

#include "harness/cli/decode_cuda.h"
#include "harness/csv.h"
#include "harness/fccp.h"
#include "harness/tune.h"
#include "harness/tuning_store.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/gguf.h"
#include "kernels/cpu/row_interleaved.h"
#include "kernels/cpu_features.h"
#include "kernels/registry.h"
#include "model/plan.h"
#include "tests/cli_run.h"
#include "tests/scoped_env.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

using testing::CliRun;
using testing::expect_error;
using testing::qmvlab;
using testing::tmp;

using testing::fresh_seed;

// A toy model of `arch` and `mix`, made once per (arch, mix) in this process.
std::string toy_model(const std::string& arch, const std::string& mix) {
  static std::map<std::string, std::string> made;
  const std::string key = arch + "-" + mix;
  if (auto it = made.find(key); it != made.end()) return it->second;
  const std::string path = tmp("toy-" + key + ".gguf");
  const std::uint64_t seed = fresh_seed(("toy model " + key).c_str());
  const CliRun r = qmvlab(fmt::format("make-model --preset toy --arch {} --mix {} --seed {} --out {}", arch, mix,
                                      seed, path));
  EXPECT_EQ(r.code, 0) << r.output;
  return made[key] = path;
}


std::vector<int> random_tokens(int n, int vocab, std::mt19937& rng) {
  std::vector<int> t(n);
  for (int& x : t) x = std::uniform_int_distribution<int>(0, vocab - 1)(rng);
  return t;
}

std::vector<float> run_logits(const LoadedModel& m, const std::string& plan, int threads, const std::vector<int>& tokens) {
  const auto planned = resolve_plan(load_plan(plan), m.weights, threads);
  CpuForward fwd(m.config, m.weights, planned, threads, static_cast<int>(tokens.size()));
  std::vector<float> all;
  for (int t : tokens) {
    const auto l = fwd.step(t);
    all.insert(all.end(), l.begin(), l.end());
  }
  return all;
}

double nmse(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return num / den;
}

TEST(Forward, ThreadsDoNotChangeTheLogits) {
  std::mt19937 rng(fresh_seed());
  for (const char* arch : {"llama", "qwen2", "qwen3"}) {
    const LoadedModel m(toy_model(arch, "q4_K_m"));
    const auto tokens = random_tokens(9, m.config.vocab_size, rng);
    // Rows split differently over threads, but each row's arithmetic is the same.
    EXPECT_EQ(run_logits(m, "auto", 1, tokens), run_logits(m, "auto", 2, tokens)) << arch;
  }
}

// Call groups (CpuForward::set_call_groups) run q, k and v, and gate and up where they
// are two matvecs, in one parallel region: the logits of a region per matvec, bit for
// bit, and each group timed as one op that holds its matrices' bytes.
TEST(Forward, CallGroupsKeepTheLogitsAndCountAsOneOp) {
  std::mt19937 rng(fresh_seed());
  for (const char* arch : {"llama", "qwen2", "qwen3"})
    for (const char* plan : {"auto", "ffn_up_gate=none"}) {
      const LoadedModel m(toy_model(arch, "q4_K_m"));
      const auto tokens = random_tokens(5, m.config.vocab_size, rng);
      const auto planned = resolve_plan(load_plan(plan), m.weights, 2);
      const bool fused = std::string(plan) == "auto";
      const std::int64_t calls = static_cast<std::int64_t>(m.config.n_layers) * tokens.size();
      std::vector<float> logits[2];
      for (const bool grouped : {false, true}) {
        CpuForward fwd(m.config, m.weights, planned, 2, static_cast<int>(tokens.size()));
        fwd.set_call_groups(grouped);
        for (int t : tokens) {
          const auto l = fwd.step(t);
          logits[grouped].insert(logits[grouped].end(), l.begin(), l.end());
        }
        const std::string what = fmt::format("{} {} grouped {}", arch, plan, grouped);
        auto op_calls = [&](Op op) { return fwd.times().calls[static_cast<int>(op)]; };
        EXPECT_EQ(op_calls(Op::AttnQkv), grouped ? calls : 0) << what;
        EXPECT_EQ(op_calls(Op::AttnQ), grouped ? 0 : calls) << what;
        EXPECT_EQ(fwd.times().matvecs[static_cast<int>(Op::AttnQ)], calls) << what;
        EXPECT_EQ(op_calls(Op::FfnGate), grouped || fused ? 0 : calls) << what;
        EXPECT_EQ(op_calls(Op::FfnUpGate), grouped || fused ? calls : 0) << what;
        std::uint64_t qkv = 0, gate_up = 0;
        for (const auto& t : m.file.tensors()) {
          if (t.name.find("attn_q.weight") != std::string::npos || t.name.find("attn_k.weight") != std::string::npos ||
              t.name.find("attn_v.weight") != std::string::npos)
            qkv += t.bytes;
          if (t.name.find("ffn_gate.weight") != std::string::npos || t.name.find("ffn_up.weight") != std::string::npos)
            gate_up += t.bytes;
        }
        EXPECT_EQ(fwd.part_weight_bytes(Op::AttnQkv), grouped ? qkv : 0) << what;
        EXPECT_EQ(fwd.part_weight_bytes(Op::AttnQ) + fwd.part_weight_bytes(Op::AttnK) +
                      fwd.part_weight_bytes(Op::AttnV),
                  grouped ? 0 : qkv)
            << what;
        EXPECT_EQ(fwd.part_weight_bytes(Op::FfnUpGate), grouped || fused ? gate_up : 0) << what;
      }
      EXPECT_EQ(logits[0], logits[1]) << arch << " " << plan;
    }
  // One thread has no team to group calls on.
  const LoadedModel m(toy_model("llama", "q4_K_m"));
  CpuForward one(m.config, m.weights, resolve_plan(load_plan("auto"), m.weights, 1), 1, 2);
  one.step(1);
  EXPECT_EQ(one.times().calls[static_cast<int>(Op::AttnQkv)], 0);
  EXPECT_EQ(one.part_weight_bytes(Op::AttnQkv), 0u);
}

TEST(Forward, ResetReplaysTheSameLogits) {
  std::mt19937 rng(fresh_seed());
  const LoadedModel m(toy_model("llama", "q4_K_m"));
  const auto tokens = random_tokens(6, m.config.vocab_size, rng);
  const auto planned = resolve_plan(KernelPlan{}, m.weights, 2);
  CpuForward fwd(m.config, m.weights, planned, 2, 6);
  std::vector<std::vector<float>> first;
  for (int t : tokens) {
    const auto l = fwd.step(t);
    first.emplace_back(l.begin(), l.end());
  }
  fwd.reset();
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const auto l = fwd.step(tokens[i]);
    EXPECT_EQ(std::vector<float>(l.begin(), l.end()), first[i]) << "position " << i;
  }
}

TEST(Forward, KernelChoicesAgreeWithinTheirArithmetic) {
  std::mt19937 rng(fresh_seed());
  const LoadedModel m(toy_model("llama", "q4_K_m"));
  const auto tokens = random_tokens(8, m.config.vocab_size, rng);
  // Float activations: reference kernels against SIMD ones, only summation order differs.
  const auto scalar = run_logits(m, "q4_K=q4_K.cpu.scalar_f32,q6_K=q6_K.cpu.scalar_f32,ffn_up_gate=none", 2, tokens);
  const auto simd = run_logits(m, "q4_K=q4_K.cpu.avx2_f32,q6_K=q6_K.cpu.avx2_f32,ffn_up_gate=none", 2, tokens);
  EXPECT_LT(nmse(simd, scalar), 1e-10);
  // Int8 activations cost accuracy, but little on Gaussian data.
  const auto q8k = run_logits(m, "q4_K=q4_K.cpu.scalar_q8k,q6_K=q6_K.cpu.scalar_q8k", 2, tokens);
  const double loss = nmse(q8k, scalar);
  EXPECT_GT(loss, 0.0);
  EXPECT_LT(loss, 1e-2);
  // Q8_K activations: the integer reference against whatever auto picks (VNNI, fused).
  // Each matvec agrees to float rounding (~1e-6 of a row), but the next activation is
  // quantized again, and a value on a rounding boundary can land one step apart: two
  // int8 paths may differ by flips of that kind, never by more than int8 itself loses.
  const double between = nmse(run_logits(m, "auto", 2, tokens), q8k);
  EXPECT_LE(between, loss);
}

TEST(Forward, WeightsLoadedIntoWeightMemoryGiveTheMappedLogitsBitForBit) {
  std::mt19937 rng(fresh_seed());
  const std::string path = toy_model("llama", "q4_K_m");
  const LoadedModel mapped(path), loaded(path, gguf::Residence::Loaded);
  EXPECT_EQ(mapped.file.residence(), gguf::Residence::Mapped);
  ASSERT_EQ(loaded.file.residence(), gguf::Residence::Loaded);
  // A copy, not the mapping: the forward built on it reads other addresses.
  ASSERT_EQ(loaded.file.size(), mapped.file.size());
  EXPECT_NE(loaded.file.data(), mapped.file.data());
  EXPECT_EQ(std::memcmp(loaded.file.data(), mapped.file.data(), mapped.file.size()), 0);
  const auto tokens = random_tokens(6, mapped.config.vocab_size, rng);
  const std::string plan = "auto";
  EXPECT_EQ(run_logits(loaded, plan, 2, tokens), run_logits(mapped, plan, 2, tokens));
}

TEST(Forward, RepackedKernelsAreMadeAtLoadAndAgree) {
  const KernelSpec* r8 = global_registry().find("q4_K.cpu.avx2_r8x2_q8k");
  ASSERT_NE(r8, nullptr);
  if (missing_cpu_features(r8->cpu_features) != 0) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  std::mt19937 rng(fresh_seed());
  const LoadedModel m(toy_model("llama", "q4_K_m"));
  const auto tokens = random_tokens(8, m.config.vocab_size, rng);
  const std::string plain_plan = "q4_K=q4_K.cpu.scalar_q8k,q6_K=q6_K.cpu.scalar_q8k,ffn_up_gate=none";
  const std::string r8_plan = "q4_K=q4_K.cpu.avx2_r8x2_q8k,q6_K=q6_K.cpu.scalar_q8k,ffn_up_gate=none";
  // Every Q4_K matrix is repacked when the forward is built, none for the plain plan.
  const auto planned = resolve_plan(load_plan(r8_plan), m.weights, 2);
  int matrices = 0;
  std::uint64_t bytes = 0;
  for (const PlannedMatvec& p : planned)
    if (p.kernel == r8) {
      matrices += p.count;
      bytes += static_cast<std::uint64_t>(p.count) * ((p.shape.rows + 7) / 8) * (p.shape.cols / kSuperBlock) *
               sizeof(interleave::BlockQ4_Kx8);
    }
  ASSERT_GT(matrices, 0);
  const CpuForward repacked(m.config, m.weights, planned, 2, 8);
  EXPECT_EQ(repacked.weight_repack().matrices, matrices);
  EXPECT_EQ(repacked.weight_repack().bytes, bytes);
  EXPECT_GT(repacked.weight_repack().seconds, 0.0);
  const CpuForward plain(m.config, m.weights, resolve_plan(load_plan(plain_plan), m.weights, 2), 2, 8);
  EXPECT_EQ(plain.weight_repack().matrices, 0);
  // The same Q8_K arithmetic in another order: float rounding, and at most the rare
  // requantization flip it can cause, far below what int8 activations themselves lose.
  const auto scalar_f32 = run_logits(m, "q4_K=q4_K.cpu.scalar_f32,q6_K=q6_K.cpu.scalar_f32,ffn_up_gate=none", 2, tokens);
  const auto plain_q8k = run_logits(m, plain_plan, 2, tokens);
  EXPECT_LE(nmse(run_logits(m, r8_plan, 2, tokens), plain_q8k), nmse(plain_q8k, scalar_f32));
}

// The fused up+gate kernel on repacked pairs: each pair made once at load (two matrices
// per fused op), gate and up each from its own matrix, logits as the plain plan's.
TEST(Forward, FusedRepackedUpGateIsMadeAtLoadAndAgrees) {
  const KernelSpec* fused = global_registry().find("q4_K.cpu.avx2_r8_up_gate_q8k");
  ASSERT_NE(fused, nullptr);
  if (missing_cpu_features(fused->cpu_features) != 0) GTEST_SKIP() << "this CPU lacks AVX2/FMA/F16C";
  std::mt19937 rng(fresh_seed());
  const LoadedModel m(toy_model("llama", "q4_K_m"));
  const auto tokens = random_tokens(8, m.config.vocab_size, rng);
  const std::string plain_plan = "q4_K=q4_K.cpu.scalar_q8k,q6_K=q6_K.cpu.scalar_q8k,ffn_up_gate=none";
  const std::string fused_plan = plain_plan.substr(0, plain_plan.rfind(',')) + ",ffn_up_gate=" + fused->name;
  const auto planned = resolve_plan(load_plan(fused_plan), m.weights, 2);
  int matrices = 0;
  std::uint64_t bytes = 0;
  for (const PlannedMatvec& p : planned)
    if (p.kernel == fused) {
      matrices += 2 * p.count;
      bytes += 2ull * p.count * ((p.shape.rows + 7) / 8) * (p.shape.cols / kSuperBlock) * sizeof(interleave::BlockQ4_Kx8);
    }
  ASSERT_GT(matrices, 0) << "the toy model's gate and up are not Q4_K";
  const CpuForward repacked(m.config, m.weights, planned, 2, 8);
  EXPECT_EQ(repacked.weight_repack().matrices, matrices);
  EXPECT_EQ(repacked.weight_repack().bytes, bytes);
  const auto scalar_f32 = run_logits(m, "q4_K=q4_K.cpu.scalar_f32,q6_K=q6_K.cpu.scalar_f32,ffn_up_gate=none", 2, tokens);
  const auto plain_q8k = run_logits(m, plain_plan, 2, tokens);
  EXPECT_LE(nmse(run_logits(m, fused_plan, 2, tokens), plain_q8k), nmse(plain_q8k, scalar_f32));
}

TEST(Forward, ContextAndVocabularyBoundsAreErrors) {
  const LoadedModel m(toy_model("llama", "q8_0"));
  const auto planned = resolve_plan(KernelPlan{}, m.weights, 1);
  CpuForward fwd(m.config, m.weights, planned, 1, 3);
  EXPECT_THROW(fwd.step(m.config.vocab_size), std::out_of_range);
  EXPECT_THROW(fwd.step(-1), std::out_of_range);
  for (int i = 0; i < 3; ++i) fwd.step(i);
  EXPECT_THROW(fwd.step(0), ContextFull);
  EXPECT_EQ(fwd.position(), 3);
}

TEST(Forward, BytesPerTokenCountWeightsAndTheCache) {
  const LoadedModel m(toy_model("qwen2", "q4_K_m"));
  const auto planned = resolve_plan(KernelPlan{}, m.weights, 1);
  CpuForward fwd(m.config, m.weights, planned, 1, 16);
  std::uint64_t tensors = 0;
  for (const auto& t : m.file.tensors()) tensors += t.bytes;
  // Tied embeddings: the whole token_embd is read by lm_head, plus one row by the lookup.
  EXPECT_GT(fwd.weight_bytes(), tensors);
  EXPECT_LT(fwd.weight_bytes(), tensors + m.weights.token_embd->bytes / m.config.vocab_size + 1);
  const std::uint64_t kv_row = 2ull * m.config.n_layers * m.config.n_head_kv * m.config.head_dim * sizeof(float);
  EXPECT_EQ(fwd.bytes_per_token(9) - fwd.bytes_per_token(0), 9 * kv_row);
}

// The GPU decode's attention trial: the way of the shorter median step wins, a tie
// keeps the separate kernels, and a side without a timed step is an error.
TEST(GpuAttentionChoice, TheShorterMedianStepWins) {
  std::mt19937_64 g(qmv::testing::fresh_seed());
  std::uniform_real_distribution<double> ms(1.0, 5.0);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<double> separate(12), fused(12);
    for (double& t : separate) t = ms(g);
    for (double& t : fused) t = ms(g);
    std::vector<double> a = separate, b = fused;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    const double median_separate = (a[5] + a[6]) / 2, median_fused = (b[5] + b[6]) / 2;
    const qmv::AttentionChoice c = qmv::choose_attention(separate, fused);
    EXPECT_TRUE(c.measured);
    EXPECT_EQ(c.fused, median_fused < median_separate);
    EXPECT_DOUBLE_EQ(c.separate_ms, median_separate);
    EXPECT_DOUBLE_EQ(c.fused_ms, median_fused);
    EXPECT_EQ(c.steps, 12);
    EXPECT_EQ(c.why.rfind(c.fused ? "fused, measured" : "separate, measured", 0), 0u) << c.why;
  }
  EXPECT_FALSE(qmv::choose_attention({2.0, 3.0}, {3.0, 2.0}).fused) << "a tie keeps the separate kernels";
  EXPECT_THROW(qmv::choose_attention({}, {1.0}), std::invalid_argument);
  EXPECT_THROW(qmv::choose_attention({1.0}, {}), std::invalid_argument);
}

// --fuse-attention and --no-fuse-attention together: one line, before anything loads.
TEST(DecodeCli, FuseAttentionAndItsOppositeAreRefusedTogether) {
  const CliRun r = qmvlab("decode --model " + toy_model("llama", "q8_0") +
                          " --device cuda --fuse-attention --no-fuse-attention -n 2");
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("excludes"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("model "), std::string::npos) << "loaded the model: " << r.output;
}

TEST(DecodeCli, FirstRunTunesTheSecondTimesNothing) {
  const std::string model = toy_model("llama", "q4_K_m");
  const std::string store = tmp("tuning-cli.csv");
  std::filesystem::remove(store);
  const testing::ScopedEnv env({{"QMV_TUNING_STORE", store}});
  const std::string args = "decode --model " + model + " --prompt-tokens 1,2 -n 4 --threads 1 --quiet --peak-gbps 20 --tune-time 0.002";
  // Told not to measure, an empty store leaves every matvec to the static order.
  const CliRun untuned = qmvlab(args + " --no-tune");
  ASSERT_EQ(untuned.code, 0) << untuned.output;
  EXPECT_EQ(untuned.output.find("auto: timing"), std::string::npos) << untuned.output;
  EXPECT_NE(untuned.output.find("unmeasured (static order)"), std::string::npos) << untuned.output;
  EXPECT_FALSE(std::filesystem::exists(store));

  const CliRun first = qmvlab(args);
  ASSERT_EQ(first.code, 0) << first.output;
  EXPECT_NE(first.output.find("auto: timing"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("| measured now"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find(store), std::string::npos) << first.output;
  ASSERT_TRUE(std::filesystem::exists(store));

  const CliRun second = qmvlab(args);
  ASSERT_EQ(second.code, 0) << second.output;
  EXPECT_EQ(second.output.find("auto: timing"), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("nothing timed"), std::string::npos) << second.output;
  EXPECT_NE(second.output.find("| store, "), std::string::npos) << second.output;
  EXPECT_EQ(second.output.find("| measured now"), std::string::npos) << second.output;

  // The fixed order, whatever the store says.
  const CliRun fixed = qmvlab(args + " --plan static");
  ASSERT_EQ(fixed.code, 0) << fixed.output;
  EXPECT_NE(fixed.output.find("plan static:"), std::string::npos) << fixed.output;
  EXPECT_NE(fixed.output.find("| static order"), std::string::npos) << fixed.output;
  EXPECT_EQ(fixed.output.find("| store, "), std::string::npos) << fixed.output;
}

nlohmann::json decode_json(const std::string& args);

TEST(DecodeCli, TheRooflineComesFromTheStoreOnceMeasured) {
  const std::string model = toy_model("llama", "q4_K_m");
  const std::string store = tmp("tuning-roofline.csv");
  std::filesystem::remove(store);
  const testing::ScopedEnv env({{"QMV_TUNING_STORE", store}});
  // A peak row as `qmvlab peak` keeps it: decode divides by it, and says so.
  ASSERT_EQ(TuningStore(store).add({peak_tuning_row(1, 12.5, "avx2.s4", 7, "peak")}), "");
  const CliRun r = qmvlab("decode --model " + model + " --prompt-tokens 1,2 -n 4 --threads 1 --quiet --no-tune");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("at 12.50 GB/s read bandwidth (avx2.s4 read loop median, from the tuning store"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("measuring the read bandwidth"), std::string::npos) << r.output;
  // A toy model's weights sit in the caches: nothing is read between its tokens, and
  // the stored figure stays the roofline, the same as the stored peak's line would say.
  EXPECT_EQ(r.output.find("over these weights between the tokens"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("stored read peak:"), std::string::npos) << r.output;
  const nlohmann::json j = decode_json("--model " + model + " --prompt-tokens 1,2 -n 4 --threads 1 --quiet --no-tune");
  EXPECT_DOUBLE_EQ(j["peak_gbps"].get<double>(), 12.5);
  EXPECT_DOUBLE_EQ(j["stored_peak_gbps"].get<double>(), 12.5);
  EXPECT_NE(j["peak_source"].get<std::string>().find("from the tuning store"), std::string::npos) << j.dump();
  EXPECT_FALSE(j.contains("read_between_passes")) << j.dump();
  EXPECT_FALSE(j.contains("read_speed_changes")) << j.dump();  // counted only where the read ran
  EXPECT_FALSE(j.contains("thread_round_trip_ns")) << j.dump();  // one thread hands nothing over
  // The share is the decode's bytes per second over the roofline's.
  const double expected = 100.0 * j["decode_tok_s"].get<double>() * j["bytes_per_token"].get<double>() / 12.5e9;
  EXPECT_NEAR(j["roofline_pct"].get<double>(), expected, 1e-6 * expected);
  EXPECT_NEAR(j["stored_peak_pct"].get<double>(), expected, 1e-6 * expected);
}

// Without the read between the tokens (no passes to time it after), two threads still
// time one round trip after the tokens: where the host had them (decode_ab.py's rounds).
TEST(DecodeCli, TwoThreadsTimeARoundTripWithoutTheReadBetweenTheTokens) {
  const std::string model = toy_model("llama", "q4_K_m");
  const std::string args = "--model " + model + " --prompt-tokens 1,2 -n 4 --threads 2 --quiet --no-peak --no-tune";
  const nlohmann::json j = decode_json(args);
  EXPECT_FALSE(j.contains("read_between_passes")) << j.dump();
  ASSERT_TRUE(j.contains("thread_round_trip_ns")) << j.dump();
  const double ns = j["thread_round_trip_ns"].get<double>();
  EXPECT_TRUE(std::isfinite(ns) && ns > 0) << ns;
  const CliRun r = qmvlab("decode " + args);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(" ns (after the tokens)"), std::string::npos) << r.output;
}

nlohmann::json decode_json(const std::string& args) {
  const std::string json = tmp("decode.json");
  std::filesystem::remove(json);
  const CliRun r = qmvlab("decode " + args + " --json " + json);
  EXPECT_EQ(r.code, 0) << r.output;
  std::ifstream in(json);
  EXPECT_TRUE(in.good()) << r.output;
  return nlohmann::json::parse(in, nullptr, false);
}

TEST(DecodeCli, StreamsTextAndReportsSpeedBreakdownAndPlan) {
  const std::string model = toy_model("llama", "q4_K_m");
  // --no-tune: no timing lines before the stream (FirstRunTunesTheSecondTimesNothing).
  const CliRun r = qmvlab("decode --model " + model + " --prompt 'Hello world' -n 12 --threads 2 --ignore-eos "
                          "--peak-gbps 20 --no-tune");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("Hello world", 0), 0u) << r.output;  // the prompt, then the stream
  for (const char* part : {"prompt: ", "decode: 11 tokens", "tok/s", "roofline:", "| attn_q ", "| ffn_down ",
                           "| lm_head ", "| attention ", "| total ", "plan *=auto"})
    EXPECT_NE(r.output.find(part), std::string::npos) << part << "\n" << r.output;
}

TEST(DecodeCli, JsonAndCsvRecordTheRun) {
  const std::string model = toy_model("qwen3", "q8_0");
  // One fixed plan for the two runs compared below (auto's may change as the store fills).
  const nlohmann::json j = decode_json("--model " + model + " --prompt-tokens 256,40,41,42 -n 7 --ignore-eos "
                                       "--no-peak --quiet --threads 1 --plan static");
  ASSERT_FALSE(j.is_discarded());
  EXPECT_EQ(j["prompt_tokens"], nlohmann::json({256, 40, 41, 42}));
  EXPECT_EQ(j["generated_tokens"].size(), 7u);
  EXPECT_EQ(j["decode_steps"], 6);
  EXPECT_GT(j["decode_tok_s"].get<double>(), 0.0);
  EXPECT_EQ(j["threads"], 1);
  EXPECT_EQ(j["weights_in"], "weight memory");  // the CPU's default
  EXPECT_GT(j["load_s"].get<double>(), 0.0);
  const nlohmann::json mapped = decode_json("--model " + model + " --prompt-tokens 256,40,41,42 -n 7 --ignore-eos "
                                            "--no-peak --quiet --threads 1 --mmap --plan static");
  EXPECT_EQ(mapped["weights_in"], "mapping");
  EXPECT_FALSE(mapped.contains("huge_page_pct"));
  EXPECT_EQ(mapped["generated_tokens"], j["generated_tokens"]);

  const std::string csv = tmp("decode.csv");
  std::filesystem::remove(csv);
  for (int i = 0; i < 2; ++i) {
    const CliRun r = qmvlab("decode --model " + model + " --prompt-tokens 256,50 -n 3 --ignore-eos --quiet "
                            "--peak-gbps 10 --no-tune --out " + csv);
    ASSERT_EQ(r.code, 0) << r.output;
  }
  std::ifstream in(csv);
  std::string header, row, last;
  std::getline(in, header);
  int rows = 0;
  for (; std::getline(in, row); ++rows) last = row;
  EXPECT_EQ(rows, 2);  // appended, one header
  for (const char* col : {"model", "plan", "threads", "decode_tok_s", "prompt_tok_s", "machine", "git_commit",
                          "roofline_pct", "device", "cuda_graph", "outlier_routed_calls"})
    EXPECT_NE(header.find(col), std::string::npos) << col;
  EXPECT_NE(last.find(",cpu,,,,"), std::string::npos) << "a CPU run without routing: " << last;
}

// One decode row's fields by column name (the header has no quoted names).
std::map<std::string, std::string> decode_row(const std::string& path, int row) {
  std::ifstream in(path);
  std::string header;
  std::getline(in, header);
  std::vector<std::string> names;
  for (std::stringstream ss(header); ss.good();) {
    std::string name;
    std::getline(ss, name, ',');
    names.push_back(name);
  }
  // fast-cpp-csv-parser reads a fixed column count: these are the ones asked for below.
  constexpr const char* kColumns[] = {"plan", "decode_ms_per_token", "op_timed_tokens", "attn_q_ms_per_token",
                                      "attn_qkv_ms_per_token", "ffn_up_gate_ms_per_token", "ffn_gate_ms_per_token",
                                      "ffn_up_ms_per_token", "lm_head_ms_per_token", "model"};
  io::CSVReader<std::size(kColumns), io::trim_chars<>, io::double_quote_escape<',', '"'>> reader(path);
  reader.read_header(io::ignore_extra_column, kColumns[0], kColumns[1], kColumns[2], kColumns[3], kColumns[4],
                     kColumns[5], kColumns[6], kColumns[7], kColumns[8], kColumns[9]);
  std::array<std::string, std::size(kColumns)> f;
  for (int i = 0; i <= row; ++i)
    if (!reader.read_row(f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9])) return {};
  std::map<std::string, std::string> out = {{"header", header}};
  for (std::size_t i = 0; i < f.size(); ++i) out[kColumns[i]] = f[i];
  return out;
}

// Each row carries its run's per-op times, so ops of one run can be set against each
// other in the file; a file from before those columns is widened, not refused.
TEST(DecodeCli, CsvRowsHoldEachOpsTimeAndAnOlderFileIsWidened) {
  const std::string model = toy_model("llama", "q8_0");
  const std::string run = "decode --model " + model + " --prompt-tokens 256,50 -n 6 --ignore-eos --quiet "
                          "--peak-gbps 10 --threads 1 --no-tune ";
  // A file in the columns decode wrote before the op times: today's header without them.
  const std::string fresh = tmp("decode-fresh.csv"), csv = tmp("decode-older.csv");
  std::filesystem::remove(fresh);
  ASSERT_EQ(qmvlab(run + "--out " + fresh).code, 0);
  const std::string header = decode_row(fresh, 0)["header"];
  std::string older;
  for (std::stringstream ss(header); ss.good();) {
    std::string name;
    std::getline(ss, name, ',');
    const bool op_time = name == "op_timed_tokens" || name.rfind("read_after_", 0) == 0 ||
                         name.rfind("stored_peak_", 0) == 0 || name == "roofline_source" ||
                         name == "read_speed_changes" || name == "thread_round_trip_ns" ||
                         name == "spell_roofline_pct" || name == "gpu_attention" ||
                         (name.find("_ms_per_token") != std::string::npos && name != "decode_ms_per_token");
    if (!op_time) older += (older.empty() ? "" : ",") + name;
  }
  ASSERT_EQ(older.find("op_timed_tokens"), std::string::npos);
  ASSERT_EQ(older.find("attn_q_ms_per_token"), std::string::npos);
  std::mt19937_64 g(qmv::testing::fresh_seed());
  const std::string marker = "older-model-" + std::to_string(g());
  {
    std::ofstream out(csv, std::ios::trunc);
    out << older << "\n";
    std::string row;
    for (std::stringstream ss(older); ss.good();) {
      std::string name;
      std::getline(ss, name, ',');
      row += (row.empty() ? "" : ",") + (name == "model" ? marker : name == "plan" ? "auto" : "1");
    }
    out << row << "\n";
  }
  const CliRun apart = qmvlab(run + "--plan ffn_up_gate=none --out " + csv);
  ASSERT_EQ(apart.code, 0) << apart.output;
  EXPECT_NE(apart.output.find("rewritten with the newer columns"), std::string::npos) << apart.output;
  const CliRun fused = qmvlab(run + "--plan ffn_up_gate=q8_0.cpu.avx2_r8x2_up_gate_q8_1 --out " + csv);
  const bool has_fused = fused.code == 0;
  if (!has_fused) {  // a CPU without AVX2 cannot run the fused kernel: the error says so
    EXPECT_NE(fused.output.find("avx2"), std::string::npos) << fused.output;
  }

  auto old_row = decode_row(csv, 0), none = decode_row(csv, 1);
  EXPECT_EQ(old_row["header"], header);
  EXPECT_EQ(old_row["model"], marker);
  for (const char* op : {"op_timed_tokens", "attn_q_ms_per_token", "ffn_gate_ms_per_token"})
    EXPECT_EQ(old_row[op], "") << op << ": an older row has no op times";
  auto positive = [](const std::string& field) { return !field.empty() && std::stod(field) > 0; };
  EXPECT_EQ(none["op_timed_tokens"], "5");  // the tokens after the first
  for (const char* op : {"attn_q_ms_per_token", "ffn_gate_ms_per_token", "ffn_up_ms_per_token", "lm_head_ms_per_token"})
    EXPECT_TRUE(positive(none[op])) << op << " = '" << none[op] << "'";
  for (const char* op : {"ffn_up_gate_ms_per_token", "attn_qkv_ms_per_token"})
    EXPECT_EQ(none[op], "") << op << ": not run by this plan";
  if (has_fused) {
    auto fused_row = decode_row(csv, 2);
    EXPECT_TRUE(positive(fused_row["ffn_up_gate_ms_per_token"])) << fused_row["ffn_up_gate_ms_per_token"];
    EXPECT_EQ(fused_row["ffn_gate_ms_per_token"], "");
    EXPECT_EQ(fused_row["ffn_up_ms_per_token"], "");
  } else {
    fmt::print("skipped the fused row: this CPU has no AVX2\n");
  }

  // The JSON holds the same times, and the ops run inside the timed decode.
  const nlohmann::json j = decode_json(run.substr(std::string("decode ").size()) + "--no-peak");
  ASSERT_TRUE(j.contains("op_ms_per_token")) << j.dump();
  EXPECT_EQ(j["op_timed_tokens"], 5);
  double sum = 0;
  for (const auto& [op, ms] : j["op_ms_per_token"].items()) {
    EXPECT_GE(ms.get<double>(), 0.0) << op;
    sum += ms.get<double>();
  }
  EXPECT_GT(sum, 0.0);
  EXPECT_LE(sum, 1e3 / j["decode_tok_s"].get<double>() * 1.000001);
}

TEST(DecodeCli, GreedyIsDeterministicAndSamplingFollowsTheSeed) {
  const std::string model = toy_model("llama", "q4_K_m");
  // One fixed plan: auto's choice may change between runs as the shared store fills.
  const std::string base =
      "--model " + model + " --prompt-tokens 256,72,105 -n 10 --ignore-eos --no-peak --quiet --plan static";
  EXPECT_EQ(decode_json(base)["generated_tokens"], decode_json(base + " --threads 1")["generated_tokens"]);
  const std::string sampled = base + " --temperature 1.5 --top-k 50 --top-p 0.95";
  EXPECT_EQ(decode_json(sampled + " --seed 7")["generated_tokens"],
            decode_json(sampled + " --seed 7")["generated_tokens"]);
  // Ten draws at temperature 1.5 from a near-flat distribution: two seeds agreeing
  // everywhere would mean the seed is ignored.
  EXPECT_NE(decode_json(sampled + " --seed 7")["generated_tokens"],
            decode_json(sampled + " --seed 8")["generated_tokens"]);
}

TEST(DecodeCli, LogitsWritesOneRowPerToken) {
  const std::string model = toy_model("qwen2", "q4_K_m");
  const std::string out = tmp("logits.npy");
  const CliRun r = qmvlab("logits --model " + model + " --tokens 256,1,2,3,4 --no-tune --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream in(out, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  ASSERT_GT(bytes.size(), 128u);
  EXPECT_EQ(bytes.substr(0, 6), "\x93NUMPY");
  const std::uint16_t header_len = static_cast<std::uint8_t>(bytes[8]) | (static_cast<std::uint8_t>(bytes[9]) << 8);
  EXPECT_NE(bytes.find("'shape': (5, 512)"), std::string::npos);
  EXPECT_EQ(bytes.size(), 10u + header_len + 5 * 512 * 4);
  for (std::size_t i = 10 + header_len; i < bytes.size(); i += 4) {
    float v;
    std::memcpy(&v, bytes.data() + i, 4);
    ASSERT_TRUE(std::isfinite(v)) << "logit " << (i - 10 - header_len) / 4;
  }
}

// A prompt from a file or standard input is the same prompt as on the command line,
// and one too long for a command line (a megabyte) is read whole.
TEST(DecodeCli, PromptFilesGiveTheSamePromptAsTheCommandLine) {
  const std::string model = toy_model("llama", "q4_K_m");
  std::mt19937 rng(fresh_seed("prompt text"));
  std::string text;
  for (int i = 0; i < 12; ++i) text += std::string(1, static_cast<char>('a' + rng() % 26)) + (i % 3 ? "" : " ");
  const std::string file = tmp("prompt.txt");
  std::ofstream(file) << text;
  auto prompt_of = [&](const std::string& how) {
    const std::string json = tmp("prompt.json");
    std::filesystem::remove(json);
    const CliRun r = qmvlab("decode --model " + model + " " + how + " -n 2 --ignore-eos --plan static --no-peak --quiet --json " +
                            json);
    EXPECT_EQ(r.code, 0) << how << "\n" << r.output;
    std::stringstream s;
    s << std::ifstream(json).rdbuf();
    const std::string j = s.str();
    const auto at = j.find("\"prompt_tokens\"");
    return at == std::string::npos ? std::string("none") : j.substr(at, j.find(']', at) - at);
  };
  const std::string inline_prompt = prompt_of("--prompt '" + text + "'");
  EXPECT_NE(inline_prompt, "none");
  EXPECT_EQ(prompt_of("--prompt-file " + file), inline_prompt);
  EXPECT_EQ(prompt_of("--prompt-file - < " + file), inline_prompt);
  // logits takes the same file: one row of logits per prompt token.
  const std::string npy = tmp("prompt.npy");
  const CliRun lg = qmvlab("logits --model " + model + " --prompt-file " + file + " --plan static --out " + npy);
  EXPECT_EQ(lg.code, 0) << lg.output;
  const std::size_t n_tokens = static_cast<std::size_t>(std::count(inline_prompt.begin(), inline_prompt.end(), ',')) + 1;
  EXPECT_NE(lg.output.find("(" + std::to_string(n_tokens) + " positions x "), std::string::npos) << lg.output;
  expect_error("logits --model " + model + " --out " + npy, "give --tokens IDS or --prompt-file PATH");
  // A megabyte of text through tokenize: every byte comes back.
  std::string big;
  while (big.size() < (1u << 20)) big += text;
  const std::string big_file = tmp("big-prompt.txt");
  std::ofstream(big_file) << big;
  const CliRun ids = qmvlab("tokenize --model " + model + " --ids --prompt-file " + big_file);
  EXPECT_EQ(ids.code, 0) << ids.output.substr(0, 300);
  EXPECT_GT(std::count(ids.output.begin(), ids.output.end(), ' '), 1000);
}

TEST(DecodeCli, ErrorsAreOneClearLine) {
  const std::string model = toy_model("llama", "q4_K_m");
  // The toy context is 256 positions.
  expect_error("decode --model " + model + " --prompt hi -n 300", "more than the model's context length of 256");
  expect_error("decode --model " + model + " --prompt hi -n 4 --plan attn_q=q4_K.cpu.nope", "no such kernel");
  expect_error("decode --model " + model + " --prompt hi -n 4 --plan ffn_down.q6_K=q4_K.cpu.scalar_f32",
               "ffn_down (q6_K 256x512) cannot use q4_K.cpu.scalar_f32: it reads q4_K weights");
  expect_error("decode --model " + model + " --prompt-tokens 1,99999 -n 4", "token id 99999 is outside the vocabulary");
  expect_error("decode --model " + model + " --prompt-tokens 1,x -n 4", "'x' is not a token id");
  expect_error("decode --model " + model + " -n 4", "give --prompt TEXT, --prompt-file PATH or --prompt-tokens IDS");
  expect_error("decode --model " + model + " --prompt '' -n 4", "--prompt is empty");
  expect_error("decode --model " + model + " --prompt hi -n 4 --context 2000000000",
               "--context 2000000000 is more than the model's context length of 256");
  expect_error("decode --model " + model + " --prompt \"$(printf 'a\\377b')\" -n 4", "--prompt: invalid UTF-8 at byte 1 (0xFF)");
  expect_error("decode --model " + model + " --prompt-file " + tmp("no-such-prompt") + " -n 4", "no such file");
  expect_error("decode --model " + model + " --prompt-file " + tmp("") + " -n 4", "is a directory");
  expect_error("decode --model " + model + " --prompt hi --top-p 0", "top");
  expect_error("decode --model /nonexistent.gguf --prompt hi", "/nonexistent.gguf");
  expect_error("logits --model " + model + " --tokens 1,2 --plan missing.toml --out " + tmp("x.npy"),
               "plan file 'missing.toml' not found");
}

}  // namespace
}  // namespace qmv

namespace qmv {
namespace {

TEST(TuneCli, WritesAPlanWithinTheBudgetThatDecodeTakes) {
  const std::string model = toy_model("qwen2", "q4_K_m");
  const std::string plan = tmp("tuned.toml");
  std::filesystem::remove(plan);
  // A store of its own with the machine's roofline in it: tune reads it instead of
  // taking the ten seconds a read peak takes (TheRooflineComesFromTheStoreOnceMeasured).
  const std::string store = tmp("tuning-tune-plan.csv");
  std::filesystem::remove(store);
  const testing::ScopedEnv env({{"QMV_TUNING_STORE", store}});
  ASSERT_EQ(TuningStore(store).add({peak_tuning_row(2, 12.5, "avx2.s4", 7, "peak")}), "");
  // A budget only float activations meet: every chosen kernel must read f32.
  const CliRun r = qmvlab("tune --model " + model + " --threads 2 --budget-nmse 1e-9 --reps 2 --min-time 0.002 "
                          "--decode-tokens 4 --rounds 2 --out " + plan);
  ASSERT_EQ(r.code, 0) << r.output;
  // Each round with the threads' round trip after each of its four runs.
  for (const char* round : {"round 1/2: default ", "round 2/2: default "}) {
    const std::size_t at = r.output.find(round);
    ASSERT_NE(at, std::string::npos) << r.output;
    const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
    EXPECT_NE(line.find("; threads "), std::string::npos) << line;
    EXPECT_NE(line.find(" ns"), std::string::npos) << line;
  }
  EXPECT_NE(r.output.find("the default plan reaches "), std::string::npos) << r.output;
  std::ifstream in(plan);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  int rules = 0;
  for (std::size_t at = text.find(" = \""); at != std::string::npos; at = text.find(" = \"", at + 1)) {
    const std::size_t end = text.find('"', at + 4);
    const std::string kernel = text.substr(at + 4, end - at - 4);
    if (kernel == "none") continue;
    ++rules;
    const KernelSpec* k = global_registry().find(kernel);
    ASSERT_NE(k, nullptr) << kernel;
    EXPECT_EQ(k->act, ActFormat::F32) << kernel << " is outside a 1e-9 budget";
  }
  EXPECT_GE(rules, 8);  // attn_q/k/v/out, gate, up, down for q4_K; attn_v/ffn_down/lm_head for q6_K
  const CliRun d = qmvlab("decode --model " + model + " --prompt hi -n 3 --quiet --no-peak --plan " + plan);
  EXPECT_EQ(d.code, 0) << d.output;
}

TEST(TuneCli, SharesOfThePeakAreOfTheStoredRoofline) {
  const std::string model = toy_model("llama", "q4_K_m");
  const std::string store = tmp("tuning-tune-roofline.csv");
  std::filesystem::remove(store);
  const testing::ScopedEnv env({{"QMV_TUNING_STORE", store}});
  ASSERT_EQ(TuningStore(store).add({peak_tuning_row(1, 12.5, "avx2.s4", 7, "peak")}), "");
  const CliRun r = qmvlab("tune --model " + model + " --threads 1 --reps 2 --min-time 0.002 --no-decode --out " +
                          tmp("tuned-roofline.toml"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("12.50 GB/s (avx2.s4 read loop median, from the tuning store"), std::string::npos)
      << r.output;
  // Every timed row's share: its GB/s over those 12.5, to the table's rounding.
  int rows = 0;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> cells;
    std::istringstream cols(line);
    for (std::string c; std::getline(cols, c, '|');) cells.push_back(c);
    if (cells.size() < 11 || cells[10].find('%') == std::string::npos) continue;
    const double gbps = std::stod(cells[9]), pct = std::stod(cells[10]);
    EXPECT_NEAR(pct, 100 * gbps / 12.5, 0.5 + 100 * 0.005 / 12.5) << line;
    ++rows;
  }
  EXPECT_GT(rows, 8) << r.output;
}

// A host whose speed drifts steadily through each round, and jumps between rounds:
// every round's ratio is the plans' true one, which the ratio of their medians is not.
TEST(TuneRounds, TheDefaultsShareIsTheMedianOfEachRoundsRatio) {
  std::mt19937_64 g(testing::fresh_seed());
  std::uniform_real_distribution<double> speed(20, 90), slope(-0.1, 0.1), truth(0.8, 1.2);
  const double ratio = truth(g);
  std::vector<PlanRound> rounds(5);
  for (PlanRound& r : rounds) {
    const double tuned = speed(g), drift = slope(g);
    // Runs at times 0, 1, 2, 3 of the round: default, tuned, tuned, default.
    r.default_tok_s[0] = ratio * tuned;
    r.tuned_tok_s[0] = tuned * (1 + drift);
    r.tuned_tok_s[1] = tuned * (1 + 2 * drift);
    r.default_tok_s[1] = ratio * tuned * (1 + 3 * drift);
    EXPECT_NEAR(r.default_over_tuned(), ratio, 1e-12);
  }
  EXPECT_NEAR(default_share_of_tuned(rounds), ratio, 1e-12);
  // Odd and even counts: the middle one, or the mean of the middle two.
  std::vector<PlanRound> three(3);
  const double shares[] = {1.1, 0.9, 1.0};
  for (int i = 0; i < 3; ++i) {
    three[i].tuned_tok_s[0] = three[i].tuned_tok_s[1] = speed(g);
    three[i].default_tok_s[0] = three[i].default_tok_s[1] = shares[i] * three[i].tuned_tok_s[0];
  }
  EXPECT_NEAR(default_share_of_tuned(three), 1.0, 1e-12);
  three.pop_back();
  EXPECT_NEAR(default_share_of_tuned(three), 1.0, 1e-12);
  EXPECT_EQ(default_share_of_tuned({}), 0);
}

// A host that moves the threads within a round: that round's ratio is the move's, not
// the plans', and the share leaves it out while other rounds met one placement.
TEST(TuneRounds, RoundsThatMetTwoPlacementsAreLeftOut) {
  std::mt19937_64 g(testing::fresh_seed());
  std::uniform_real_distribution<double> speed(20, 90), truth(0.9, 1.1), near(55, 70), far(300, 420);
  const double ratio = truth(g);
  auto steady = [&](double round_trip) {
    PlanRound r;
    const double tuned = speed(g);
    r.tuned_tok_s[0] = r.tuned_tok_s[1] = tuned;
    r.default_tok_s[0] = r.default_tok_s[1] = ratio * tuned;
    for (double& ns : r.round_trip_ns) ns = round_trip * (1 + 0.1 * std::generate_canonical<double, 32>(g));
    return r;
  };
  // Apart for the default's runs, sharing a cache, 1.6x slower, for the tuned plan's.
  auto moved = [&] {
    PlanRound r = steady(near(g));
    r.round_trip_ns[0] = r.round_trip_ns[3] = far(g);
    for (double& t : r.default_tok_s) t *= 1.6;
    return r;
  };
  std::vector<PlanRound> rounds = {moved(), steady(near(g)), moved(), steady(far(g)), moved()};
  std::shuffle(rounds.begin(), rounds.end(), g);
  EXPECT_EQ(rounds_to_weigh(rounds).size(), 2u);
  EXPECT_NEAR(default_share_of_tuned(rounds), ratio, 1e-12);
  // None met one placement: the median of them all, the moves included.
  const std::vector<PlanRound> all_moved = {moved(), moved(), moved()};
  EXPECT_EQ(rounds_to_weigh(all_moved).size(), 3u);
  EXPECT_NEAR(default_share_of_tuned(all_moved), 1.6 * ratio, 1e-12);
  // Untimed round trips (one thread) leave every round in.
  std::vector<PlanRound> untimed = rounds;
  for (PlanRound& r : untimed) std::fill(std::begin(r.round_trip_ns), std::end(r.round_trip_ns), 0.0);
  EXPECT_EQ(rounds_to_weigh(untimed).size(), untimed.size());
  EXPECT_NEAR(default_share_of_tuned(untimed), 1.6 * ratio, 1e-12);
}

TEST(TuneCli, RefusesWhatCannotBeTuned) {
  const std::string model = toy_model("llama", "q4_K_m");
  // Found after the check has run: progress lines, then the one error line.
  const CliRun r = qmvlab("tune --model " + model + " --kernels 'q4_K.cpu.scalar_q8k,q6_K.*' --budget-nmse 1e-9 "
                          "--no-decode --reps 1 --min-time 0.002 --out " + tmp("never.toml"));
  EXPECT_EQ(r.code, 2) << r.output;
  const std::string last = r.output.substr(r.output.rfind('\n', r.output.size() - 2) + 1);
  EXPECT_NE(last.find("qmvlab: tune: no kernel for attn_q (q4_K 256x256) stays within NMSE 1.0e-09"), std::string::npos)
      << r.output;
  expect_error("tune --model " + model + " --kernels 'q6_K.*' --no-decode --out " + tmp("never.toml"),
               "no kernel selected by 'q6_K.*' can run attn_q");
}

}  // namespace
}  // namespace qmv
