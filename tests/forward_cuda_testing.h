// What the GPU forward tests share: synthetic models, the CPU plan they are compared
// with, and GPU plans made from it kernel by kernel (resolve_plan takes CPU kernels
// only, so the tests build GPU plans themselves).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/registry.h"
#include "model/config.h"
#include "model/plan.h"
#include "model/synthetic.h"
#include "tests/cli_run.h"
#include "tests/test_seed.h"

namespace qmv::testing {

// A synthetic model (fresh seed), made once per (preset, arch, mix) in this process.
inline std::string synthetic_model(const std::string& arch, const std::string& mix, const std::string& preset = "toy") {
  static std::map<std::string, std::string> made;
  const std::string key = preset + "-" + arch + "-" + mix;
  if (auto it = made.find(key); it != made.end()) return it->second;
  SyntheticSpec spec;
  spec.preset = preset;
  spec.arch = arch;
  spec.mix = mix;
  spec.seed = fresh_seed(("synthetic model " + key).c_str());
  const std::string path = tmp("gpu-fwd-" + key + ".gguf");
  make_model(spec, path);
  return made[key] = path;
}

// The CPU reference plan: scalar kernels with f32 activations, no fusion.
inline std::vector<PlannedMatvec> cpu_f32_plan(const ModelWeights& w) {
  std::string rules = "ffn_up_gate=none";
  for (WeightType t : kAllWeightTypes) rules += "," + std::string(to_string(t)) + "=" + scalar_reference(t)->name;
  return resolve_plan(KernelPlan::parse_rules(rules), w, 1);
}

// A GPU plan with the entries of `cpu`, each kernel replaced by pick(entry); a null
// pick leaves the entry out (the bind then names it).
inline std::vector<PlannedMatvec> gpu_plan(const std::vector<PlannedMatvec>& cpu,
                                           const std::function<const KernelSpec*(const PlannedMatvec&)>& pick) {
  std::vector<PlannedMatvec> out;
  for (PlannedMatvec p : cpu) {
    p.kernel = pick(p);
    p.why = "test";
    if (p.kernel) out.push_back(p);
  }
  return out;
}

// The simple GPU kernel of a legacy quant or float type, `<type>.cuda.warp_f32`
// (`.warp` for float weights; kernels/cuda/legacy_lanes.h); nullptr for the
// K-quants, whose GPU family is written elsewhere.
inline const KernelSpec* legacy_cuda_kernel(WeightType t) {
  if (block_values(t) == kSuperBlock) return nullptr;
  const std::string type(to_string(t));
  if (const KernelSpec* k = global_registry().find(type + ".cuda.warp_f32")) return k;
  return global_registry().find(type + ".cuda.warp");
}

inline double nmse(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - ref[i]) * (double(a[i]) - ref[i]);
    den += double(ref[i]) * ref[i];
  }
  return num / den;
}

inline int argmax(const float* v, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

}  // namespace qmv::testing
