#include "harness/cli_gate.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "harness/check.h"
#include "harness/experiment.h"
#include "harness/gate.h"
#include "harness/machine.h"
#include "harness/table.h"
#include "kernels/registry.h"

namespace qmv {

struct GateCommand::Options {
  CLI::App* cmd = nullptr;
  std::string experiment, baseline = "results/{machine}/gate-baseline.csv";
  GateConfig config;
  double tolerance = 0.3;
  bool update = false, no_speed = false;
};

GateCommand::GateCommand(CLI::App& app) : o_(std::make_unique<Options>()) {
  Options& o = *o_;
  o.cmd = app.add_subcommand(
      "gate", "Regression gate: every kernel of an experiment passes the check, and none is slower against its "
              "scalar reference (timed interleaved) than the baseline allows");
  o.cmd->add_option("experiment", o.experiment, "Experiment TOML (e.g. experiments/ci.toml)")->required();
  o.cmd->add_option("--baseline", o.baseline, "Baseline of speed ratios ({machine} expands)")->capture_default_str();
  o.cmd->add_flag("--update-baseline", o.update, "Measure and write the baseline instead of comparing with it");
  o.cmd->add_option("--tolerance", o.tolerance, "Allowed loss of speed ratio (0.3: down to 70% of the baseline)")
      ->check(CLI::Range(0.01, 0.99))->capture_default_str();
  o.cmd->add_option("--threads", o.config.threads, "Threads for the timing")->check(CLI::PositiveNumber)
      ->capture_default_str();
  o.cmd->add_option("--reps", o.config.repetitions, "Interleaved repetitions (medians compared)")
      ->check(CLI::Range(3, 101))->capture_default_str();
  o.cmd->add_flag("--no-speed", o.no_speed, "Only the correctness gate");
}

GateCommand::~GateCommand() = default;

bool GateCommand::chosen() const { return o_->cmd->parsed(); }

int GateCommand::run() const {
  const Options& o = *o_;
  const Experiment exp = load_experiment(o.experiment);
  std::string globs;
  for (const auto& g : exp.kernel_globs) globs += (globs.empty() ? "" : ",") + g;
  std::vector<const KernelSpec*> kernels;
  for (const KernelSpec* k : global_registry().select(globs))
    if (k->backend == Backend::CPU && availability(*k).available) kernels.push_back(k);
  std::vector<Shape> shapes;
  for (const auto& s : exp.shapes) shapes.push_back(s.shape);

  // Correctness.
  CheckConfig check;
  check.seed = std::random_device{}() | (std::uint64_t(std::random_device{}()) << 32);
  int failed = 0, passed = 0;
  fmt::print("gate {}: checking {} kernel(s) on {} shape(s), seed {}\n", exp.name, kernels.size(), shapes.size(),
             check.seed);
  run_check(kernels, shapes, check, [&](const CheckResult& r) {
    if (!r.skipped.empty()) return;
    if (r.passed()) return void(++passed);
    ++failed;
    for (const auto& c : r.cases)
      if (!c.passed) fmt::print("FAIL check {} {} ({}): {}\n", r.spec->name, to_string(r.shape), c.activation, c.failure);
  });
  fmt::print("check: {} passed, {} failed\n", passed, failed);
  if (o.no_speed) return failed ? 1 : 0;

  // Speed against the scalar reference, interleaved.
  fmt::print("timing {} kernel(s) against their scalar references, warm, {} interleaved repetitions\n",
             kernels.size(), o.config.repetitions);
  std::fflush(stdout);
  const auto measured = measure_gate_ratios(kernels, shapes, o.config);
  const std::string path = expand_machine(o.baseline);
  if (o.update) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    write_gate_baseline(path, measured);
    fmt::print("wrote the baseline of {} ratio(s) to {}\n", measured.size(), path);
    return failed ? 1 : 0;
  }
  if (!std::filesystem::is_regular_file(path)) {
    fmt::print("no baseline at {}: speed not gated (record one with --update-baseline)\n", path);
    return failed ? 1 : 0;
  }
  const auto baseline = read_gate_baseline(path);
  std::vector<std::string> missing;
  const auto regressions = gate_regressions(measured, baseline, o.tolerance, &missing);
  std::vector<std::vector<std::string>> rows;
  for (const GateRatio& m : measured) {
    const auto b = std::find_if(baseline.begin(), baseline.end(), [&](const GateRatio& x) {
      return x.kernel == m.kernel && x.shape == m.shape && x.threads == m.threads;
    });
    rows.push_back({m.kernel, to_string(m.shape), fmt::format("{:.2f}x", m.ratio),
                    b == baseline.end() ? "-" : fmt::format("{:.2f}x", b->ratio)});
  }
  print_table({"kernel", "shape", "vs scalar now", "baseline"}, rows);
  for (const auto& r : regressions) fmt::print("FAIL speed {}\n", r);
  if (!missing.empty()) fmt::print("{} kernel(s) without a baseline row (not gated)\n", missing.size());
  fmt::print("speed: {} regression(s) beyond {:.0f}% against {}\n", regressions.size(), 100 * o.tolerance, path);
  return failed || !regressions.empty() ? 1 : 0;
}

}  // namespace qmv
