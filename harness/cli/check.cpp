// `qmvlab check`: kernels against the Eigen double-precision reference, one line per
// kernel and shape, optionally a CSV.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "harness/check.h"
#include "harness/child_process.h"
#include "harness/cli/command.h"
#include "harness/cli/options.h"
#include "harness/csv.h"
#include "harness/machine.h"

namespace qmv {
namespace {

std::vector<CheckRow> to_rows(const CheckResult& r, const CheckConfig& cfg) {
  const Tolerance tol = tolerance_for(*r.spec);
  CheckRow base;
  base.kernel = r.spec->name;
  base.weight_type = std::string(to_string(r.spec->weight));
  base.act_format = std::string(to_string(r.spec->act));
  base.backend = std::string(to_string(r.spec->backend));
  base.rows = r.shape.rows;
  base.cols = r.shape.cols;
  base.threads = cfg.threads;
  base.seed = cfg.seed;
  base.tol_nmse_kernel = tol.kernel_nmse;
  base.tol_max_rel_kernel = tol.kernel_max_rel;
  std::vector<CheckRow> out;
  if (!r.skipped.empty()) {
    // Not checked (unavailable here, or a shape its rule excludes): one row saying why,
    // so a results file tells what it does not cover.
    CheckRow row = base;
    row.activation = "skipped";
    row.failure = r.skipped;
    out.push_back(row);
    return out;
  }
  for (const auto& c : r.cases) {
    CheckRow row = base;
    row.tol_nmse_e2e = c.activation == "gaussian" ? tol.end_to_end_nmse_gaussian : tol.end_to_end_nmse_outliers;
    row.activation = case_label(c);
    row.nmse_kernel = c.kernel.nmse;
    row.max_abs_kernel = c.kernel.max_abs;
    row.max_rel_kernel = c.kernel.max_rel;
    row.nmse_e2e = c.end_to_end.nmse;
    row.max_abs_e2e = c.end_to_end.max_abs;
    row.passed = c.passed;
    row.failure = c.failure;
    out.push_back(row);
  }
  return out;
}

// The cases of a result on one line: each case, or for a batch kernel each activation
// kind over all its counts of vectors (the worst errors, and the failing counts).
std::string case_details(const CheckResult& r) {
  std::string detail;
  std::vector<std::string> kinds;
  for (const auto& c : r.cases) {
    if (c.n == 0) {
      detail += fmt::format("  {}: kernel {:.1e} e2e {:.1e}{}", c.activation, c.kernel.nmse, c.end_to_end.nmse,
                            c.passed ? "" : " <- " + c.failure);
    } else if (std::find(kinds.begin(), kinds.end(), c.activation) == kinds.end()) {
      kinds.push_back(c.activation);
    }
  }
  for (const std::string& kind : kinds) {
    double kernel = 0, e2e = 0;
    int max_n = 0;
    std::string failures;
    for (const auto& c : r.cases) {
      if (c.activation != kind || c.n == 0) continue;
      kernel = std::max(kernel, c.kernel.nmse);
      e2e = std::max(e2e, c.end_to_end.nmse);
      max_n = std::max(max_n, c.n);
      if (!c.passed) failures += fmt::format("{}n={}: {}", failures.empty() ? " <- " : "; ", c.n, c.failure);
    }
    detail += fmt::format("  {} n=1..{}: kernel {:.1e} e2e {:.1e}{}", kind, max_n, kernel, e2e, failures);
  }
  return detail;
}

class CheckCommand : public Command {
 public:
  explicit CheckCommand(CLI::App& app) {
    cmd_ = app.add_subcommand(
        "check", "Check kernels against an Eigen double-precision reference (random weights, Gaussian "
                 "and outlier activations, outputs poisoned with NaN)");
    cmd_->add_option("--kernels", kernels_, "Comma-separated globs of kernel names")->capture_default_str();
    cmd_->add_option("--shapes", shapes_, "ROWSxCOLS list or preset (see `qmvlab list --shapes`)")
        ->capture_default_str();
    cmd_->add_option("--threads", threads_, "Threads for the kernels")->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd_->add_option("--seed", seed_, "Random seed (0: a fresh one, printed)");
    add_tiling_options(cmd_, tiling_);
    cmd_->add_option("--out", out_, "Write a CSV of results ({machine} expands to this machine's name)");
    cmd_->add_flag("--append", append_, "Append to --out instead of replacing it");
    auto* isolate = cmd_->add_flag(
        "--isolate", isolate_,
        "Check each kernel in a child process of its own: a crash, a CUDA fault, a hang past "
        "--isolate-timeout or a failed exit is that kernel's failure (on the shape it reached; the shapes "
        "after it not checked), and the other kernels are still checked");
    cmd_->add_option("--isolate-timeout", isolate_timeout_s_,
                     "Seconds one kernel's process may run (all its shapes) before it is killed and failed")
        ->check(CLI::PositiveNumber)->needs(isolate)->capture_default_str();
    // What the parent of an isolated check gives its children: where the shared problems are kept.
    cmd_->add_option("--problem-cache", problem_cache_)->group("");
  }

  bool chosen() const override { return cmd_->parsed(); }

  int run(const std::string& command_line) override {
    set_cpu_tiling(tiling_);
    const auto kernels = select_kernels(kernels_);
    const auto shapes = shapes_or_throw(shapes_);
    require_supported(kernels, shapes);
    CheckConfig cfg;
    cfg.threads = threads_;
    cfg.seed = seed_ ? seed_ : std::random_device{}() | (std::uint64_t(std::random_device{}()) << 32);
    cfg.problem_cache = problem_cache_;
    const RunContext ctx = current_context(command_line);
    std::unique_ptr<CsvWriter> csv;
    if (!out_.empty()) csv = std::make_unique<CsvWriter>(expand_machine(out_), check_header(), append_);
    fmt::print("checking {} kernel(s) on {} shape(s), {} thread(s), seed {} (rerun with --seed {})\n",
               kernels.size(), shapes.size(), cfg.threads, cfg.seed, cfg.seed);
    std::fflush(stdout);
    int passed = 0, failed = 0, skipped = 0, not_run = 0;
    std::string lost;
    const auto on_result = [&](const CheckResult& r) {
      if (!r.not_run.empty()) {
        // No row: the pair was not checked, and a rerun in a fresh process appends it.
        ++not_run;
        lost = r.not_run;
        fmt::print("NOT RUN {:<24} {:>11}  {}\n", r.spec->name, to_string(r.shape), r.not_run);
      } else if (!r.skipped.empty()) {
        ++skipped;
        fmt::print("SKIP {:<24} {:>11}  {}\n", r.spec->name, to_string(r.shape), r.skipped);
        if (csv)
          for (const auto& row : to_rows(r, cfg)) csv->write(check_fields(ctx, row));
      } else {
        r.passed() ? ++passed : ++failed;
        const std::string detail = case_details(r);
        fmt::print("{} {:<24} {:>11}{}\n", r.passed() ? "PASS" : "FAIL", r.spec->name, to_string(r.shape), detail);
        if (csv)
          for (const auto& row : to_rows(r, cfg)) csv->write(check_fields(ctx, row));
      }
      std::fflush(stdout);
    };
    if (isolate_) {
      IsolateConfig iso;
      iso.executable = self_executable();
      iso.child_options = {"--tile-rows", std::to_string(tiling_.tile_rows), "--min-parallel-rows",
                           std::to_string(tiling_.min_parallel_rows)};
      iso.kernel_timeout_s = isolate_timeout_s_;
      run_check_isolated(kernels, shapes, cfg, iso, on_result);
    } else {
      run_check(kernels, shapes, cfg, on_result);
    }
    if (csv) fmt::print("wrote {}\n", csv->path());
    fmt::print("check: {} passed, {} failed, {} skipped\n", passed, failed, skipped);
    if (not_run) {
      fmt::print(stderr,
                 "check: {} kernel x shape pair(s) not run: {}; check them in a fresh process (the NOT RUN lines "
                 "name them; --append adds their rows)\n",
                 not_run, lost);
      return 1;
    }
    // Asked only for CUDA kernels and none could run (no device, say): a run that
    // checked nothing must not pass as a run that checked everything.
    const bool only_cuda = std::all_of(kernels.begin(), kernels.end(),
                                       [](const KernelSpec* k) { return k->backend == Backend::CUDA; });
    if (only_cuda && passed + failed == 0) {
      fmt::print(stderr, "check: no CUDA kernel ran ({} skipped): nothing was checked\n", skipped);
      return 1;
    }
    return failed ? 1 : 0;
  }

 private:
  CLI::App* cmd_ = nullptr;
  std::string kernels_ = "*", shapes_ = "default", out_;
  int threads_ = machine_info().cores;
  std::uint64_t seed_ = 0;
  bool append_ = false, isolate_ = false;
  double isolate_timeout_s_ = 600;
  std::string problem_cache_;
  CpuTiling tiling_ = cpu_tiling();
};

}  // namespace

std::unique_ptr<Command> check_command(CLI::App& app) { return std::make_unique<CheckCommand>(app); }

}  // namespace qmv
