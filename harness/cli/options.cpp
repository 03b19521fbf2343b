#include "harness/cli/options.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "harness/cli/command.h"
#include "harness/csv.h"
#include "harness/machine.h"

namespace qmv {

std::vector<const KernelSpec*> select_kernels(const std::string& globs) {
  if (const auto unmatched = global_registry().unmatched_exclusions(globs); !unmatched.empty())
    throw UsageError(fmt::format("'{}' excludes no kernel (see `qmvlab list`)", fmt::join(unmatched, ",")));
  const auto selected = global_registry().select(globs);
  if (!selected.empty()) return selected;
  const bool has_wildcard = globs.find_first_of("*?[") != std::string::npos;
  std::string known;
  for (const auto& k : global_registry().all()) known += (known.empty() ? "" : ", ") + k.name;
  if (!has_wildcard && globs.find(',') == std::string::npos)
    throw UsageError(fmt::format("unknown kernel '{}' (known: {})", globs, known));
  throw UsageError(fmt::format("no kernel matches '{}' (known: {})", globs, known));
}

std::vector<Shape> shapes_or_throw(const std::string& spec) {
  try {
    return parse_shapes(spec);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

void require_supported(const std::vector<const KernelSpec*>& kernels, const std::vector<Shape>& shapes) {
  for (Shape s : shapes) {
    const bool any = std::any_of(kernels.begin(), kernels.end(),
                                 [&](const KernelSpec* k) { return k->supports(s); });
    if (!any)
      throw UsageError(fmt::format("shape {} is not supported by any selected kernel ({} needs {})",
                                   to_string(s), kernels.front()->name, kernels.front()->shape_rule));
  }
}

std::vector<int> parse_threads(const std::string& spec) {
  if (spec == "all") return {machine_info().cores};
  std::vector<int> out;
  std::size_t start = 0;
  while (start <= spec.size()) {
    std::size_t end = spec.find(',', start);
    if (end == std::string::npos) end = spec.size();
    const std::string tok = spec.substr(start, end - start);
    start = end + 1;
    if (tok == "all") {
      out.push_back(machine_info().cores);
      continue;
    }
    std::size_t used = 0;
    int t = 0;
    try {
      t = std::stoi(tok, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != tok.size() || t < 1 || t > 4096)
      throw UsageError(fmt::format("bad thread count '{}': expected positive integers or 'all', "
                                   "e.g. --threads 1,2",
                                   tok));
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  return out;
}

void add_tiling_options(CLI::App* sub, CpuTiling& tiling) {
  sub->add_option("--tile-rows", tiling.tile_rows, "CPU kernels: rows per OpenMP work item")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  sub->add_option("--min-parallel-rows", tiling.min_parallel_rows,
                  "CPU kernels: calls with fewer rows run on one thread")
      ->check(CLI::Range(0, 1 << 30))->capture_default_str();
}

void add_auto_plan_options(CLI::App* sub, AutoPlanChoice& choice) {
  auto* csv = sub->add_option("--bench-csv", choice.bench_csv,
                              "Bench results for `auto` to pick the fastest kernel from, instead of the tuning store");
  sub->add_flag("--no-tune", choice.no_tune,
                "`auto` uses the tuning store's figures only, timing nothing; a matvec it has none for takes the "
                "static order (the store: $QMV_TUNING_STORE, else results/<machine>/tuning.csv)")
      ->excludes(csv);
}

std::vector<KernelSpeed> auto_plan_speeds(const AutoPlanChoice& choice, const KernelPlan& plan,
                                          const ModelWeights& weights, int threads, Backend backend,
                                          AutoPlanEvidence* evidence) {
  if (!choice.bench_csv.empty()) return kernel_speeds(read_bench_csv(choice.bench_csv));
  // A plan that names a kernel it cannot use is refused before a minute of timing.
  (void)resolve_plan(plan, weights, threads, {}, backend);
  AutoPlanOptions options;
  options.threads = threads;
  options.backend = backend;
  options.measure = !choice.no_tune;
  options.progress = [](const std::string& line) {
    fmt::print(stderr, "{}\n", line);
    std::fflush(stderr);
  };
  AutoPlanEvidence ev = auto_plan_evidence(plan, weights, options);
  std::vector<KernelSpeed> speeds = ev.speeds;
  if (evidence) *evidence = std::move(ev);
  return speeds;
}

}  // namespace qmv
