#include "harness/gate.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <stdexcept>

#include "harness/bench.h"
#include "harness/csv.h"
#include "harness/csv_columns.h"
#include "harness/machine.h"
#include "kernels/availability.h"
#include "kernels/former_names.h"
#include "kernels/registry.h"

namespace qmv {

const KernelSpec* gate_reference(const KernelSpec& k) {
  return scalar_reference(k.weight);
}

std::vector<GateRatio> measure_gate_ratios(const std::vector<const KernelSpec*>& kernels,
                                           const std::vector<Shape>& shapes, const GateConfig& config) {
  // Group by (reference, shape) so each group is one interleaved bench run.
  std::map<std::pair<const KernelSpec*, std::pair<std::int64_t, std::int64_t>>, std::vector<const KernelSpec*>> groups;
  for (const KernelSpec* k : kernels) {
    const KernelSpec* ref = gate_reference(*k);
    if (!ref || k->backend != Backend::CPU || !availability(*k).available) continue;
    const Shape* largest = nullptr;
    for (const Shape& s : shapes)
      if (k->supports(s) && ref->supports(s) && (!largest || s.rows * s.cols > largest->rows * largest->cols))
        largest = &s;
    if (!largest) continue;
    auto& g = groups[{ref, {largest->rows, largest->cols}}];
    if (std::find(g.begin(), g.end(), ref) == g.end()) g.push_back(ref);
    if (std::find(g.begin(), g.end(), k) == g.end()) g.push_back(k);
  }
  BenchConfig bench;
  bench.threads = {config.threads};
  bench.warm = true;  // compute efficiency against the reference, not memory noise
  bench.repetitions = config.repetitions;
  bench.min_time_s = config.min_time_s;
  bench.interleave = true;
  std::vector<GateRatio> out;
  for (const auto& [key, group] : groups) {
    const Shape shape{key.second.first, key.second.second};
    const BenchOutcome res = run_bench(group, {shape}, bench, {{config.threads, 0.0}});
    double ref_us = 0;
    for (const BenchRow& r : res.rows)
      if (r.kernel == key.first->name) ref_us = r.time_median_us;
    for (const BenchRow& r : res.rows)
      if (ref_us > 0 && r.time_median_us > 0)
        out.push_back({r.kernel, key.first->name, shape, config.threads, ref_us / r.time_median_us});
  }
  std::sort(out.begin(), out.end(), [](const GateRatio& a, const GateRatio& b) { return a.kernel < b.kernel; });
  return out;
}

std::vector<std::string> gate_regressions(const std::vector<GateRatio>& measured,
                                          const std::vector<GateRatio>& baseline, double tolerance,
                                          std::vector<std::string>* missing) {
  std::vector<std::string> failures;
  for (const GateRatio& m : measured) {
    const auto b = std::find_if(baseline.begin(), baseline.end(), [&](const GateRatio& x) {
      return x.kernel == m.kernel && x.reference == m.reference && x.shape == m.shape && x.threads == m.threads;
    });
    if (b == baseline.end()) {
      if (missing) missing->push_back(m.kernel);
      continue;
    }
    if (m.ratio < b->ratio * (1.0 - tolerance))
      failures.push_back(fmt::format("{} {} threads={}: {:.2f}x {} now, baseline {:.2f}x (allowed down to {:.2f}x)",
                                     m.kernel, to_string(m.shape), m.threads, m.ratio, m.reference, b->ratio,
                                     b->ratio * (1.0 - tolerance)));
  }
  return failures;
}

std::vector<GateRatio> read_gate_baseline(const std::string& path) {
  constexpr std::array<const char*, 6> kNames = {"kernel", "reference", "rows", "cols", "threads", "ratio"};
  std::vector<GateRatio> out;
  csv_columns::read(path, "gate baseline", kNames, kNames.size(), [&](const csv_columns::Fields& f) {
    GateRatio g;
    // A baseline recorded before a kernel was renamed gates it under its name now.
    g.kernel = std::string(current_kernel_name(f["kernel"]));
    g.reference = std::string(current_kernel_name(f["reference"]));
    g.shape.rows = f.required<std::int64_t>("rows");
    g.shape.cols = f.required<std::int64_t>("cols");
    g.threads = f.required<int>("threads");
    g.ratio = f.required<double>("ratio");
    out.push_back(std::move(g));
  });
  return out;
}

void write_gate_baseline(const std::string& path, const std::vector<GateRatio>& ratios) {
  const MachineInfo& m = machine_info();
  CsvWriter csv(path, {"kernel", "reference", "rows", "cols", "threads", "ratio", "machine", "compiler", "git_commit"},
                false);
  for (const GateRatio& g : ratios)
    csv.write({g.kernel, g.reference, std::to_string(g.shape.rows), std::to_string(g.shape.cols),
               std::to_string(g.threads), fmt::format("{:.4f}", g.ratio), m.machine, m.compiler, m.git_commit});
}

}  // namespace qmv
