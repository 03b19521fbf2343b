#include "model/plan.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "harness/machine.h"
#include "harness/table.h"
#include "kernels/registry.h"

namespace qmv {
namespace {

bool known_op(const std::string& op) {
  return op == "*" || std::any_of(std::begin(kMatvecOps), std::end(kMatvecOps),
                                  [&](const char* o) { return op == o; });
}

std::string canonical_type(const std::string& type, const std::string& where) {
  if (type == "*") return type;
  WeightType t;
  if (!parse_weight_type(type, t)) throw PlanError(fmt::format("plan: unknown weight type '{}' in {}", type, where));
  return std::string(to_string(t));
}

std::string op_list() {
  std::string s;
  for (const char* o : kMatvecOps) s += (s.empty() ? "" : ", ") + std::string(o);
  return s;
}

}  // namespace

void KernelPlan::set(const std::string& op, const std::string& type, const std::string& kernel) {
  if (!known_op(op)) throw PlanError(fmt::format("plan: unknown op '{}' (ops: {}, or *)", op, op_list()));
  if (kernel.empty()) throw PlanError(fmt::format("plan: empty kernel for {}.{}", op, type));
  rules_[{op, canonical_type(type, op)}] = kernel;
}

void KernelPlan::merge(const KernelPlan& later) {
  for (const auto& [key, kernel] : later.rules_) rules_[key] = kernel;
}

KernelPlan KernelPlan::parse_rules(const std::string& rules) {
  KernelPlan plan;
  std::size_t start = 0;
  while (start <= rules.size()) {
    std::size_t end = rules.find(',', start);
    if (end == std::string::npos) end = rules.size();
    const std::string rule = rules.substr(start, end - start);
    start = end + 1;
    if (rule.empty()) continue;
    const std::size_t eq = rule.find('=');
    if (eq == std::string::npos)
      throw PlanError(fmt::format("plan: rule '{}' is not OP.TYPE=KERNEL", rule));
    const std::string lhs = rule.substr(0, eq), kernel = rule.substr(eq + 1);
    const std::size_t dot = lhs.find('.');
    std::string op = "*", type = "*";
    if (dot != std::string::npos) {
      op = lhs.substr(0, dot);
      type = lhs.substr(dot + 1);
    } else if (known_op(lhs)) {
      op = lhs;
    } else {
      WeightType t;
      if (!parse_weight_type(lhs, t))
        throw PlanError(fmt::format("plan: '{}' in rule '{}' is neither an op ({}) nor a weight type", lhs,
                                    rule, op_list()));
      type = lhs;
    }
    plan.set(op.empty() ? "*" : op, type.empty() ? "*" : type, kernel);
  }
  return plan;
}

KernelPlan KernelPlan::load_toml(const std::string& path) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw PlanError(fmt::format("{}: {} (line {})", path, e.description(), e.source().begin.line));
  }
  KernelPlan plan;
  for (const auto& [section, node] : root) {
    const std::string op = section == "default" ? "*" : std::string(section.str());
    const toml::table* t = node.as_table();
    if (!t) throw PlanError(fmt::format("{}: [{}] must be a table of TYPE = \"KERNEL\"", path, section.str()));
    for (const auto& [type, value] : *t) {
      const auto kernel = value.value<std::string>();
      if (!kernel) throw PlanError(fmt::format("{}: {}.{} must be a kernel name string", path, section.str(), type.str()));
      try {
        plan.set(op, std::string(type.str()), *kernel);
      } catch (const PlanError& e) {
        throw PlanError(fmt::format("{}: {}", path, e.what()));
      }
    }
  }
  return plan;
}

std::string KernelPlan::lookup(const std::string& op, WeightType type) const {
  const std::string t(to_string(type));
  for (const auto& key : {std::pair<std::string, std::string>{op, t}, {op, "*"}, {"*", t}, {"*", "*"}}) {
    const auto it = rules_.find(key);
    if (it != rules_.end()) return it->second;
  }
  return "auto";
}

std::string KernelPlan::describe() const {
  std::string s;
  for (const auto& [key, kernel] : rules_) s += fmt::format("{}{}.{}={}", s.empty() ? "" : ",", key.first, key.second, kernel);
  return s.empty() ? "*=auto" : s;
}

std::string KernelPlan::lookup_named(const std::string& op, WeightType type) const {
  const std::string t(to_string(type));
  for (const auto& key : {std::pair<std::string, std::string>{op, t}, {op, "*"}}) {
    const auto it = rules_.find(key);
    if (it != rules_.end()) return it->second;
  }
  return "";
}

namespace {

bool runnable(const KernelSpec& k, OpKind op, WeightType w, Shape s) {
  return k.op == op && k.backend == Backend::CPU && k.weight == w && k.supports(s) && availability(k).available;
}

// The bench row nearest in shape (log distance of rows and cols) for each kernel of
// the op kind; its median GB/s goes to `gbps`.
const KernelSpec* fastest_in_bench(const std::vector<BenchRow>& bench, OpKind op, WeightType w, Shape s,
                                   int threads, double& gbps) {
  const KernelSpec* best = nullptr;
  double best_gbps = 0, best_dist = 0;
  for (const BenchRow& r : bench) {
    if (r.threads != threads || r.weight_type != to_string(w)) continue;
    const KernelSpec* k = global_registry().find(r.kernel);
    if (!k || !runnable(*k, op, w, s)) continue;
    const double dist = std::abs(std::log(double(r.rows) / s.rows)) + std::abs(std::log(double(r.cols) / s.cols));
    if (!best || dist < best_dist - 1e-9 || (std::abs(dist - best_dist) <= 1e-9 && r.gbps_median > best_gbps)) {
      best = k;
      best_gbps = r.gbps_median;
      best_dist = dist;
    }
  }
  gbps = best_gbps;
  return best;
}

const KernelSpec* first_in_default_order(WeightType w, Shape s) {
  for (const char* variant : kAutoOrder) {
    const std::string name = fmt::format("{}.cpu.{}", to_string(w), variant);
    if (const KernelSpec* k = global_registry().find(name); k && runnable(*k, OpKind::MatVec, w, s)) return k;
  }
  return nullptr;
}

// The first available fused kernel for the type, by name.
const KernelSpec* first_fused(WeightType w, Shape s) {
  for (const KernelSpec& k : global_registry().all())
    if (runnable(k, OpKind::FusedUpGate, w, s)) return &k;
  return nullptr;
}

const KernelSpec* auto_matvec(const std::string& op, WeightType w, Shape s, int threads,
                              const std::vector<BenchRow>& bench, std::string& why) {
  double gbps = 0;
  if (const KernelSpec* k = fastest_in_bench(bench, OpKind::MatVec, w, s, threads, gbps)) {
    why = fmt::format("auto: fastest in the bench CSV at the nearest shape ({:.1f} GB/s)", gbps);
    return k;
  }
  if (const KernelSpec* k = first_in_default_order(w, s)) {
    why = "auto: default order";
    return k;
  }
  throw PlanError(fmt::format("plan: no available kernel for {} ({} {})", op, to_string(w), to_string(s)));
}

// A fused kernel for gate+up when one runs here and, given bench rows, moves bytes
// at least as fast as the best plain kernel; nullptr keeps the pair separate.
const KernelSpec* auto_fused(WeightType w, Shape s, int threads, const std::vector<BenchRow>& bench,
                             std::string& why) {
  double fused_gbps = 0, single_gbps = 0;
  const KernelSpec* fused = fastest_in_bench(bench, OpKind::FusedUpGate, w, s, threads, fused_gbps);
  const KernelSpec* single = fastest_in_bench(bench, OpKind::MatVec, w, s, threads, single_gbps);
  if (fused) {
    if (single && single_gbps > fused_gbps) return nullptr;
    why = fmt::format("auto: fused, {:.1f} GB/s in the bench CSV against {:.1f} for the best single", fused_gbps,
                      single_gbps);
    return fused;
  }
  if (!bench.empty() && single) return nullptr;  // measured singles, unmeasured fusion: keep what was measured
  fused = first_fused(w, s);
  if (fused) why = "auto: fused (reads the activation once)";
  return fused;
}

// Checks an explicitly named kernel against the matvec it would run.
const KernelSpec* named_kernel(const std::string& choice, const std::string& op, OpKind kind, WeightType w,
                               Shape s) {
  const KernelSpec* k = global_registry().find(choice);
  const std::string what = fmt::format("plan: {} ({} {}) cannot use {}", op, to_string(w), to_string(s), choice);
  if (!k) throw PlanError(what + ": no such kernel (see `qmvlab list`)");
  if (k->weight != w) throw PlanError(fmt::format("{}: it reads {} weights", what, to_string(k->weight)));
  if (k->op != kind)
    throw PlanError(what + (kind == OpKind::MatVec ? ": it is a fused op, not a plain matvec"
                                                   : ": it is a plain matvec, not a fused gate+up kernel"));
  if (k->backend != Backend::CPU) throw PlanError(what + ": the CPU runner takes CPU kernels");
  if (!k->supports(s)) throw PlanError(fmt::format("{}: shape not supported (needs {})", what, k->shape_rule));
  if (const Availability av = availability(*k); !av.available) throw PlanError(what + ": " + av.reason);
  return k;
}

WeightType weight_type(const std::string& op, const gguf::Tensor* t) {
  WeightType w;
  if (!parse_weight_type(t->type->name, w))
    throw PlanError(fmt::format("plan: {} ('{}') is {}, a type no kernel here reads", op, t->name, t->type->name));
  return w;
}

Shape matrix_shape(const gguf::Tensor* t) {
  return {static_cast<std::int64_t>(t->dims[1]), static_cast<std::int64_t>(t->dims[0])};
}

}  // namespace

std::vector<PlannedMatvec> resolve_plan(const KernelPlan& plan, const ModelWeights& weights, int threads,
                                        const std::vector<BenchRow>& bench) {
  std::vector<PlannedMatvec> out;
  // Adds one matvec to its (op, type, shape) entry, resolving the entry the first time.
  auto add = [&](const std::string& op, OpKind kind, WeightType w, Shape s, const KernelSpec* chosen,
                 const std::string& chosen_why) {
    auto same = std::find_if(out.begin(), out.end(),
                             [&](const PlannedMatvec& p) { return p.op == op && p.weight == w && p.shape == s; });
    if (same != out.end()) return void(++same->count);
    PlannedMatvec p{op, w, s, chosen, chosen_why, 1};
    if (!p.kernel) {
      const std::string choice = plan.lookup(op, w);
      if (choice == "auto") {
        p.kernel = auto_matvec(op, w, s, threads, bench, p.why);
      } else {
        p.kernel = named_kernel(choice, op, kind, w, s);
        p.why = "plan";
      }
    }
    out.push_back(p);
  };
  auto add_tensor = [&](const std::string& op, const gguf::Tensor* t) {
    add(op, OpKind::MatVec, weight_type(op, t), matrix_shape(t), nullptr, "");
  };

  for (const LayerWeights& l : weights.layers) {
    add_tensor("attn_q", l.wq);
    add_tensor("attn_k", l.wk);
    add_tensor("attn_v", l.wv);
    add_tensor("attn_out", l.wo);

    const WeightType gate_type = weight_type("ffn_gate", l.ffn_gate), up_type = weight_type("ffn_up", l.ffn_up);
    const Shape s = matrix_shape(l.ffn_gate);
    std::string choice = plan.lookup_named("ffn_up_gate", gate_type);
    if (choice.empty())
      choice = plan.lookup("ffn_gate", gate_type) == "auto" && plan.lookup("ffn_up", up_type) == "auto" ? "auto"
                                                                                                        : kNoKernel;
    const KernelSpec* fused = nullptr;
    std::string why;
    if (choice == "auto") {
      if (gate_type == up_type) fused = auto_fused(gate_type, s, threads, bench, why);
    } else if (choice != kNoKernel) {
      if (gate_type != up_type)
        throw PlanError(fmt::format("plan: ffn_up_gate cannot use {}: ffn_gate is {} but ffn_up is {}", choice,
                                    to_string(gate_type), to_string(up_type)));
      fused = named_kernel(choice, "ffn_up_gate", OpKind::FusedUpGate, gate_type, s);
      why = "plan";
    }
    if (fused) {
      add("ffn_up_gate", OpKind::FusedUpGate, gate_type, s, fused, why);
    } else {
      add_tensor("ffn_gate", l.ffn_gate);
      add_tensor("ffn_up", l.ffn_up);
    }
    add_tensor("ffn_down", l.ffn_down);
  }
  add_tensor("lm_head", weights.output);
  return out;
}

void print_plan(const std::vector<PlannedMatvec>& planned) {
  // In forward-pass order, whatever order the layers introduced the entries in.
  auto op_index = [](const std::string& op) {
    return std::find_if(std::begin(kMatvecOps), std::end(kMatvecOps), [&](const char* o) { return op == o; }) -
           std::begin(kMatvecOps);
  };
  std::vector<PlannedMatvec> sorted = planned;
  std::stable_sort(sorted.begin(), sorted.end(), [&](const PlannedMatvec& a, const PlannedMatvec& b) {
    return op_index(a.op) < op_index(b.op);
  });
  std::vector<std::vector<std::string>> rows;
  for (const auto& p : sorted)
    rows.push_back({p.op, std::string(to_string(p.weight)), to_string(p.shape), std::to_string(p.count),
                    p.kernel->name, p.why});
  print_table({"op", "weights", "shape", "matvecs", "kernel", "why"}, rows);
}

KernelPlan load_plan(const std::string& spec) {
  if (spec.empty() || spec == "auto") return {};
  const bool toml_name = spec.size() > 5 && spec.compare(spec.size() - 5, 5, ".toml") == 0;
  if (toml_name || (spec.find('=') == std::string::npos && std::filesystem::is_regular_file(spec))) {
    if (!std::filesystem::is_regular_file(spec)) throw PlanError(fmt::format("plan file '{}' not found", spec));
    return KernelPlan::load_toml(spec);
  }
  return KernelPlan::parse_rules(spec);
}

}  // namespace qmv
