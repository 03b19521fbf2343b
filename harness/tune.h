// The autotuner: for every matvec of a model (op, weight type, shape), time every
// kernel that can run it on this machine, keep those within an accuracy budget, and
// write the fastest combination as a plan that `decode --plan` takes.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "harness/csv.h"
#include "model/config.h"
#include "model/plan.h"

namespace qmv {

struct TuneConfig {
  int threads = 1;
  // End-to-end NMSE a kernel may lose on activations with outlier channels (the
  // check's worst case): int8 activation paths lose ~1e-4..1e-2 there.
  double budget_nmse = 1e-2;
  int repetitions = 5;
  double min_time_s = 0.05;
  std::uint64_t seed = 1;
  std::string kernels = "*";  // globs limiting the candidates
};

// One candidate kernel for one distinct matvec of the model.
struct TuneCandidate {
  Op op = Op::AttnQ;  // Op::FfnUpGate for fused candidates
  WeightType weight;
  Shape shape;
  int count = 0;  // matvecs of the model it would run
  const KernelSpec* kernel = nullptr;
  bool within_budget = false;
  bool check_passed = false;
  double nmse_gaussian = 0, nmse_outliers = 0;  // end to end, the check's two cases
  double time_us = 0;                            // median per call
  double gbps = 0, peak_pct = 0;
  bool chosen = false;
};

struct TuneResult {
  std::vector<TuneCandidate> candidates;
  KernelPlan plan;          // op.type -> kernel for every op the model has
  std::string plan_toml;    // the same, as a commented TOML file
};

// `progress` gets one line per stage. Throws PlanError when some matvec has no
// kernel within the budget (naming it and the best NMSE on offer).
TuneResult tune_model(const ModelWeights& weights, const std::string& model_name, const TuneConfig& config,
                      const std::function<void(const std::string&)>& progress = {});

// One round of the decode comparison: the default plan, the tuned plan twice, the
// default again. A host whose speed drifts steadily through the round weighs on both
// plans' means alike, so the round's ratio survives what the host's speed does between
// rounds, which the ratio of the two plans' medians does not.
struct PlanRound {
  double default_tok_s[2] = {0, 0};  // the round's first and last run
  double tuned_tok_s[2] = {0, 0};    // its second and third
  // The default plan's mean tokens/s over the tuned plan's.
  double default_over_tuned() const;
};

// The median of the rounds' default_over_tuned (0 for none): how much of the tuned
// plan's speed the default plan reaches.
double default_share_of_tuned(const std::vector<PlanRound>& rounds);

}  // namespace qmv
