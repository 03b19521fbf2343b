#include "harness/table.h"

#include <fmt/format.h>

#include <algorithm>

namespace qmv {

void print_table(const std::vector<std::string>& header, const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> w(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) {
    w[c] = header[c].size();
    for (const auto& r : rows) w[c] = std::max(w[c], r[c].size());
  }
  auto line = [&](const std::vector<std::string>& r) {
    std::string s = "|";
    for (std::size_t c = 0; c < r.size(); ++c) s += " " + r[c] + std::string(w[c] - r[c].size(), ' ') + " |";
    fmt::print("{}\n", s);
  };
  line(header);
  std::string sep = "|";
  for (auto x : w) sep += std::string(x + 2, '-') + "|";
  fmt::print("{}\n", sep);
  for (const auto& r : rows) line(r);
}

void print_plan(const std::vector<PlannedMatvec>& planned) {
  // In forward-pass order, whatever order the layers introduced the entries in.
  std::vector<PlannedMatvec> sorted = planned;
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const PlannedMatvec& a, const PlannedMatvec& b) { return a.op < b.op; });
  const bool routed = std::any_of(sorted.begin(), sorted.end(), [](const PlannedMatvec& p) { return p.outlier_kernel; });
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : sorted) {
    const bool planned_by_rule = p.why == "plan";
    // A fused pair's runner-up is a plain kernel run twice, a pair's a fused kernel once.
    // In a batch plan, a one-vector kernel runs once per sequence.
    auto per_vector = [&](const KernelSpec& k) {
      return p.batch > 1 && k.op == OpKind::MatVec ? fmt::format(" x{}", p.batch) : std::string();
    };
    const std::string twice = p.op == Op::FfnUpGate && p.runner_up && p.runner_up->op == OpKind::MatVec ? " x2" : "";
    rows.push_back({std::string(to_string(p.op)), std::string(to_string(p.weight)), to_string(p.shape), std::to_string(p.count),
                    p.kernel->name + per_vector(*p.kernel), p.gbps > 0 ? fmt::format("{:.1f}", p.gbps) : "-",
                    p.runner_up ? fmt::format("{}{}{} ({:.1f})", p.runner_up->name, twice, per_vector(*p.runner_up),
                                              p.runner_up_gbps)
                                : "-",
                    planned_by_rule ? "plan" : (p.source.empty() ? p.why : p.source)});
    if (routed)
      rows.back().push_back(p.outlier_kernel ? fmt::format("{} if max|x| > {:g} rms ({})", p.outlier_kernel->name,
                                                           p.outlier_k, p.outlier_why)
                                             : "- (reads f32)");
  }
  // A batch plan's figures are of one call for all the sequences (batch_plan).
  const int batch = sorted.empty() ? 1 : sorted.front().batch;
  const std::string gbps = batch > 1 ? fmt::format("GB/s ({} vectors)", batch) : "GB/s";
  std::vector<std::string> header = {"op", "weights", "shape", "matvecs", "kernel", gbps, "runner-up (GB/s)", "from"};
  if (routed) header.push_back("on outlier vectors");
  print_table(header, rows);
}

}  // namespace qmv
