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
// rounds, which the ratio of the two plans' medians does not. A host that moves the
// threads between cores that share a cache and cores that do not changes its speed by
// up to 1.6x (results/README.md, "Two placements"), far more than a drift, so a round
// in which it did says little of the plans: each run is followed by a round trip
// between the threads (thread_round_trip_ns), which tells the two placements apart.
struct PlanRound {
  double default_tok_s[2] = {0, 0};  // the round's first and last run
  double tuned_tok_s[2] = {0, 0};    // its second and third
  // After each run, in run order (default, tuned, tuned, default); 0: not timed (one thread).
  double round_trip_ns[4] = {0, 0, 0, 0};
  // The default plan's mean tokens/s over the tuned plan's.
  double default_over_tuned() const;
  // Whether its four runs met one placement of the threads (or it is not known).
  bool one_placement() const;
};

// The rounds default_share_of_tuned weighs: those whose runs met one placement, or all
// of them when none did.
std::vector<PlanRound> rounds_to_weigh(const std::vector<PlanRound>& rounds);

// The median of default_over_tuned over rounds_to_weigh (0 for none): how much of the
// tuned plan's speed the default plan reaches.
double default_share_of_tuned(const std::vector<PlanRound>& rounds);

}  // namespace qmv
