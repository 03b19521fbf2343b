// Timing: every (kernel, shape, threads) point becomes a Google Benchmark registered
// at run time; rows report GB/s against the measured peak.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "harness/csv.h"
#include "kernels/kernel.h"

namespace qmv {

struct BenchConfig {
  std::vector<int> threads{1};
  bool warm = false;       // cold (default): rotate weight copies well past the LLC
  int repetitions = 5;
  double min_time_s = 0.1;  // per repetition
  std::uint64_t seed = 1;
};

struct BenchSkip {
  std::string kernel;
  Shape shape;
  std::string reason;
};

struct BenchOutcome {
  std::vector<BenchRow> rows;
  std::vector<BenchSkip> skipped;
};

// peak_gbps: measured read bandwidth per thread count (see peak.h). `on_row` is
// called as each point finishes (progress output, CSV rows written as they come).
BenchOutcome run_bench(const std::vector<const KernelSpec*>& kernels, const std::vector<Shape>& shapes,
                       const BenchConfig& config, const std::map<int, double>& peak_gbps,
                       const std::function<void(const BenchRow&, int done, int total)>& on_row = {});

}  // namespace qmv
