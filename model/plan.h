// The kernel plan: which registered kernel drives each matvec of the forward pass.
//
// A plan is a list of rules "op + weight type -> kernel", from the command line
// (`ffn_down.q6_K=q6_K.cpu.avx2_q8k,*=auto`) or a TOML file:
//
//   [default]                        # every op
//   q4_K = "q4_K.cpu.avx512vnni_x4_q8k"
//   "*" = "auto"
//   [ffn_down]
//   q6_K = "q6_K.cpu.avx2_q8k"
//
// The most specific rule wins: (op, type), then (op, any type), then (any op, type),
// then (any, any); with no rule at all a matvec is `auto`. The fused `ffn_up_gate`
// op only takes rules that name it: a kernel, `none`, or `auto`. With no such rule it
// is `auto` when both ffn_gate and ffn_up are.
//
// `auto` picks by measured speed (KernelSpeed: the harness's tuning store, or a bench
// CSV): per matvec the kernel fastest on that weight type, shape and thread count, and
// the fused gate+up kernel where one call beats the best gate plus the best up. Where
// nothing was measured it takes the first available kernel in kAutoOrder, the fixed
// order also used throughout by the `static` plan. Resolving a plan against a model
// checks every choice (weight type, op kind, shape, CPU features) before anything runs.
//
// Outlier routing (off by default): a matvec whose kernel reads int8 activations
// (Q8_K, Q8_1) runs an f32-activation sibling instead for an activation vector with
// max |x| > k * rms(x) (kernels/outliers.h), where int8 loses most. The sibling is
// the f32 kernel the same auto rules pick for the op, weight type and shape (or one
// the plan names for the weight type). In TOML, or as rules `outliers.KEY=VALUE`:
//
//   [outliers]
//   route = true
//   k = 8                              # the threshold, >= 0
//   q6_K = "q6_K.cpu.avx2_f32"         # optional: the sibling for a weight type
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/kernel.h"
#include "kernels/outliers.h"
#include "model/config.h"
#include "model/ops.h"

namespace qmv {

// A plan names the matvec ops of model/ops.h ("attn_q", ..., "lm_head"). `ffn_up_gate`
// is the fused op that computes gate and up from one read of the activation; where it
// runs, ffn_gate and ffn_up do not.
// The plan value that turns fusion off: `ffn_up_gate=none`.
inline constexpr const char* kNoKernel = "none";
// The fixed order: variant suffixes `auto` tries where it has no measurement, and the
// `static` plan everywhere; a weight type takes the first suffix it has. It is a
// fallback, not a finding: which kernel is fastest differs between CPUs, which is why
// `auto` measures (harness/auto_plan.h). The row-interleaved kernels lead, then the
// plain multi-row ones, then the references.
inline constexpr const char* kAutoOrder[] = {"avx512vnni_r8x4_q8k",  "avx512vnni_r8x4_q8_1", "avx512vnni_r8x2_q8k",
                                             "avx512vnni_r8x2_q8_1", "avx512vnni_x4_q8k",    "avx2_r8x4_q8_1",
                                             "avx2_r8x2_q8_1",       "avx2_r8x4_q8k",        "avx2_r8x2_q8k",
                                             "avx2_x2_q8k",          "avx512vnni_x2_q8k",    "avx512vnni_x4_q8_1",
                                             "avx512vnni_q8k",       "avx512vnni_q8_1",      "avx2_x4_q8k",
                                             "avx2_x4_q8_1",         "avx2_q8k",             "avx2_q8_1",
                                             "avx2_f32",             "avx2_x4",              "avx2",
                                             "scalar_q8k",           "scalar_f32",           "scalar"};
// The same for the fused up+gate kernels; a fused kernel not listed comes after these.
inline constexpr const char* kAutoOrderFused[] = {
    "avx512vnni_r8x2_up_gate_q8k", "avx512vnni_r8x2_up_gate_q8_1", "avx2_r8x2_up_gate_q8_1", "avx2_r8x2_up_gate_q8k",
    "avx512vnni_up_gate_q8k",      "avx2_r8_up_gate_q8_1",         "avx2_r8_up_gate_q8k"};
// The same for CUDA kernels (`--device cuda`): the half-warp and multi-warp kernels the
// first GPU runs measured fastest (results/nvidia-h100-80gb-hbm3/bench.csv), then the
// warp-per-row kernels every type has.
inline constexpr const char* kAutoOrderCuda[] = {"halfwarp_dp4a_q8_1", "warpx2_f32",     "warpx4_f32", "warpx3_f32",
                                                 "dp4a_q8_1",          "warp_dp4a_q8_1", "warp_f32",   "warp"};

struct PlanError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Whether int8-activation matvecs fall back to their f32 siblings on outlier vectors.
struct OutlierRouting {
  bool route = false;
  double k = kDefaultOutlierK;
};

class KernelPlan {
 public:
  // The plan every `auto` of which takes the fixed order (kAutoOrder), measurements or not.
  static KernelPlan static_order();
  bool uses_static_order() const { return static_order_; }
  // "op.type=kernel" rules separated by commas; op or type may be "*" or left out
  // ("ffn_down=k" is ffn_down for any type, "q6_K=k" any op for q6_K).
  static KernelPlan parse_rules(const std::string& rules);
  static KernelPlan load_toml(const std::string& path);
  // The TOML text of a plan; `source` names it in errors, which give the line too.
  static KernelPlan parse_toml(std::string_view text, const std::string& source);
  // Adds or replaces one rule (op and type "*" for any).
  void set(const std::string& op, const std::string& type, const std::string& kernel);
  // The rules of `later` override this plan's (command-line rules after a file).
  void merge(const KernelPlan& later);
  // The rule for an op and weight type ("auto" when none applies).
  std::string lookup(Op op, WeightType type) const;
  // Only rules that name `op` itself ("" when none).
  std::string lookup_named(Op op, WeightType type) const;
  std::string describe() const;

  // Outlier routing on or off, and its k; what is not given stays as it was. Throws
  // PlanError for a k that is negative or not a number.
  void set_outlier_routing(std::optional<bool> route, std::optional<double> k = {});
  OutlierRouting outlier_routing() const;
  // The sibling named for a weight type ("*" for any); "" when auto picks it.
  void set_outlier_kernel(const std::string& type, const std::string& kernel);
  std::string lookup_outlier_kernel(WeightType type) const;

 private:
  std::map<std::pair<std::string, std::string>, std::string> rules_;
  std::optional<bool> route_outliers_;
  std::optional<double> outlier_k_;
  std::map<std::string, std::string> outlier_kernels_;  // weight type or "*" -> kernel
  bool static_order_ = false;
};

// A kernel's measured speed at one shape, what `auto` picks the fastest kernel by (the
// harness reads them from its tuning store or a bench CSV).
struct KernelSpeed {
  std::string kernel, weight_type;
  std::int64_t rows = 0, cols = 0;
  int threads = 0;
  double gbps_median = 0;
  double time_median_us = 0;  // 0: unknown (then gbps ranks)
  std::string source;         // where the figure came from, for the plan table: "measured now", "store, 2026-11-28"
  // Activation vectors per call the figure is of: 1 (what resolve_plan ranks by), or a
  // batch kernel's count (what batch_plan ranks by, model/batch_forward.h).
  int n = 1;
};

struct PlannedMatvec {
  Op op = Op::AttnQ;
  WeightType weight;
  Shape shape;
  const KernelSpec* kernel = nullptr;
  std::string why;  // "plan", "auto: fastest measured", "auto: static order", ...
  int count = 0;    // how many matvecs of the model share this (op, type, shape)
  // For an auto choice made by speed: the kernel's figure, where it came from
  // (KernelSpeed::source), and the next fastest kernel with its figure (for ffn_up_gate,
  // the best plain kernel, run twice; for a gate or up left unfused, the best fused one).
  double gbps = 0;
  std::string source;
  const KernelSpec* runner_up = nullptr;
  double runner_up_gbps = 0;
  // For a CPU auto choice made by time at the matvec's own shape: the other kernels
  // measured within kTrialReach of the pick that read the same weights
  // (reads_same_weights), fastest first, at most kMaxTrialKernels. The store cannot
  // tell them apart; the CPU forward may, in its own steps (model/kernel_trials.h).
  std::vector<const KernelSpec*> trial_kernels;
  // In a batch plan (batch_forward.h), the sequences decoded together: a one-vector
  // kernel (OpKind::MatVec) there runs once per sequence. 1 in a one-vector plan.
  int batch = 1;
  // With outlier routing, for an int8-activation kernel: the f32-activation kernel
  // that runs instead on a vector with max |x| > outlier_k * rms. For a fused op it
  // is a fused kernel, or a plain one called once per matrix. nullptr: not routed.
  const KernelSpec* outlier_kernel = nullptr;
  std::string outlier_why;
  double outlier_k = kDefaultOutlierK;
};

// Whether `a` and `b` read the same weights: one op and type, and the same transform
// of the matrix (one prepare(), so one prepared copy serves both), or none (both read
// the plain layout). A forward can swap one for the other between calls at no memory.
bool reads_same_weights(const KernelSpec& a, const KernelSpec& b);

// How near auto's pick a kernel's stored time must be for the CPU forward to try it in
// the run, and how many such kernels an entry takes.
inline constexpr double kTrialReach = 1.10;
inline constexpr int kMaxTrialKernels = 3;

// Resolves the plan for every matvec of the model (layers with the same op, type and
// shape share one entry) with kernels of `backend`. `bench` (measured speeds, see
// kernel_speeds in harness/csv.h) may be empty. Throws
// PlanError naming the op, the weight type and the kernel when a choice cannot run.
std::vector<PlannedMatvec> resolve_plan(const KernelPlan& plan, const ModelWeights& weights, int threads,
                                        const std::vector<KernelSpeed>& bench = {}, Backend backend = Backend::CPU);

// The f32-activation sibling of `kernel` for a matvec of `op` on shape `s` (the
// kernel's weight type): the plan's outliers rule for the weight type when it names
// one, else the auto rules limited to f32-activation kernels of the kernel's backend
// (the fastest in `bench`, else the default order; for a fused op a fused f32 kernel
// where auto would fuse, else a plain one). `why` says which. Throws PlanError when
// none can run.
const KernelSpec* outlier_sibling(const KernelPlan& plan, std::string_view op, const KernelSpec& kernel, Shape s,
                                  int threads, const std::vector<KernelSpeed>& bench, std::string& why);

// Loads a plan given as "auto", "static" (KernelPlan::static_order), a TOML file (an
// existing path or a name ending in .toml), or OP.TYPE=KERNEL rules.
KernelPlan load_plan(const std::string& spec);

// A matvec `auto` has to decide under `plan` (no rule names its kernel): the op kind,
// weight type and shape that speeds must cover. The fused kind stands for the gate+up
// pairs that may fuse (its plain kind is listed too, to compare with).
struct AutoMatvec {
  OpKind kind = OpKind::MatVec;
  WeightType weight = WeightType::Q4_K;
  Shape shape;
  std::vector<Op> ops;  // the plan ops it serves
  int count = 0;                 // calls per token
};
std::vector<AutoMatvec> auto_matvecs(const KernelPlan& plan, const ModelWeights& weights);
// `--route-outliers[=K]`: turns outlier routing on, with k = K when given (else the
// plan's k, 8 by default). Throws PlanError naming the option for a bad K.
void route_outliers_option(KernelPlan& plan, const std::string& k_text);

}  // namespace qmv
