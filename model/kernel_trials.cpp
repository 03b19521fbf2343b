#include "model/kernel_trials.h"

#include <algorithm>

namespace qmv {

double trial_median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace {

MatvecOp& matvec_at(StepProgram& program, int layer, Op part) {
  return layer < 0 ? program.lm_head : matvec_slot(program.layers[static_cast<std::size_t>(layer)], part);
}

}  // namespace

KernelTrials::KernelTrials(const std::vector<PlannedMatvec>& plan, const StepProgram& program) {
  // Every matvec of the program in step order, by op (its layer; -1 for lm_head): a
  // call's place among its op's calls in a step.
  std::array<std::vector<std::pair<int, const MatvecOp*>>, kOpCount> by_part;
  for (std::size_t i = 0; i < program.layers.size(); ++i)
    for (const Op op : kLayerMatvecOps)
      if (const MatvecOp& m = matvec_slot(program.layers[i], op); m.kernel)
        by_part[static_cast<int>(m.part)].push_back({static_cast<int>(i), &m});
  if (program.lm_head.kernel) by_part[static_cast<int>(program.lm_head.part)].push_back({-1, &program.lm_head});

  for (const PlannedMatvec& p : plan) {
    if (p.trial_kernels.empty() || !p.kernel) continue;
    Trial t;
    t.part = p.op;
    t.weight = p.weight;
    t.shape = p.shape;
    const auto& calls = by_part[static_cast<int>(p.op)];
    t.calls_per_step = static_cast<int>(calls.size());
    bool routed = false;
    for (std::size_t i = 0; i < calls.size(); ++i)
      if (const auto [layer, m] = calls[i]; m->kernel == p.kernel && m->shape == p.shape) {
        t.layers.push_back(layer);
        t.call_index.push_back(static_cast<int>(i));
        routed = routed || m->outlier_kernel;
      }
    if (routed || static_cast<int>(t.layers.size()) < kTrialMinLayers) continue;
    t.candidates.push_back({p.kernel, {}, 0});
    for (const KernelSpec* k : p.trial_kernels)
      if (k && k != p.kernel && reads_same_weights(*k, *p.kernel)) t.candidates.push_back({k, {}, 0});
    if (t.candidates.size() > 1) trials_.push_back(std::move(t));
  }
}

template <class KernelOf>
void KernelTrials::set_kernels(const Trial& t, StepProgram& program, KernelOf&& kernel_of) {
  for (std::size_t l = 0; l < t.layers.size(); ++l) matvec_at(program, t.layers[l], t.part).kernel = kernel_of(l);
}

bool KernelTrials::running() const {
  return std::any_of(trials_.begin(), trials_.end(), [](const Trial& t) { return t.winner < 0; });
}

bool KernelTrials::may_run(std::size_t i) const {
  if (trials_[i].winner >= 0) return false;
  for (std::size_t j = 0; j < i; ++j)
    if (trials_[j].winner < 0 && call_group_op(trials_[j].part) == call_group_op(trials_[i].part)) return false;
  return true;
}

void KernelTrials::before_step(StepProgram& program) {
  ran_.assign(trials_.size(), false);
  for (std::size_t i = 0; i < trials_.size(); ++i) {
    if (!may_run(i)) continue;
    ran_[i] = true;
    const Trial& t = trials_[i];
    set_kernels(t, program, [&](std::size_t l) {
      return t.candidates[(l + static_cast<std::size_t>(t.steps)) % t.candidates.size()].kernel;
    });
  }
}

void KernelTrials::after_step(StepProgram& program, const StepCallSeconds& seconds) {
  // Only the trials that set their kernels for this step take its times.
  for (std::size_t i = 0; i < trials_.size() && i < ran_.size(); ++i) {
    if (!ran_[i]) continue;
    Trial& t = trials_[i];
    const std::vector<double>& calls = seconds[static_cast<int>(t.part)];
    const std::size_t k = t.candidates.size();
    if (static_cast<int>(calls.size()) != t.calls_per_step) {
      t.abandoned = true;
      t.winner = 0;
    } else {
      for (std::size_t l = 0; l < t.layers.size(); ++l)
        t.candidates[(l + static_cast<std::size_t>(t.steps)) % k].seconds.push_back(
            calls[static_cast<std::size_t>(t.call_index[l])]);
      ++t.steps;
      // Whole rounds of k steps: each candidate has then met every layer as often as
      // the others, so layers that differ weigh alike on every candidate.
      const bool enough = t.steps % static_cast<int>(k) == 0 && t.steps >= kTrialSteps &&
                          std::all_of(t.candidates.begin(), t.candidates.end(), [](const Candidate& c) {
                            return static_cast<int>(c.seconds.size()) >= kTrialCalls;
                          });
      if (!enough) continue;
      for (Candidate& c : t.candidates) c.median_s = trial_median(c.seconds);
      std::size_t fastest = 0;
      for (std::size_t c = 1; c < k; ++c)
        if (t.candidates[c].median_s < t.candidates[fastest].median_s) fastest = c;
      t.winner = t.candidates[fastest].median_s < (1 - kTrialMargin) * t.candidates[0].median_s
                     ? static_cast<int>(fastest)
                     : 0;
    }
    set_kernels(t, program, [&](std::size_t) { return t.kept(); });
  }
}

}  // namespace qmv
