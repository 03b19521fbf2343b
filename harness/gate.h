// The performance half of the regression gate: each kernel's speed as a ratio to its
// weight type's scalar reference, timed interleaved in the same run (so the drift of a
// shared machine cancels), against a committed baseline of those ratios.
#pragma once

#include <string>
#include <vector>

#include "kernels/kernel.h"

namespace qmv {

struct GateRatio {
  std::string kernel;
  std::string reference;
  Shape shape;
  int threads = 1;
  double ratio = 0;  // reference median time / kernel median time: how many times faster
};

struct GateConfig {
  int threads = 1;
  int repetitions = 9;
  double min_time_s = 0.02;
};

// The kernel every kernel of a weight type is timed against: its plain scalar
// reference (nullptr when the type has none).
const KernelSpec* gate_reference(const KernelSpec& k);

// For each kernel (references included, at ratio 1), on the largest of `shapes` that
// it and its reference support: the ratio, timed warm and interleaved.
std::vector<GateRatio> measure_gate_ratios(const std::vector<const KernelSpec*>& kernels,
                                           const std::vector<Shape>& shapes, const GateConfig& config);

// One line per kernel slower than its baseline ratio by more than `tolerance`
// (0.3: a ratio below 70% of the baseline's), naming the kernel, both figures and the
// shape. Kernels without a baseline row are not failures; `missing` lists them.
std::vector<std::string> gate_regressions(const std::vector<GateRatio>& measured,
                                          const std::vector<GateRatio>& baseline, double tolerance,
                                          std::vector<std::string>* missing = nullptr);

std::vector<GateRatio> read_gate_baseline(const std::string& path);
void write_gate_baseline(const std::string& path, const std::vector<GateRatio>& ratios);

}  // namespace qmv
