// The correctness check: every kernel against an Eigen double-precision reference.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/kernel.h"

namespace qmv {

// Error of y against r: NMSE = sum (y-r)^2 / sum r^2, and max |y-r|. A NaN or inf
// anywhere in y makes both infinite.
//
// With `abs_products` (a[i] = sum_j |W_ij x_j|) and the dot length, the denominator is
// floored at sum a^2 / cols, the energy a random-sign sum of those products has: a
// row whose sum happens to cancel (rows = 1 makes this likely sooner or later) then
// does not turn ordinary float rounding into a huge relative error, while on typical
// data the floor is below sum r^2 and the NMSE is the plain one.
// max_rel is the worst single row, |y-r| / max(|r|, |W||x| / sqrt(cols)) with the same
// floor: an error confined to one row of small scale barely moves the NMSE of a
// matrix whose rows span two decades, but it shows here.
struct ErrorStats {
  double nmse = 0;
  double max_abs = 0;
  double max_rel = 0;
};
ErrorStats compare(const float* y, const double* r, std::int64_t n,
                   const double* abs_products = nullptr, std::int64_t cols = 1);

// kernel: against the reference on the activation values the kernel saw (after its
// quantization): arithmetic errors only, the same bound for every activation case.
// end_to_end: against the float activations, activation quantization included: the
// number a user cares about. Its bound on Gaussian activations catches a broken
// activation path; on outlier activations the loss is what is being measured, so the
// bound there only catches a collapse (the CSV has the figure).
struct Tolerance {
  double kernel_nmse;
  double kernel_max_rel;
  double end_to_end_nmse_gaussian;
  double end_to_end_nmse_outliers;
};
Tolerance tolerance_for(ActFormat f);
// The bounds a kernel is held to: its activation format's, or, for a kernel that
// converts its f32 activation itself, those of the format it converts to.
Tolerance tolerance_for(const KernelSpec& k);

struct CheckConfig {
  std::uint64_t seed = 0;
  int threads = 1;
  int outlier_channels = 4;
  float outlier_min_x = 20.0f;  // outliers drawn in [min_x, max_x] times the rms
  float outlier_max_x = 50.0f;
  // A folder where each weight type and shape's random weights and references are kept
  // once made, and read back by a later run with the same seed: the child processes of
  // an isolated check share them instead of each making its own. Empty: none.
  std::string problem_cache;
};

struct CaseResult {
  std::string activation;  // "gaussian" or "outliers"
  // A batch kernel's case: the number of vectors of the call (each its own draw of
  // the activation kind), judged by its worst vector; 0 for the other kernels.
  int n = 0;
  ErrorStats kernel;
  ErrorStats end_to_end;
  bool passed = false;
  std::string failure;  // why it failed, empty when passed
};

// A case as results files and the check's lines name it: its activation, and for a
// batch kernel's case the vectors of the call ("gaussian n=3"); parse_case_label
// reads it back into c.activation and c.n.
std::string case_label(const CaseResult& c);
void parse_case_label(const std::string& label, CaseResult& c);

struct CheckResult {
  const KernelSpec* spec = nullptr;
  Shape shape;
  std::string skipped;  // set when not run: unsupported shape, unavailable kernel
  std::vector<CaseResult> cases;
  // Set when it could have run here but did not: an earlier kernel's fault lost the
  // process's CUDA context. A fresh process can still check it.
  std::string not_run;
  bool passed() const;
};

// Why `k` cannot be checked on `shape` here (unavailable, or a shape its rule excludes);
// empty when it can.
std::string check_skip_reason(const KernelSpec& k, Shape shape);

// Checks every kernel on every shape. Kernels of one weight type share one random
// matrix per shape and one reference pass. `on_result` is called as results arrive
// (for progress output).
std::vector<CheckResult> run_check(const std::vector<const KernelSpec*>& kernels,
                                   const std::vector<Shape>& shapes, const CheckConfig& config,
                                   const std::function<void(const CheckResult&)>& on_result = {});

// run_check with each kernel in a child process of its own (`executable`, a qmvlab, runs
// `check` on that kernel's shapes with the same seed): a crash, a CUDA fault, a process
// still running after `kernel_timeout_s` or a failed exit is that kernel's failure, on
// the shape it reached (and the shapes after it, not checked), and the other kernels are
// still checked. The pairs it skips are skipped here, as run_check skips them.
struct IsolateConfig {
  std::string executable;
  std::vector<std::string> child_options;  // added to each child's command line (CPU tiling)
  double kernel_timeout_s = 600;
};
std::vector<CheckResult> run_check_isolated(const std::vector<const KernelSpec*>& kernels,
                                            const std::vector<Shape>& shapes, const CheckConfig& config,
                                            const IsolateConfig& isolate,
                                            const std::function<void(const CheckResult&)>& on_result = {});

}  // namespace qmv
