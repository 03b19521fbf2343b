// Timing. A CPU point (kernel, shape, threads) becomes a Google Benchmark registered
// at run time. A CUDA point is timed with CUDA events around many back-to-back
// launches per repetition, inside an NVTX range named after the kernel; Q8_1 kernels
// are also timed with the on-GPU activation quantization before every launch, and the
// quantizer alone. Rows report GB/s against the measured peak (CPU: a STREAM-like
// read; GPU: a device-to-device copy) and, for GPU rows, the datasheet bandwidth.
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
  // CUDA kernels are timed once, with the first thread count (host threads do not
  // change a GPU kernel), so their rows' threads column is that count.
  bool warm = false;       // cold (default): rotate weight copies well past the LLC / GPU L2
  int repetitions = 5;
  double min_time_s = 0.1;  // per repetition
  // Repetitions of all points in random order, so drift of a noisy machine lands on
  // every kernel alike rather than on whichever ran during a slow spell.
  bool interleave = true;
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

// peak_gbps: measured read bandwidth per thread count (see peak.h); CUDA rows use the
// GPU's measured copy bandwidth (gpu_peak(), measured once per process). `on_row` is
// called as each point has all its repetitions (CSV rows written as they come);
// `on_progress` after every timed repetition.
BenchOutcome run_bench(const std::vector<const KernelSpec*>& kernels, const std::vector<Shape>& shapes,
                       const BenchConfig& config, const std::map<int, double>& peak_gbps,
                       const std::function<void(const BenchRow&, int done, int total)>& on_row = {},
                       const std::function<void(int runs_done, int runs_total)>& on_progress = {});

}  // namespace qmv
