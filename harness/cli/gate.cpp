// `qmvlab gate EXP.toml`: the regression gate. Correctness: every available kernel
// of the experiment passes the check on its shapes. Performance: every kernel's speed
// as a ratio to its type's scalar reference, timed interleaved, against a baseline.

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <unistd.h>

#include "harness/check.h"
#include "harness/cli/command.h"
#include "harness/experiment.h"
#include "harness/gate.h"
#include "harness/instructions.h"
#include "harness/output_file.h"
#include "harness/machine.h"
#include "harness/shapes.h"
#include "harness/table.h"
#include "kernels/availability.h"
#include "kernels/registry.h"

namespace qmv {

namespace {

class GateCommand : public Command {
 public:
  explicit GateCommand(CLI::App& app);
  bool chosen() const override;
  int run(const std::string& command_line) override;

 private:
  struct Options {
    CLI::App* cmd = nullptr;
    std::string experiment, baseline = "results/{machine}/gate-baseline.csv";
    GateConfig config;
    double tolerance = 0.3;
    bool update = false, no_speed = false;
    // The callgrind half.
    CLI::App* child = nullptr;
    std::string child_points;
    std::string instructions_baseline = "results/{machine}/gate-instructions.csv";
    std::string instructions_shape = "64x4096";
    double instructions_tolerance = 0.03;
    bool no_instructions = false;
  };
  Options o_;
};

}  // namespace

GateCommand::GateCommand(CLI::App& app) {
  Options& o = o_;
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
  o.cmd->add_flag("--no-speed", o.no_speed, "Skip the timed half (speed ratios)");
  o.cmd->add_option("--instructions-baseline", o.instructions_baseline,
                    "Baseline of callgrind instructions per weight byte ({machine} expands)")
      ->capture_default_str();
  o.cmd->add_option("--instructions-shape", o.instructions_shape, "Shape the instructions are counted on")
      ->capture_default_str();
  o.cmd->add_option("--instructions-tolerance", o.instructions_tolerance,
                    "Allowed growth of instructions per weight byte (0.03: up to 103% of the baseline)")
      ->check(CLI::Range(0.0, 10.0))->capture_default_str();
  o.cmd->add_flag("--no-instructions", o.no_instructions, "Skip the callgrind instruction counts");
  // What the gate runs under valgrind; not for people.
  o.child = app.add_subcommand("gate-callgrind-child", "")->group("");
  o.child->add_option("--points", o.child_points)->required();
}

bool GateCommand::chosen() const { return o_.cmd->parsed() || o_.child->parsed(); }

namespace {

// The deterministic half: instructions per weight byte of every kernel valgrind can
// run, under callgrind, against the committed baseline. Returns the failures.
int gate_instructions(const std::vector<const KernelSpec*>& kernels, const std::string& shape_text,
                      const std::string& baseline_spec, double tolerance, bool update) {
  const std::string valgrind = valgrind_version();
  if (valgrind.empty()) {
    fmt::print("valgrind not found: instructions per weight byte not gated (install valgrind)\n");
    return 0;
  }
  const std::vector<Shape> shapes = parse_shapes(shape_text);
  if (shapes.size() != 1) throw std::runtime_error("--instructions-shape takes one shape");
  // Without a baseline there is nothing to compare with: the counts are not taken.
  const std::string path = expand_machine(baseline_spec);
  if (!update && !std::filesystem::is_regular_file(path)) {
    fmt::print("no instruction baseline at {}: not gated (record one with --update-baseline)\n", path);
    return 0;
  }
  // Valgrind cannot decode 512-bit AVX instructions: those kernels are left to the timed
  // half. A peer's kernels are not counted either: the gate guards qmvlab's own code,
  // and a peer's native build differs from machine to machine.
  const std::uint32_t avx512 = CpuFeature::AVX512F | CpuFeature::AVX512BW | CpuFeature::AVX512VL |
                               CpuFeature::AVX512VNNI;
  std::vector<InstructionPoint> points;
  for (const KernelSpec* k : kernels)
    if ((k->cpu_features & avx512) == 0 && k->peer.empty() && k->supports(shapes[0])) points.emplace_back(k, shapes[0]);
  fmt::print("counting instructions of {} kernel(s) on {} under callgrind ({})\n", points.size(),
             to_string(shapes[0]), valgrind);
  std::fflush(stdout);
  const std::string work = (std::filesystem::temp_directory_path() / fmt::format("qmvlab-callgrind-{}", getpid())).string();
  const auto measured = count_instructions({std::filesystem::read_symlink("/proc/self/exe").string(), "gate-callgrind-child", "--points", format_points(points)},
                                           points, work);
  std::filesystem::remove_all(work);
  if (update) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    write_instruction_baseline(path, measured, valgrind);
    fmt::print("wrote the instruction baseline of {} kernel(s) to {}\n", measured.size(), path);
    return 0;
  }
  const auto baseline = read_instruction_baseline(path);
  std::vector<std::string> missing;
  const auto regressions = instruction_regressions(measured, baseline, tolerance, &missing);
  std::vector<std::vector<std::string>> rows;
  for (const InstructionCount& m : measured) {
    const auto b = std::find_if(baseline.begin(), baseline.end(),
                                [&](const InstructionCount& x) { return x.kernel == m.kernel && x.shape == m.shape; });
    rows.push_back({m.kernel, to_string(m.shape), fmt::format("{:.3f}", m.per_weight_byte()),
                    b == baseline.end() ? "-" : fmt::format("{:.3f}", b->per_weight_byte())});
  }
  print_table({"kernel", "shape", "instr/weight byte now", "baseline"}, rows);
  for (const auto& r : regressions) fmt::print("FAIL instructions {}\n", r);
  if (!missing.empty()) fmt::print("{} kernel(s) without an instruction baseline row (not gated)\n", missing.size());
  fmt::print("instructions: {} regression(s) beyond {:.0f}% against {}\n", regressions.size(), 100 * tolerance, path);
  return static_cast<int>(regressions.size());
}

}  // namespace

int GateCommand::run(const std::string&) {
  const Options& o = o_;
  if (o.child->parsed()) {
    if (!running_under_valgrind()) throw std::runtime_error("gate-callgrind-child runs under valgrind only");
    run_instrumented_calls(parse_points(o.child_points));
    return 0;
  }
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
    if (!r.not_run.empty()) fmt::print("FAIL check {} {}: not run: {}\n", r.spec->name, to_string(r.shape), r.not_run);
    for (const auto& c : r.cases)
      if (!c.passed) fmt::print("FAIL check {} {} ({}): {}\n", r.spec->name, to_string(r.shape), c.activation, c.failure);
  });
  fmt::print("check: {} passed, {} failed\n", passed, failed);
  if (!o.no_instructions)
    failed += gate_instructions(kernels, o.instructions_shape, o.instructions_baseline, o.instructions_tolerance,
                                o.update);
  if (o.no_speed) return failed ? 1 : 0;

  // Speed against the scalar reference, interleaved; without a baseline there is
  // nothing to compare with, and the kernels are not timed.
  const std::string path = expand_machine(o.baseline);
  if (!o.update && !std::filesystem::exists(path)) {
    fmt::print("no baseline at {}: speed not gated (record one with --update-baseline)\n", path);
    return failed ? 1 : 0;
  }
  if (!o.update)
    if (const std::string problem = input_file_problem(path); !problem.empty())
      throw std::invalid_argument(fmt::format("--baseline {}: {}", path, problem));
  fmt::print("timing {} kernel(s) against their scalar references, warm, {} interleaved repetitions\n",
             kernels.size(), o.config.repetitions);
  std::fflush(stdout);
  auto measured = measure_gate_ratios(kernels, shapes, o.config);
  if (o.update) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    write_gate_baseline(path, measured);
    fmt::print("wrote the baseline of {} ratio(s) to {}\n", measured.size(), path);
    return failed ? 1 : 0;
  }
  const auto baseline = read_gate_baseline(path);
  std::vector<std::string> missing;
  auto regressions = gate_regressions(measured, baseline, o.tolerance, &missing);
  if (!regressions.empty()) {
    // A load spike on a shared machine can fail one run; a slower kernel fails both.
    std::vector<const KernelSpec*> again;
    for (const GateRatio& m : measured)
      if (!gate_regressions({m}, baseline, o.tolerance, nullptr).empty())
        if (const KernelSpec* k = global_registry().find(m.kernel)) again.push_back(k);
    fmt::print("re-timing the {} kernel(s) below their baseline once more; each keeps its better run\n",
               again.size());
    std::fflush(stdout);
    for (const GateRatio& r : measure_gate_ratios(again, shapes, o.config))
      for (GateRatio& m : measured)
        if (m.kernel == r.kernel && m.shape == r.shape && m.threads == r.threads) m.ratio = std::max(m.ratio, r.ratio);
    regressions = gate_regressions(measured, baseline, o.tolerance, nullptr);
  }
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

std::unique_ptr<Command> gate_command(CLI::App& app) { return std::make_unique<GateCommand>(app); }

}  // namespace qmv
