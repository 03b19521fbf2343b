// Trials in the run: `auto` picks each matvec's kernel from the tuning store, which times
// every kernel alone, call after call. A decode runs a layer's q, k and v (and gate and
// up) in one team with no barrier between them, and there kernels the store ranks within
// a few percent of each other can differ by several (results/README.md, "Trials in the
// run"). So where the plan holds, beside auto's pick, kernels that read the same
// prepared copy (PlannedMatvec::trial_kernels), the CPU forward tries them on the
// model's own layers during its first steps and keeps the fastest.
//
// Each trial runs the candidates on the layers in turn: at step s, layer l's matvec runs
// candidate (l + s) mod k, so every candidate meets every layer and the memory of the
// same milliseconds. A call's time is its call group's (model/forward.h), so two
// matvecs of one group (q and k, say) are never tried at once: their trials take turns.
// A trial ends after whole rounds of k steps (every candidate has then met every layer
// equally often), two steps at least, once every candidate has run kTrialCalls calls.
// The smallest median time wins; auto's pick keeps its place unless another's median is
// below it by more than kTrialMargin. Swapping kernels that share a copy costs no
// memory and no repack, and every candidate computes the same product.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "model/ops.h"
#include "model/plan.h"
#include "model/step.h"

namespace qmv {

inline constexpr int kTrialCalls = 8;          // calls of each candidate before a trial ends
inline constexpr int kTrialSteps = 2;          // steps of each trial, at least
inline constexpr double kTrialMargin = 0.01;   // what another kernel must beat the pick by
inline constexpr int kTrialMinLayers = 4;      // a matvec on fewer layers is not tried

// Each call's seconds in one step, by the op of the matvec it ran (a call group's time
// under each of its matvecs' ops), in the order the step ran them.
using StepCallSeconds = std::array<std::vector<double>, kOpCount>;

// The middle of a trial's times (the mean of the two middle ones for an even count): what
// the kernel trials here and the GPU decode's attention trial rank by. v is not empty.
double trial_median(std::vector<double> v);

class KernelTrials {
 public:
  struct Candidate {
    const KernelSpec* kernel = nullptr;
    std::vector<double> seconds;  // one per call timed
    double median_s = 0;          // once the trial ended
  };
  struct Trial {
    Op part = Op::AttnQ;
    WeightType weight = WeightType::Q4_K;
    Shape shape;
    std::vector<int> layers;        // the matvecs tried, by layer (-1: lm_head)
    std::vector<int> call_index;    // each one's place among its op's calls in a step
    int calls_per_step = 0;         // calls of the op a step makes
    std::vector<Candidate> candidates;  // [0]: auto's pick
    int steps = 0;                  // steps timed
    int winner = -1;                // index into candidates once the trial ended
    bool abandoned = false;         // a step's calls did not match its layers: the pick kept
    const KernelSpec* kept() const { return candidates[winner < 0 ? 0 : winner].kernel; }
  };

  KernelTrials() = default;
  // The trials of `plan`'s entries that have trial kernels, over `program`'s matvecs
  // (whose kernels the steps below set as trials go, and leave at each trial's
  // winner). A matvec with an outlier sibling, or on fewer than kTrialMinLayers layers,
  // is not tried.
  KernelTrials(const std::vector<PlannedMatvec>& plan, const StepProgram& program);

  bool running() const;  // some trial has not ended
  // Sets each running trial's kernel per layer of `program` for the next step.
  void before_step(StepProgram& program);
  // Takes the step's call times; a trial whose op made another number of calls than it
  // expects (a matrix run as two calls) ends there, keeping auto's pick.
  void after_step(StepProgram& program, const StepCallSeconds& seconds);
  const std::vector<Trial>& trials() const { return trials_; }

 private:
  // Trials that share a call group take turns: whether trial i may run now.
  bool may_run(std::size_t i) const;
  // Sets every matvec of trial `t` in `program`: layer l's to kernel_of(l's index).
  template <class KernelOf>
  static void set_kernels(const Trial& t, StepProgram& program, KernelOf&& kernel_of);
  std::vector<Trial> trials_;
  std::vector<bool> ran_;  // which trials before_step set kernels for
};

}  // namespace qmv
