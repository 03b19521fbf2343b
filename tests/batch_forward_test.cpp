// The batch decode (model/batch_forward.h): B sequences stepped together give each
// sequence the logits it gets decoded alone, token by token, on the same model; the
// batch plan puts every matvec on a batch kernel where there is one.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kernels/registry.h"
#include "model/batch_forward.h"
#include "model/forward.h"
#include "tests/forward_cuda_testing.h"
#include "tests/test_seed.h"

namespace qmv {
namespace {

using testing::fresh_seed;

std::vector<std::vector<int>> random_sequences(int batch, int length, int vocab) {
  std::mt19937 rng(static_cast<unsigned>(fresh_seed("tokens")));
  std::vector<std::vector<int>> seqs(static_cast<std::size_t>(batch), std::vector<int>(static_cast<std::size_t>(length)));
  for (auto& s : seqs)
    for (int& t : s) t = std::uniform_int_distribution<int>(0, vocab - 1)(rng);
  return seqs;
}

// Each sequence decoded alone by the one-sequence forward, on `plan`.
std::vector<std::vector<float>> alone(const LoadedModel& m, const std::vector<PlannedMatvec>& plan,
                                      const std::vector<std::vector<int>>& seqs) {
  std::vector<std::vector<float>> out;
  for (const auto& s : seqs) {
    CpuForward fwd(m, plan, 2, static_cast<int>(s.size()));
    std::vector<float> all;
    for (int t : s) {
      const auto l = fwd.step(t);
      all.insert(all.end(), l.begin(), l.end());
    }
    out.push_back(std::move(all));
  }
  return out;
}

// The same sequences stepped together: sequence b's logits of every step.
std::vector<std::vector<float>> together(const LoadedModel& m, const std::vector<PlannedMatvec>& plan,
                                         const std::vector<std::vector<int>>& seqs) {
  const int batch = static_cast<int>(seqs.size()), length = static_cast<int>(seqs[0].size());
  const int vocab = m.config.vocab_size;
  BatchCpuForward fwd(m, plan, batch, 2, length);
  std::vector<std::vector<float>> out(seqs.size());
  for (int t = 0; t < length; ++t) {
    std::vector<int> tokens;
    for (const auto& s : seqs) tokens.push_back(s[static_cast<std::size_t>(t)]);
    const auto l = fwd.step(tokens);
    EXPECT_EQ(l.size(), static_cast<std::size_t>(batch) * vocab);
    for (int b = 0; b < batch; ++b)
      out[static_cast<std::size_t>(b)].insert(out[static_cast<std::size_t>(b)].end(), l.begin() + b * vocab,
                                              l.begin() + (b + 1) * vocab);
  }
  for (int b = 0; b < batch; ++b) EXPECT_EQ(fwd.position(b), length);
  return out;
}

int batch_kernels_in(const std::vector<PlannedMatvec>& plan) {
  int n = 0;
  for (const PlannedMatvec& p : plan) n += p.kernel && p.kernel->op == OpKind::MatVecBatch;
  return n;
}

// f32 activations throughout: the batch kernels' sums are the one-vector kernels' sums.
TEST(BatchForward, EachSequenceGetsTheLogitsItGetsAlone) {
  for (const char* mix : {"q4_K_m", "q8_0"}) {
    SCOPED_TRACE(mix);
    const LoadedModel m(testing::synthetic_model("llama", mix));
    const auto one = testing::cpu_f32_plan(m.weights);
    for (int batch : {1, 3, 4}) {
      SCOPED_TRACE("batch " + std::to_string(batch));
      const auto plan = batch_plan(one, batch);
      ASSERT_GT(batch_kernels_in(plan), 0) << "no matvec of the model has a batch kernel";
      for (const PlannedMatvec& p : plan) {
        if (p.kernel->op == OpKind::MatVecBatch) {
          EXPECT_GE(p.kernel->max_n, batch) << p.kernel->name;
        }
      }
      const auto seqs = random_sequences(batch, 6, m.config.vocab_size);
      const auto want = alone(m, one, seqs);
      const auto got = together(m, plan, seqs);
      for (int b = 0; b < batch; ++b)
        EXPECT_LT(testing::nmse(got[static_cast<std::size_t>(b)], want[static_cast<std::size_t>(b)]), 1e-10)
            << "sequence " << b;
    }
  }
}

// The fastest plan's int8 batch kernels: each sequence within int8 loss of its f32
// logits alone, and never another sequence's (a sequence mixed up with another, or
// reading another's cache, fails by orders of magnitude).
TEST(BatchForward, Int8BatchKernelsKeepEachSequenceItsOwn) {
  const LoadedModel m(testing::synthetic_model("llama", "q4_K_m"));
  const auto f32 = testing::cpu_f32_plan(m.weights);
  const auto int8 = resolve_plan(KernelPlan::parse_rules("ffn_up_gate=none"), m.weights, 2);
  const int batch = 4;
  const auto plan = batch_plan(int8, batch);
  const auto seqs = random_sequences(batch, 6, m.config.vocab_size);
  const auto want = alone(m, f32, seqs);
  const auto got = together(m, plan, seqs);
  for (int b = 0; b < batch; ++b) {
    const double own = testing::nmse(got[static_cast<std::size_t>(b)], want[static_cast<std::size_t>(b)]);
    EXPECT_LT(own, 1e-2) << "sequence " << b;
    const double other = testing::nmse(got[static_cast<std::size_t>(b)], want[static_cast<std::size_t>((b + 1) % batch)]);
    EXPECT_GT(other, 100 * own) << "sequence " << b << " is as close to sequence " << (b + 1) % batch;
  }
}

TEST(BatchForward, RefusesWhatItCannotRun) {
  const LoadedModel m(testing::synthetic_model("llama", "q4_K_m"));
  auto fused = testing::cpu_f32_plan(m.weights);
  fused.push_back(fused.front());
  fused.back().op = Op::FfnUpGate;  // a fused entry, whatever its kernel
  EXPECT_THROW(batch_plan(fused, 4), PlanError);
  const auto plan = batch_plan(testing::cpu_f32_plan(m.weights), 2);
  BatchCpuForward fwd(m, plan, 2, 1, 2);
  EXPECT_THROW(fwd.step(std::vector<int>{1}), std::invalid_argument);
  EXPECT_THROW(fwd.step(std::vector<int>{1, m.config.vocab_size}), std::out_of_range);
  fwd.step(std::vector<int>{1, 2});
  fwd.step(std::vector<int>{3, 4});
  EXPECT_THROW(fwd.step(std::vector<int>{5, 6}), ContextFull);
}

}  // namespace
}  // namespace qmv
