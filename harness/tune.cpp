#include "harness/tune.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>

#include "harness/accuracy.h"
#include "harness/auto_plan.h"
#include "harness/bench.h"
#include "harness/check.h"
#include "harness/machine.h"
#include "harness/peak.h"
#include "harness/tuning_store.h"
#include "kernels/availability.h"
#include "kernels/registry.h"

namespace qmv {
namespace {

bool runs_here(const KernelSpec& k, OpKind op, WeightType w, Shape s, const std::string& globs) {
  return k.backend == Backend::CPU && k.op == op && k.weight == w && k.supports(s) && availability(k).available &&
         glob_match_any(globs, k.name);
}

// How much faster (in median time) a kernel must be to replace the default's choice.
constexpr double kSwitchGain = 1.03;

std::string shape_key(WeightType w, Shape s) { return fmt::format("{} {}", to_string(w), to_string(s)); }

}  // namespace

TuneResult tune_model(const ModelWeights& weights, const std::string& model_name, const TuneConfig& config,
                      const std::function<void(const std::string&)>& progress) {
  auto say = [&](const std::string& s) {
    if (progress) progress(s);
  };
  // The distinct plain matvecs of the model, then a fused candidate group for gate+up.
  const auto plain = resolve_plan(KernelPlan::parse_rules("ffn_up_gate=none"), weights, config.threads);
  TuneResult result;
  std::vector<TuneCandidate>& cands = result.candidates;
  for (const PlannedMatvec& m : plain) {
    for (const KernelSpec& k : global_registry().all())
      if (runs_here(k, OpKind::MatVec, m.weight, m.shape, config.kernels))
        cands.push_back({m.op, m.weight, m.shape, m.count, &k});
    if (m.op != kUpGate.first) continue;
    const bool pair_same = std::any_of(plain.begin(), plain.end(), [&](const PlannedMatvec& u) {
      return u.op == kUpGate.second && u.weight == m.weight && u.shape == m.shape;
    });
    if (!pair_same) continue;
    for (const KernelSpec& k : global_registry().all())
      if (runs_here(k, OpKind::FusedUpGate, m.weight, m.shape, config.kernels))
        cands.push_back({kUpGate.fused, m.weight, m.shape, m.count, &k});
  }
  for (const PlannedMatvec& m : plain)
    if (std::none_of(cands.begin(), cands.end(), [&](const TuneCandidate& c) { return c.op == m.op; }))
      throw PlanError(fmt::format("tune: no kernel selected by '{}' can run {} ({} {})", config.kernels, to_string(m.op),
                                  to_string(m.weight), to_string(m.shape)));

  // Kernels and shapes per weight type: one check and one bench call each, so no
  // kernel is measured on a shape of another weight type's matvec.
  std::map<WeightType, std::pair<std::vector<const KernelSpec*>, std::vector<Shape>>> by_type;
  for (const TuneCandidate& c : cands) {
    auto& [kernels, shapes] = by_type[c.weight];
    if (std::find(kernels.begin(), kernels.end(), c.kernel) == kernels.end()) kernels.push_back(c.kernel);
    if (std::find(shapes.begin(), shapes.end(), c.shape) == shapes.end()) shapes.push_back(c.shape);
  }
  auto find = [&](const KernelSpec* k, Shape s) {
    std::vector<TuneCandidate*> out;
    for (TuneCandidate& c : cands)
      if (c.kernel == k && c.shape == s) out.push_back(&c);
    return out;
  };

  CheckConfig check;
  check.seed = config.seed;
  check.threads = config.threads;
  for (const auto& [type, ks] : by_type) {
    say(fmt::format("checking {} {} kernel(s) on {} shape(s)", ks.first.size(), to_string(type), ks.second.size()));
    run_check(ks.first, ks.second, check, [&](const CheckResult& r) {
      if (!r.skipped.empty()) return;
      for (TuneCandidate* c : find(r.spec, r.shape)) {
        c->check_passed = r.passed();
        for (const CaseResult& cs : r.cases)
          (cs.activation == "outliers" ? c->nmse_outliers : c->nmse_gaussian) = cs.end_to_end.nmse;
        c->within_budget = c->check_passed && c->nmse_outliers <= config.budget_nmse &&
                           c->nmse_gaussian <= config.budget_nmse;
      }
    });
  }

  // The shares of the peak are of the roofline decode divides by, not of a burst of its own.
  const StoredRoofline roofline = cpu_roofline(config.threads, "tune");
  say(fmt::format("the read bandwidth on {} thread(s): {:.2f} GB/s ({})", config.threads, roofline.gbps, roofline.source));
  const std::map<int, double> peaks = {{config.threads, roofline.gbps}};
  BenchConfig bench;
  bench.threads = {config.threads};
  bench.repetitions = config.repetitions;
  bench.min_time_s = config.min_time_s;
  bench.seed = config.seed;
  // Time kernels as decode will meet their weights: from memory, unless the whole
  // model fits in the last-level cache (a toy model), where warm is what decode sees.
  bench.warm = model_cache_state(weights) == "warm";
  // The roofline's read loop timed among the kernels: the memory's speed while they ran,
  // which the store keeps with their rows (a host's two speeds can rank them apart).
  if (!bench.warm && !roofline.read_loop.empty()) bench.peak_read_loops[config.threads] = {roofline.read_loop};
  for (const auto& [type, ks] : by_type) {
    std::vector<const KernelSpec*> in_budget;
    for (const KernelSpec* k : ks.first)
      if (std::any_of(cands.begin(), cands.end(), [&](const TuneCandidate& c) { return c.kernel == k && c.within_budget; }))
        in_budget.push_back(k);
    if (in_budget.empty()) continue;
    say(fmt::format("timing {} {} kernel(s) within the budget on {} shape(s), {}, interleaved", in_budget.size(),
                    to_string(type), ks.second.size(), bench.warm ? "warm (the model fits in the cache)" : "cold"));
    const BenchOutcome out = run_bench(in_budget, ks.second, bench, peaks);
    record_in_store(out.rows, "tune", out.interleaved_peak_gbps);
    for (const BenchRow& row : out.rows) {
      const KernelSpec* k = global_registry().find(row.kernel);
      for (TuneCandidate* c : find(k, {row.rows, row.cols})) {
        c->time_us = row.time_median_us;
        c->gbps = row.gbps_median;
        c->peak_pct = 100.0 * row.gbps_median / roofline.gbps;
      }
    }
  }

  // The fastest within budget per (op, type, shape).
  std::map<std::pair<Op, std::string>, TuneCandidate*> best;
  for (TuneCandidate& c : cands) {
    if (!c.within_budget || c.time_us <= 0) continue;
    TuneCandidate*& b = best[{c.op, shape_key(c.weight, c.shape)}];
    if (!b || c.time_us < b->time_us) b = &c;
  }
  for (const PlannedMatvec& m : plain) {
    if (best.count({m.op, shape_key(m.weight, m.shape)})) continue;
    double least = std::numeric_limits<double>::infinity();
    for (const TuneCandidate& c : cands)
      if (c.op == m.op && c.weight == m.weight && c.shape == m.shape) least = std::min(least, c.nmse_outliers);
    throw PlanError(fmt::format("tune: no kernel for {} ({} {}) stays within NMSE {:.1e} (the best loses {:.1e})",
                                to_string(m.op), to_string(m.weight), to_string(m.shape), config.budget_nmse, least));
  }
  // Fusion wins when one fused call beats the best gate plus the best up.
  // The default plan's kernel stays unless another is measurably faster: on a noisy
  // machine a tie in the bench must not trade a kernel for an equal one at random.
  for (const PlannedMatvec& m : plain) {
    TuneCandidate*& b = best.at({m.op, shape_key(m.weight, m.shape)});
    for (TuneCandidate& c : cands)
      if (c.kernel == m.kernel && c.op == m.op && c.shape == m.shape && c.within_budget && c.time_us > 0 &&
          b->time_us * kSwitchGain > c.time_us)
        b = &c;
  }
  for (auto& [key, c] : best) {
    if (c->op != kUpGate.fused) continue;
    const TuneCandidate* first = best.at({kUpGate.first, key.second});
    const TuneCandidate* second = best.at({kUpGate.second, key.second});
    if (c->time_us >= first->time_us + second->time_us) c = nullptr;
  }

  // Rules per (op, type); where one op has several shapes of a type, the shape with
  // the most matvecs decides (resolving the plan then checks the others).
  std::map<std::pair<Op, WeightType>, TuneCandidate*> rule;
  for (auto& [key, c] : best) {
    if (!c) continue;
    TuneCandidate*& r = rule[{c->op, c->weight}];
    if (!r || c->count > r->count) r = c;
  }
  // Gate/up types without a winning fused kernel stay apart.
  std::vector<WeightType> unfused;
  for (const PlannedMatvec& m : plain)
    if (m.op == kUpGate.first && !rule.count({kUpGate.fused, m.weight}) &&
        std::find(unfused.begin(), unfused.end(), m.weight) == unfused.end())
      unfused.push_back(m.weight);
  std::string toml = fmt::format(
      "# Written by `qmvlab tune` for {}: {} thread(s), end-to-end NMSE budget {:.1e},\n"
      "# on {} ({}), commit {}. Use with `qmvlab decode --plan FILE`.\n",
      model_name, config.threads, config.budget_nmse, machine_info().machine, machine_info().cpu_model,
      machine_info().git_commit);
  for (Op matvec : matvec_ops()) {
    const std::string op(to_string(matvec));
    std::string lines;
    for (auto& [key, c] : rule) {
      if (key.first != matvec) continue;
      c->chosen = true;
      result.plan.set(op, std::string(to_string(c->weight)), c->kernel->name);
      lines += fmt::format("{} = \"{}\"  # {}: {:.1f} us, {:.2f} GB/s ({:.0f}% of peak), NMSE {:.1e} / {:.1e} "
                           "(gaussian / outliers)\n",
                           to_string(c->weight), c->kernel->name, to_string(c->shape), c->time_us, c->gbps,
                           c->peak_pct, c->nmse_gaussian, c->nmse_outliers);
    }
    if (matvec == kUpGate.fused) {
      for (WeightType w : unfused) {
        result.plan.set(op, std::string(to_string(w)), kNoKernel);
        lines += fmt::format("{} = \"{}\"  # no fused kernel beats gate + up\n", to_string(w), kNoKernel);
      }
    }
    if (!lines.empty()) toml += fmt::format("\n[{}]\n{}", op, lines);
  }
  result.plan_toml = toml;
  return result;
}

double PlanRound::default_over_tuned() const {
  return (default_tok_s[0] + default_tok_s[1]) / (tuned_tok_s[0] + tuned_tok_s[1]);
}

bool PlanRound::one_placement() const { return qmv::one_placement(round_trip_ns); }

std::vector<PlanRound> rounds_to_weigh(const std::vector<PlanRound>& rounds) {
  std::vector<PlanRound> kept;
  std::copy_if(rounds.begin(), rounds.end(), std::back_inserter(kept),
               [](const PlanRound& r) { return r.one_placement(); });
  return kept.empty() ? rounds : kept;
}

double default_share_of_tuned(const std::vector<PlanRound>& rounds) {
  if (rounds.empty()) return 0;
  std::vector<double> ratios;
  for (const PlanRound& r : rounds_to_weigh(rounds)) ratios.push_back(r.default_over_tuned());
  return median_of(ratios);
}

}  // namespace qmv
