#include "model/plan.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "kernels/availability.h"
#include "kernels/one_line.h"
#include "kernels/registry.h"

namespace qmv {

bool reads_same_weights(const KernelSpec& a, const KernelSpec& b) {
  return a.op == b.op && a.weight == b.weight && a.backend == b.backend && a.prepare == b.prepare &&
         a.release == b.release;
}

namespace {

bool known_op(const std::string& op) {
  const std::optional<Op> o = parse_op(op);
  return op == "*" || (o && is_planned(*o));
}

std::string canonical_type(const std::string& type, const std::string& where) {
  if (type == "*") return type;
  WeightType t;
  if (!parse_weight_type(type, t)) throw PlanError(fmt::format("plan: unknown weight type '{}' in {}", type, where));
  return std::string(to_string(t));
}

// The plan's name for the outlier-routing settings: a TOML table and a rule prefix.
constexpr const char* kOutliers = "outliers";

// One `outliers.KEY = VALUE` setting given as text (rules) or as a TOML value.
void set_outlier_key(KernelPlan& plan, const std::string& key, const std::string& value, const std::string& where) {
  if (key == "route") {
    if (value != "true" && value != "false")
      throw PlanError(fmt::format("{}: outliers.route must be true or false (got '{}')", where, value));
    plan.set_outlier_routing(value == "true");
  } else if (key == "k") {
    std::size_t used = 0;
    double k = -1;
    try {
      k = std::stod(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != value.size() || !(k >= 0) || !std::isfinite(k))
      throw PlanError(fmt::format("{}: outliers.k must be a number >= 0 (got '{}')", where, value));
    plan.set_outlier_routing({}, k);
  } else {
    WeightType t;
    if (key != "*" && !parse_weight_type(key, t))
      throw PlanError(fmt::format("{}: outliers.{} is neither route, k nor a weight type", where, key));
    plan.set_outlier_kernel(key, value);
  }
}

std::string op_list() {
  std::string s;
  for (Op o : matvec_ops()) s += (s.empty() ? "" : ", ") + std::string(to_string(o));
  return s;
}

}  // namespace

void KernelPlan::set(const std::string& op, const std::string& type, const std::string& kernel) {
  if (!known_op(op)) throw PlanError(fmt::format("plan: unknown op '{}' (ops: {}, or *)", op, op_list()));
  if (kernel.empty()) throw PlanError(fmt::format("plan: empty kernel for {}.{}", op, type));
  rules_[{op, canonical_type(type, op)}] = kernel;
}

void KernelPlan::merge(const KernelPlan& later) {
  static_order_ = static_order_ || later.static_order_;
  for (const auto& [key, kernel] : later.rules_) rules_[key] = kernel;
  if (later.route_outliers_) route_outliers_ = later.route_outliers_;
  if (later.outlier_k_) outlier_k_ = later.outlier_k_;
  for (const auto& [type, kernel] : later.outlier_kernels_) outlier_kernels_[type] = kernel;
}

void KernelPlan::set_outlier_routing(std::optional<bool> route, std::optional<double> k) {
  if (k && !(*k >= 0 && std::isfinite(*k)))
    throw PlanError(fmt::format("plan: outliers.k must be a number >= 0 (got {})", *k));
  if (route) route_outliers_ = route;
  if (k) outlier_k_ = k;
}

OutlierRouting KernelPlan::outlier_routing() const {
  return {route_outliers_.value_or(false), outlier_k_.value_or(kDefaultOutlierK)};
}

void KernelPlan::set_outlier_kernel(const std::string& type, const std::string& kernel) {
  if (kernel.empty()) throw PlanError(fmt::format("plan: empty kernel for outliers.{}", type));
  outlier_kernels_[canonical_type(type, "outliers")] = kernel;
}

std::string KernelPlan::lookup_outlier_kernel(WeightType type) const {
  for (const std::string& key : {std::string(to_string(type)), std::string("*")})
    if (const auto it = outlier_kernels_.find(key); it != outlier_kernels_.end()) return it->second;
  return "";
}

KernelPlan KernelPlan::parse_rules(const std::string& rules) try {
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
    if (lhs.substr(0, dot) == kOutliers) {
      if (dot == std::string::npos)
        throw PlanError(fmt::format("plan: rule '{}' needs a key: outliers.route=true, outliers.k=K or "
                                    "outliers.TYPE=KERNEL",
                                    rule));
      set_outlier_key(plan, lhs.substr(dot + 1), kernel, "plan");
      continue;
    }
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
} catch (const PlanError& e) {
  throw PlanError(one_line(e.what()));
}

KernelPlan KernelPlan::load_toml(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw PlanError(fmt::format("{}: cannot open", path));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_toml(text.str(), path);
}

KernelPlan KernelPlan::parse_toml(std::string_view text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw PlanError(one_line(fmt::format("{}: {} (line {})", source, e.description(), e.source().begin.line)));
  }
  // Every error names the file and the line of the value at fault.
  const auto fail = [&](const toml::node& at, const std::string& what) {
    throw PlanError(one_line(fmt::format("{}: {} (line {})", source, what, at.source().begin.line)));
  };
  KernelPlan plan;
  for (const auto& [section, node] : root) {
    const std::string op = section == "default" ? "*" : std::string(section.str());
    if (op == kOutliers) {
      const toml::table* t = node.as_table();
      if (!t) fail(node, "[outliers] must be a table (route, k, TYPE = \"KERNEL\")");
      for (const auto& [key, value] : *t) {
        const std::string name(key.str());
        std::string setting;
        if (name == "route") {
          if (!value.is_boolean()) fail(value, "outliers.route must be true or false");
          setting = *value.value<bool>() ? "true" : "false";
        } else if (name == "k") {
          // An integer too large for a double to hold exactly has no value<double>().
          if (!value.is_number()) fail(value, "outliers.k must be a number >= 0");
          setting = value.is_integer() ? fmt::format("{}", *value.value<std::int64_t>())
                                       : fmt::format("{}", *value.value<double>());
        } else {
          if (!value.is_string()) fail(value, fmt::format("outliers.{} must be a kernel name string", name));
          setting = *value.value<std::string>();
        }
        try {
          set_outlier_key(plan, name, setting, "plan");
        } catch (const PlanError& e) {
          fail(value, e.what());
        }
      }
      continue;
    }
    const toml::table* t = node.as_table();
    if (!t) fail(node, fmt::format("[{}] must be a table of TYPE = \"KERNEL\"", section.str()));
    for (const auto& [type, value] : *t) {
      const auto kernel = value.value<std::string>();
      if (!value.is_string()) fail(value, fmt::format("{}.{} must be a kernel name string", section.str(), type.str()));
      try {
        plan.set(op, std::string(type.str()), *kernel);
      } catch (const PlanError& e) {
        fail(value, e.what());
      }
    }
  }
  return plan;
}

std::string KernelPlan::lookup(Op matvec, WeightType type) const {
  const std::string op(to_string(matvec)), t(to_string(type));
  for (const auto& key : {std::pair<std::string, std::string>{op, t}, {op, "*"}, {"*", t}, {"*", "*"}}) {
    const auto it = rules_.find(key);
    if (it != rules_.end()) return it->second;
  }
  return "auto";
}

std::string KernelPlan::describe() const {
  std::string s;
  for (const auto& [key, kernel] : rules_) s += fmt::format("{}{}.{}={}", s.empty() ? "" : ",", key.first, key.second, kernel);
  if (s.empty()) s = static_order_ ? "static" : "*=auto";
  else if (static_order_) s = "static," + s;
  if (route_outliers_) s += fmt::format(",outliers.route={}", *route_outliers_ ? "true" : "false");
  if (outlier_k_) s += fmt::format(",outliers.k={}", *outlier_k_);
  for (const auto& [type, kernel] : outlier_kernels_) s += fmt::format(",outliers.{}={}", type, kernel);
  return s;
}

std::string KernelPlan::lookup_named(Op matvec, WeightType type) const {
  const std::string op(to_string(matvec)), t(to_string(type));
  for (const auto& key : {std::pair<std::string, std::string>{op, t}, {op, "*"}}) {
    const auto it = rules_.find(key);
    if (it != rules_.end()) return it->second;
  }
  return "";
}

namespace {

// `act`, when given, limits the choice to kernels reading that activation format (an
// outlier sibling reads f32).
using ActFilter = std::optional<ActFormat>;

bool runnable(const KernelSpec& k, OpKind op, WeightType w, Shape s, Backend backend, ActFilter act = {}) {
  return k.op == op && k.backend == backend && k.weight == w && (!act || k.act == *act) && k.supports(s) &&
         availability(k).available;
}

// The measured kernels of the op kind for the weight type, at the measured shape
// nearest to `s` (log distance of rows and cols; the model's own shape where it was
// measured), fastest first.
struct Ranked {
  const KernelSpec* kernel;
  const KernelSpeed* speed;
  bool exact;  // measured at the matvec's own shape
};
std::vector<Ranked> rank_measured(const std::vector<KernelSpeed>& bench, OpKind op, WeightType w, Shape s, int threads,
                                  Backend backend, ActFilter act = {}) {
  std::vector<Ranked> at_nearest;
  double nearest = 0;
  for (const KernelSpeed& r : bench) {
    if ((backend == Backend::CPU && r.threads != threads) || r.weight_type != to_string(w) || r.n != 1) continue;
    const KernelSpec* k = global_registry().find(r.kernel);
    // auto plans with qmvlab's own kernels; a peer's runs only where a plan names it.
    if (!k || !k->peer.empty() || !runnable(*k, op, w, s, backend, act)) continue;
    const double dist = std::abs(std::log(double(r.rows) / s.rows)) + std::abs(std::log(double(r.cols) / s.cols));
    if (!at_nearest.empty() && dist > nearest + 1e-9) continue;
    if (!at_nearest.empty() && dist < nearest - 1e-9) at_nearest.clear();
    nearest = dist;
    // One entry per kernel: a file may hold a kernel twice at a shape (two runs).
    auto same = std::find_if(at_nearest.begin(), at_nearest.end(), [&](const Ranked& x) { return x.kernel == k; });
    if (same == at_nearest.end()) {
      at_nearest.push_back({k, &r, dist < 1e-9});
    } else if (r.gbps_median > same->speed->gbps_median) {
      same->speed = &r;
    }
  }
  // Time decides where every figure has one; GB/s otherwise (older bench files).
  const bool timed = std::all_of(at_nearest.begin(), at_nearest.end(),
                                 [](const Ranked& x) { return x.speed->time_median_us > 0; });
  std::stable_sort(at_nearest.begin(), at_nearest.end(), [&](const Ranked& a, const Ranked& b) {
    return timed ? a.speed->time_median_us < b.speed->time_median_us : a.speed->gbps_median > b.speed->gbps_median;
  });
  return at_nearest;
}

// What `auto` chose for one matvec, and on what evidence.
struct AutoChoice {
  const KernelSpec* kernel = nullptr;
  std::string why, source;
  double gbps = 0;
  const KernelSpec* runner_up = nullptr;
  double runner_up_gbps = 0;
  std::vector<const KernelSpec*> trial_kernels;  // PlannedMatvec::trial_kernels
};

// PlannedMatvec::trial_kernels of a choice from `ranked`.
std::vector<const KernelSpec*> trial_kernels(const std::vector<Ranked>& ranked) {
  std::vector<const KernelSpec*> out;
  const Ranked& pick = ranked[0];
  if (pick.kernel->backend != Backend::CPU || !pick.exact || pick.speed->time_median_us <= 0) return out;
  for (std::size_t i = 1; i < ranked.size() && static_cast<int>(out.size()) < kMaxTrialKernels; ++i) {
    const Ranked& r = ranked[i];
    if (r.exact && r.speed->time_median_us > 0 && r.speed->time_median_us <= kTrialReach * pick.speed->time_median_us &&
        reads_same_weights(*r.kernel, *pick.kernel) && r.kernel->act == pick.kernel->act &&
        r.kernel->joins_call_teams == pick.kernel->joins_call_teams)
      out.push_back(r.kernel);
  }
  return out;
}

AutoChoice measured_choice(const std::vector<Ranked>& ranked, const std::string& why) {
  AutoChoice c;
  c.kernel = ranked[0].kernel;
  c.gbps = ranked[0].speed->gbps_median;
  c.source = ranked[0].speed->source;
  c.why = why;
  // Another shape's figures stand in for a shape nobody measured: say which.
  if (!ranked[0].exact) {
    c.source += fmt::format(" at {}x{}", ranked[0].speed->rows, ranked[0].speed->cols);
    c.why += " at the nearest measured shape";
  }
  if (ranked.size() > 1) {
    c.runner_up = ranked[1].kernel;
    c.runner_up_gbps = ranked[1].speed->gbps_median;
  }
  c.trial_kernels = trial_kernels(ranked);
  return c;
}

const KernelSpec* first_in_default_order(WeightType w, Shape s, Backend backend, ActFilter act = {}) {
  const auto try_order = [&](const auto& order) -> const KernelSpec* {
    for (const char* variant : order) {
      const std::string name = fmt::format("{}.{}.{}", to_string(w), to_string(backend), variant);
      if (const KernelSpec* k = global_registry().find(name); k && runnable(*k, OpKind::MatVec, w, s, backend, act))
        return k;
    }
    return nullptr;
  };
  return backend == Backend::CUDA ? try_order(kAutoOrderCuda) : try_order(kAutoOrder);
}

// The first available fused kernel for the type, in kAutoOrderFused, then by name.
const KernelSpec* first_fused(WeightType w, Shape s, Backend backend, ActFilter act = {}) {
  for (const char* variant : kAutoOrderFused) {
    const std::string name = fmt::format("{}.{}.{}", to_string(w), to_string(backend), variant);
    if (const KernelSpec* k = global_registry().find(name); k && runnable(*k, OpKind::FusedUpGate, w, s, backend, act))
      return k;
  }
  for (const KernelSpec& k : global_registry().all())
    if (runnable(k, OpKind::FusedUpGate, w, s, backend, act)) return &k;
  return nullptr;
}

AutoChoice auto_matvec(std::string_view op, WeightType w, Shape s, int threads, const std::vector<KernelSpeed>& bench,
                       Backend backend, ActFilter act = {}) {
  if (const auto ranked = rank_measured(bench, OpKind::MatVec, w, s, threads, backend, act); !ranked.empty())
    return measured_choice(ranked, "auto: fastest measured");
  if (const KernelSpec* k = first_in_default_order(w, s, backend, act)) {
    AutoChoice c;
    c.kernel = k;
    c.why = "auto: static order";
    c.source = bench.empty() ? "static order" : "static order (not measured)";
    return c;
  }
  // Why not: the first kernel of the type that takes the shape but cannot run here.
  std::string reason;
  for (const KernelSpec& k : global_registry().all())
    if (reason.empty() && k.backend == backend && k.weight == w && k.op == OpKind::MatVec && k.supports(s) &&
        (!act || k.act == *act))
      if (const Availability av = availability(k); !av.available) reason = fmt::format(": {}: {}", k.name, av.reason);
  throw PlanError(fmt::format("plan: no available {} {}kernel for {} ({} {}){}", to_string(backend),
                              act ? std::string(to_string(*act)) + "-activation " : "", op, to_string(w),
                              to_string(s), reason));
}

// A fused kernel for gate+up when one runs here and, where both were measured, one
// fused call takes less time than the best plain kernel called twice (or, without
// times, moves bytes at least as fast); `kernel` null keeps the pair separate, with the
// best fused kernel as the runner-up where one was measured.
AutoChoice auto_fused(WeightType w, Shape s, int threads, const std::vector<KernelSpeed>& bench, Backend backend,
                      ActFilter act = {}) {
  const auto fused = rank_measured(bench, OpKind::FusedUpGate, w, s, threads, backend, act);
  const auto single = rank_measured(bench, OpKind::MatVec, w, s, threads, backend, act);
  if (!fused.empty()) {
    const KernelSpeed& f = *fused[0].speed;
    bool fuse = single.empty();
    if (!single.empty()) {
      const KernelSpeed& p = *single[0].speed;
      fuse = f.time_median_us > 0 && p.time_median_us > 0 ? f.time_median_us <= 2 * p.time_median_us
                                                           : f.gbps_median >= p.gbps_median;
    }
    if (!fuse) {
      AutoChoice apart;
      apart.runner_up = fused[0].kernel;
      apart.runner_up_gbps = f.gbps_median;
      return apart;
    }
    AutoChoice c = measured_choice(fused, "auto: fused, faster than the best plain kernel twice");
    if (!single.empty()) {
      c.runner_up = single[0].kernel;
      c.runner_up_gbps = single[0].speed->gbps_median;
    }
    return c;
  }
  if (!bench.empty() && !single.empty()) return {};  // measured singles, unmeasured fusion: keep what was measured
  AutoChoice c;
  c.kernel = first_fused(w, s, backend, act);
  c.why = "auto: static order (fused: reads the activation once)";
  c.source = bench.empty() ? "static order" : "static order (not measured)";
  return c;
}

// Checks an explicitly named kernel against the matvec it would run.
const KernelSpec* named_kernel(const std::string& choice, std::string_view op, OpKind kind, WeightType w,
                               Shape s, Backend backend) {
  const KernelSpec* k = global_registry().find(choice);
  const std::string what = fmt::format("plan: {} ({} {}) cannot use {}", op, to_string(w), to_string(s), choice);
  if (!k) throw PlanError(what + ": no such kernel (see `qmvlab list`)");
  if (k->weight != w) throw PlanError(fmt::format("{}: it reads {} weights", what, to_string(k->weight)));
  if (k->op != kind)
    throw PlanError(what + (kind == OpKind::MatVec ? ": it is a fused op, not a plain matvec"
                                                   : ": it is a plain matvec, not a fused gate+up kernel"));
  if (k->backend != backend)
    throw PlanError(fmt::format("{}: it is a {} kernel and the decode runs on {} (--device)", what,
                                to_string(k->backend), to_string(backend)));
  if (!k->supports(s)) throw PlanError(fmt::format("{}: shape not supported (needs {})", what, k->shape_rule));
  if (const Availability av = availability(*k); !av.available) throw PlanError(what + ": " + av.reason);
  return k;
}

WeightType weight_type(Op op, const gguf::Tensor* t) {
  WeightType w;
  if (!parse_weight_type(t->type->name, w))
    throw PlanError(fmt::format("plan: {} ('{}') is {}, a type no kernel here reads", to_string(op), t->name, t->type->name));
  return w;
}

Shape matrix_shape(const gguf::Tensor* t) {
  return {static_cast<std::int64_t>(t->dims[1]), static_cast<std::int64_t>(t->dims[0])};
}

// The two matrices of a layer the fused op may run as one call.
struct PairTensors {
  const gguf::Tensor *first, *second;
};
PairTensors fused_pair(const LayerWeights& l) {
  return {l.*weight_matvec(kUpGate.first).weight, l.*weight_matvec(kUpGate.second).weight};
}

}  // namespace

const KernelSpec* outlier_sibling(const KernelPlan& plan, std::string_view op, const KernelSpec& kernel, Shape s,
                                  int threads, const std::vector<KernelSpeed>& bench, std::string& why) {
  const WeightType w = kernel.weight;
  const std::string named = plan.lookup_outlier_kernel(w);
  if (!named.empty()) {
    // A fused op may fall back to a fused kernel or to a plain one run per matrix.
    const KernelSpec* found = global_registry().find(named);
    const OpKind kind = found && found->op == OpKind::MatVec ? OpKind::MatVec : kernel.op;
    const KernelSpec* k = named_kernel(named, op, kind, w, s, kernel.backend);
    if (k->act != ActFormat::F32)
      throw PlanError(fmt::format("plan: {} ({} {}) cannot route outlier vectors to {}: it reads {} activations, "
                                  "not f32",
                                  op, to_string(w), to_string(s), named, to_string(k->act)));
    why = "plan";
    return k;
  }
  if (kernel.op == OpKind::FusedUpGate)
    if (const AutoChoice fused = auto_fused(w, s, threads, bench, kernel.backend, ActFormat::F32); fused.kernel) {
      why = fused.why;
      return fused.kernel;
    }
  const AutoChoice plain = auto_matvec(op, w, s, threads, bench, kernel.backend, ActFormat::F32);
  why = plain.why;
  return plain.kernel;
}

std::vector<PlannedMatvec> resolve_plan(const KernelPlan& plan, const ModelWeights& weights, int threads,
                                        const std::vector<KernelSpeed>& measured, Backend backend) {
  static const std::vector<KernelSpeed> kNone;
  const std::vector<KernelSpeed>& bench = plan.uses_static_order() ? kNone : measured;
  std::vector<PlannedMatvec> out;
  // Adds one matvec to its (op, type, shape) entry, resolving the entry the first time;
  // `chosen` is a fused choice made for the layer, or null to resolve a plain op here.
  auto add = [&](Op op, OpKind kind, WeightType w, Shape s, const AutoChoice* chosen) {
    auto same = std::find_if(out.begin(), out.end(),
                             [&](const PlannedMatvec& p) { return p.op == op && p.weight == w && p.shape == s; });
    if (same != out.end()) return void(++same->count);
    PlannedMatvec p;
    p.op = op;
    p.weight = w;
    p.shape = s;
    p.count = 1;
    AutoChoice c;
    if (chosen) {
      c = *chosen;
    } else if (const std::string choice = plan.lookup(op, w); choice == "auto") {
      c = auto_matvec(to_string(op), w, s, threads, bench, backend);
    } else {
      c.kernel = named_kernel(choice, to_string(op), kind, w, s, backend);
      c.why = "plan";
    }
    p.kernel = c.kernel;
    p.why = c.why;
    p.gbps = c.gbps;
    p.source = c.source;
    p.runner_up = c.runner_up;
    p.runner_up_gbps = c.runner_up_gbps;
    p.trial_kernels = c.trial_kernels;
    out.push_back(p);
  };
  auto add_tensor = [&](Op op, const gguf::Tensor* t) {
    add(op, OpKind::MatVec, weight_type(op, t), matrix_shape(t), nullptr);
  };

  // The fused op where the plan or auto chooses it for the layer's pair, else its two matrices.
  auto add_pair = [&](const LayerWeights& l) {
    const auto [first, second] = fused_pair(l);
    const WeightType first_type = weight_type(kUpGate.first, first), second_type = weight_type(kUpGate.second, second);
    const Shape s = matrix_shape(first);
    std::string choice = plan.lookup_named(kUpGate.fused, first_type);
    if (choice.empty())
      choice = plan.lookup(kUpGate.first, first_type) == "auto" && plan.lookup(kUpGate.second, second_type) == "auto"
                   ? "auto"
                   : kNoKernel;
    AutoChoice fused;
    if (choice == "auto") {
      if (first_type == second_type) fused = auto_fused(first_type, s, threads, bench, backend);
    } else if (choice != kNoKernel) {
      if (first_type != second_type)
        throw PlanError(fmt::format("plan: {} cannot use {}: {} is {} but {} is {}", to_string(kUpGate.fused), choice,
                                    to_string(kUpGate.first), to_string(first_type), to_string(kUpGate.second),
                                    to_string(second_type)));
      fused.kernel = named_kernel(choice, to_string(kUpGate.fused), OpKind::FusedUpGate, first_type, s, backend);
      fused.why = "plan";
    }
    if (fused.kernel) {
      add(kUpGate.fused, OpKind::FusedUpGate, first_type, s, &fused);
    } else {
      add_tensor(kUpGate.first, first);
      add_tensor(kUpGate.second, second);
    }
  };

  for (const LayerWeights& l : weights.layers)
    for (const WeightMatvec& m : kLayerMatvecs) {
      if (!m.fusable) {
        add_tensor(m.op, l.*m.weight);
      } else if (m.op == kUpGate.first) {
        add_pair(l);
      }
    }
  add_tensor(kLmHead.op, weights.output);
  if (const OutlierRouting routing = plan.outlier_routing(); routing.route)
    for (PlannedMatvec& p : out)
      if (p.kernel->act != ActFormat::F32) {
        p.outlier_kernel = outlier_sibling(plan, to_string(p.op), *p.kernel, p.shape, threads, bench, p.outlier_why);
        p.outlier_k = routing.k;
      }
  return out;
}

void route_outliers_option(KernelPlan& plan, const std::string& k_text) {
  if (!k_text.empty()) set_outlier_key(plan, "k", one_line(k_text), "--route-outliers");
  plan.set_outlier_routing(true);
}

KernelPlan KernelPlan::static_order() {
  KernelPlan plan;
  plan.static_order_ = true;
  return plan;
}

std::vector<AutoMatvec> auto_matvecs(const KernelPlan& plan, const ModelWeights& weights) {
  std::vector<AutoMatvec> out;
  auto add = [&](OpKind kind, WeightType w, Shape s, Op op) {
    auto same = std::find_if(out.begin(), out.end(),
                             [&](const AutoMatvec& a) { return a.kind == kind && a.weight == w && a.shape == s; });
    if (same == out.end()) same = out.insert(out.end(), AutoMatvec{kind, w, s, {}, 0});
    if (std::find(same->ops.begin(), same->ops.end(), op) == same->ops.end()) same->ops.push_back(op);
    ++same->count;
  };
  auto add_tensor = [&](Op op, const gguf::Tensor* t) {
    const WeightType w = weight_type(op, t);
    if (plan.lookup(op, w) == "auto") add(OpKind::MatVec, w, matrix_shape(t), op);
  };
  for (const LayerWeights& l : weights.layers)
    for (const WeightMatvec& m : kLayerMatvecs) {
      if (m.op == kUpGate.first) {
        // The fused kind first, where the pair may fuse; its plain matvecs follow.
        const auto [first, second] = fused_pair(l);
        const WeightType first_type = weight_type(kUpGate.first, first),
                         second_type = weight_type(kUpGate.second, second);
        const std::string named = plan.lookup_named(kUpGate.fused, first_type);
        const bool may_fuse = first_type == second_type && matrix_shape(first) == matrix_shape(second) &&
                              (named == "auto" || (named.empty() && plan.lookup(kUpGate.first, first_type) == "auto" &&
                                                   plan.lookup(kUpGate.second, second_type) == "auto"));
        if (may_fuse) add(OpKind::FusedUpGate, first_type, matrix_shape(first), kUpGate.fused);
      }
      add_tensor(m.op, l.*m.weight);
    }
  add_tensor(kLmHead.op, weights.output);
  return out;
}

KernelPlan load_plan(const std::string& spec) {
  if (spec.empty() || spec == "auto") return {};
  if (spec == "static") return KernelPlan::static_order();
  const bool toml_name = spec.size() > 5 && spec.compare(spec.size() - 5, 5, ".toml") == 0;
  if (toml_name || (spec.find('=') == std::string::npos && std::filesystem::is_regular_file(spec))) {
    if (!std::filesystem::is_regular_file(spec)) throw PlanError(fmt::format("plan file '{}' not found", spec));
    return KernelPlan::load_toml(spec);
  }
  return KernelPlan::parse_rules(spec);
}

}  // namespace qmv
