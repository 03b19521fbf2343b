// The int8 accuracy question, measured. Int8 activation formats (Q8_K, Q8_1) give a
// block one scale, so a few "massive activation" channels tens of times the rms
// coarsen the quantization of everything around them. For each kernel: the
// end-to-end NMSE (against a double-precision reference on the float activations,
// the check's end_to_end figure) on Gaussian activations and on activations with
// 1..4 outlier channels at exact multiples of the rms, over several trials; and for
// int8 kernels, the NMSE with outlier routing (kernels/outliers.h, model/plan.h):
// vectors that trip max|x| > k rms go to the kernel's f32 sibling. Also what routing
// costs: the test's time against the matvec it guards, and how often Gaussian
// vectors trip it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/kernel.h"
#include "kernels/outliers.h"

namespace qmv {

// An activation case: `channels` outlier channels at `multiplier` x the rms of the
// Gaussian channels (harness/data.h activation_with_exact_outliers); 0 channels is
// the plain Gaussian vector.
struct OutlierCase {
  int channels = 0;
  float multiplier = 0;
  bool gaussian() const { return channels == 0; }
};
std::string to_string(OutlierCase c);  // "gaussian", "2ch@25x"

struct AccuracyConfig {
  std::vector<int> channels{1, 2, 3, 4};
  std::vector<float> multipliers{10, 25, 50};
  int trials = 5;
  double k = kDefaultOutlierK;
  int threads = 1;
  std::uint64_t seed = 1;
  // The Gaussian case, then every channels x multiplier case.
  std::vector<OutlierCase> cases() const;
};

// One kernel, shape and case over all trials.
struct AccuracyResult {
  const KernelSpec* spec = nullptr;
  Shape shape;
  OutlierCase outlier_case;
  std::vector<double> nmse;         // per trial; a fused kernel's worse output
  std::vector<double> peak_to_rms;  // per trial: max|x| / rms of the activation vector
  std::vector<bool> tripped;        // per trial: max|x| > k rms
  // Int8 kernels: the f32 sibling outlier vectors go to (the plan's auto rules), and
  // per trial the NMSE with routing: the sibling's when the vector tripped, else own.
  const KernelSpec* sibling = nullptr;
  std::vector<double> routed_nmse;
  std::string note;  // why there is no sibling, when an int8 kernel has none
};

struct AccuracySkip {
  const KernelSpec* spec = nullptr;
  Shape shape;
  std::string reason;
};

double median_of(std::vector<double> v);

// Every kernel on every shape. Per weight type, shape and trial: one random matrix
// (two when a fused kernel is among them), one vector per case sharing its Gaussian
// values with the others (so cases differ only in their outliers), one reference
// product; every kernel and every needed sibling runs every case. `on_results` gets
// the results of one kernel and shape (all cases) as they complete, `on_progress` a
// line after each trial.
struct AccuracyOutcome {
  std::vector<AccuracyResult> results;
  std::vector<AccuracySkip> skipped;
};
AccuracyOutcome run_accuracy(const std::vector<const KernelSpec*>& kernels, const std::vector<Shape>& shapes,
                             const AccuracyConfig& config,
                             const std::function<void(const std::vector<AccuracyResult>&)>& on_results = {},
                             const std::function<void(const AccuracySkip&)>& on_skip = {},
                             const std::function<void(const std::string&)>& on_progress = {});

// What routing costs, for one int8 kernel on one shape, timed in one interleaved
// loop (medians over repetitions): the outlier test on a vector of cols values, the
// kernel's activation quantization, the kernel and its f32 sibling (cold weights, as
// decode reads them).
struct RoutingCost {
  const KernelSpec* spec = nullptr;
  const KernelSpec* sibling = nullptr;
  Shape shape;
  int repetitions = 0;
  double test_us = 0, quantize_us = 0, kernel_us = 0, sibling_us = 0;
};
struct CostConfig {
  int repetitions = 15;
  int threads = 1;
  double k = kDefaultOutlierK;
  std::uint64_t seed = 1;
};
std::vector<RoutingCost> measure_routing_cost(const std::vector<const KernelSpec*>& int8_kernels,
                                              const std::vector<Shape>& shapes, const CostConfig& config,
                                              const std::function<void(const RoutingCost&)>& on_row = {});

// False positives: how many of `vectors` fresh Gaussian vectors of n values trip
// max|x| > k rms, and the largest max|x| / rms among them.
struct FalsePositives {
  std::int64_t n = 0;
  std::int64_t vectors = 0;
  std::int64_t tripped = 0;
  double max_peak_to_rms = 0;
};
FalsePositives count_false_positives(std::int64_t n, std::int64_t vectors, double k, std::uint64_t seed);

}  // namespace qmv
