#include "model/plan.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "harness/machine.h"
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

namespace {

bool runnable(const KernelSpec& k, WeightType w, Shape s) {
  return k.op == OpKind::MatVec && k.backend == Backend::CPU && k.weight == w && k.supports(s) &&
         availability(k).available;
}

// The bench row nearest in shape (log distance of rows and cols) for each kernel.
const KernelSpec* fastest_in_bench(const std::vector<BenchRow>& bench, WeightType w, Shape s, int threads,
                                   std::string& why) {
  const KernelSpec* best = nullptr;
  double best_gbps = 0, best_dist = 0;
  for (const BenchRow& r : bench) {
    if (r.threads != threads || r.weight_type != to_string(w)) continue;
    const KernelSpec* k = global_registry().find(r.kernel);
    if (!k || !runnable(*k, w, s)) continue;
    const double dist = std::abs(std::log(double(r.rows) / s.rows)) + std::abs(std::log(double(r.cols) / s.cols));
    if (!best || dist < best_dist - 1e-9 || (std::abs(dist - best_dist) <= 1e-9 && r.gbps_median > best_gbps)) {
      best = k;
      best_gbps = r.gbps_median;
      best_dist = dist;
    }
  }
  if (best) why = fmt::format("auto: fastest in the bench CSV at the nearest shape ({:.1f} GB/s)", best_gbps);
  return best;
}

const KernelSpec* first_in_default_order(WeightType w, Shape s, std::string& why) {
  for (const char* variant : kAutoOrder) {
    const std::string name = fmt::format("{}.cpu.{}", to_string(w), variant);
    if (const KernelSpec* k = global_registry().find(name); k && runnable(*k, w, s)) {
      why = "auto: default order";
      return k;
    }
  }
  return nullptr;
}

}  // namespace

std::vector<PlannedMatvec> resolve_plan(const KernelPlan& plan, const ModelWeights& weights, int threads,
                                        const std::vector<BenchRow>& bench) {
  // (op, tensor) pairs of the forward pass; a tensor's shape is rows x cols = dims[1] x dims[0].
  std::vector<std::pair<std::string, const gguf::Tensor*>> matvecs;
  for (const LayerWeights& l : weights.layers) {
    matvecs.insert(matvecs.end(), {{"attn_q", l.wq}, {"attn_k", l.wk}, {"attn_v", l.wv}, {"attn_out", l.wo},
                                   {"ffn_gate", l.ffn_gate}, {"ffn_up", l.ffn_up}, {"ffn_down", l.ffn_down}});
  }
  matvecs.push_back({"lm_head", weights.output});

  std::vector<PlannedMatvec> out;
  for (const auto& [op, tensor] : matvecs) {
    WeightType w;
    if (!parse_weight_type(tensor->type->name, w))
      throw PlanError(fmt::format("plan: {} ('{}') is {}, a type no kernel here reads", op, tensor->name,
                                  tensor->type->name));
    const Shape s{static_cast<std::int64_t>(tensor->dims[1]), static_cast<std::int64_t>(tensor->dims[0])};
    auto same = std::find_if(out.begin(), out.end(), [&](const PlannedMatvec& p) {
      return p.op == op && p.weight == w && p.shape == s;
    });
    if (same != out.end()) {
      ++same->count;
      continue;
    }
    PlannedMatvec p{op, w, s, nullptr, "", 1};
    const std::string choice = plan.lookup(op, w);
    if (choice == "auto") {
      p.kernel = fastest_in_bench(bench, w, s, threads, p.why);
      if (!p.kernel) p.kernel = first_in_default_order(w, s, p.why);
      if (!p.kernel)
        throw PlanError(fmt::format("plan: no available kernel for {} ({} {})", op, to_string(w), to_string(s)));
    } else {
      const KernelSpec* k = global_registry().find(choice);
      const std::string what = fmt::format("plan: {} ({} {}) cannot use {}", op, to_string(w), to_string(s), choice);
      if (!k) throw PlanError(what + ": no such kernel (see `qmvlab list`)");
      if (k->weight != w) throw PlanError(fmt::format("{}: it reads {} weights", what, to_string(k->weight)));
      if (k->op != OpKind::MatVec) throw PlanError(what + ": it is a fused op, not a plain matvec");
      if (k->backend != Backend::CPU) throw PlanError(what + ": the CPU runner takes CPU kernels");
      if (!k->supports(s)) throw PlanError(fmt::format("{}: shape not supported (needs {})", what, k->shape_rule));
      if (const Availability av = availability(*k); !av.available) throw PlanError(what + ": " + av.reason);
      p.kernel = k;
      p.why = "plan";
    }
    out.push_back(p);
  }
  return out;
}

}  // namespace qmv
