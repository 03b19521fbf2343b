// Option parsing shared by the subcommands: kernel globs, shapes, thread lists and
// the CPU tiling options. Each throws UsageError with a one-line message.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "harness/auto_plan.h"
#include "harness/shapes.h"
#include "kernels/cpu_tiling.h"
#include "kernels/registry.h"

namespace qmv {

// The kernels `globs` selects; none is an error naming the known kernels.
std::vector<const KernelSpec*> select_kernels(const std::string& globs);

// parse_shapes, its errors as UsageError.
std::vector<Shape> shapes_or_throw(const std::string& spec);

// A shape no selected kernel can take is a mistake worth stopping for; a shape some
// kernels skip (an f32-only shape rule, say) is not.
void require_supported(const std::vector<const KernelSpec*>& kernels, const std::vector<Shape>& shapes);

// "1,2", "all" or "1,all": distinct positive thread counts in the order given.
std::vector<int> parse_threads(const std::string& spec);

// --tile-rows and --min-parallel-rows, parsed into `tiling` (which starts as the
// current tiling); the command applies it with set_cpu_tiling before it runs.
void add_tiling_options(CLI::App* sub, CpuTiling& tiling);

// The --plan help text of the commands that resolve a plan against a model.
inline constexpr const char* kPlanHelp =
    "auto (per matvec the kernel measured fastest on this machine; what the tuning store lacks is timed "
    "first), static (the fixed order), a TOML plan file, or OP.TYPE=KERNEL rules (see `qmvlab plan --help`)";

// How `auto` gets its speeds, for decode, logits and plan: --bench-csv or --no-tune.
struct AutoPlanChoice {
  std::string bench_csv;
  bool no_tune = false;
  // --tune-time: seconds per timed repetition of the finalists; the screening pass keeps
  // its share of them that AutoPlanOptions' defaults have.
  double tune_time_s = AutoPlanOptions{}.final_min_time_s;
  // --rank-all-speeds: the geometric mean over every stored read speed, not the speed now.
  bool rank_all_speeds = false;
};
void add_auto_plan_options(CLI::App* sub, AutoPlanChoice& choice);

// The speeds resolve_plan's `auto` picks by: a bench CSV's when one was given, else the
// tuning store's, timing first what it lacks (not with --no-tune), progress on stderr.
// `evidence` (when given) gets what was done. With `n` > 1, the store's speeds of the
// batch kernels at n vectors per call, which batch_plan picks by (`decode --batch n`),
// timed within what `spent_s` of timing before left of the budget, one budget for a
// run; a bench CSV's speeds are those of every n whatever `n` is.
std::vector<KernelSpeed> auto_plan_speeds(const AutoPlanChoice& choice, const KernelPlan& plan,
                                          const ModelWeights& weights, int threads, Backend backend,
                                          AutoPlanEvidence* evidence = nullptr, int n = 1, double spent_s = 0);

// The text of --prompt-file: a regular file, or standard input for "-", at most 64 MiB
// (a prompt too long for the command line). Throws std::invalid_argument naming the path.
std::string read_prompt_file(const std::string& path);

// Text given as a prompt must be UTF-8: throws std::invalid_argument
// "WHAT: invalid UTF-8 at byte N (0xXX)" at the first byte that is not.
void check_utf8(std::string_view text, const std::string& what);

}  // namespace qmv
