#include "harness/auto_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "harness/bench.h"
#include "harness/machine.h"
#include "harness/peak.h"
#include "harness/tuning_store.h"
#include "kernels/availability.h"
#include "kernels/build_id.h"
#include "kernels/registry.h"
#include "model/ops.h"

namespace qmv {

std::vector<const KernelSpec*> auto_candidates(const AutoMatvec& m, Backend backend, int n) {
  std::vector<const KernelSpec*> out;
  if (n > 1 && m.kind != OpKind::MatVec) return out;
  const OpKind kind = n > 1 ? OpKind::MatVecBatch : m.kind;
  for (const KernelSpec& k : global_registry().all())
    if (k.backend == backend && k.op == kind && k.max_n >= n && k.weight == m.weight && k.peer.empty() &&
        k.supports(m.shape) && availability(k).available && kernel_build_id(k) != "unknown")
      out.push_back(&k);
  return out;
}

namespace {

using Clock = std::chrono::steady_clock;

std::string op_kind_name(OpKind k) { return std::string(to_string(k)); }

KernelSpeed speed_of(const TuningRow& r, const std::string& source) {
  return {r.kernel, r.weight_type, r.rows, r.cols, r.threads, r.gbps, r.time_median_us, source, r.n};
}

// Where a stored figure came from, for the plan table: the day, and the memory's read
// speed then where it is known.
std::string store_source(const TuningRow& r) {
  return r.read_gbps > 0 ? fmt::format("store, {} at {:.0f} GB/s read", r.date(), r.read_gbps)
                         : "store, " + r.date();
}

// How far apart two read speeds are, as a ratio's log (0: the same).
double speed_distance(double a_gbps, double b_gbps) { return std::abs(std::log(a_gbps / b_gbps)); }

// Whether a row was measured at the read speed `now` (> 0) is not known or not so.
bool other_speed(const TuningRow& r, double now) {
  return now > 0 && (r.read_gbps <= 0 || !same_read_speed(r.read_gbps, now));
}

// The rows of one matvec's candidates that `auto` compares: each kernel's at one read
// speed, so no kernel's figure from a fast minute is set against another's from a slow
// one. Of the speeds at which every kernel has a row (a row of unknown speed matches
// any), the one nearest `now` (0: unknown, the newest row's speed), unknown after the
// same speed and before the others; each kernel's row nearest it, the newest among
// equals. Empty when no speed has a row of every kernel.
std::vector<const TuningRow*> rows_at_one_speed(const std::vector<std::vector<const TuningRow*>>& by_kernel,
                                                double now) {
  std::vector<double> speeds;
  const TuningRow* newest = nullptr;
  for (const auto& rows : by_kernel) {
    if (rows.empty()) return {};
    for (const TuningRow* r : rows) {
      speeds.push_back(r->read_gbps);
      if (!newest || r->measured_at > newest->measured_at) newest = r;
    }
  }
  const double target = now > 0 ? now : newest->read_gbps;
  // The same speed as the target first (nearest first), then unknown, then the others.
  auto distance = [&](double s) {
    if (target <= 0 || s <= 0) return s == target ? 0.0 : 1e3;
    return same_read_speed(s, target) ? speed_distance(s, target) : 1e6 + speed_distance(s, target);
  };
  auto nearest = [&](const std::vector<const TuningRow*>& rows, double s) {
    const TuningRow* best = nullptr;
    for (const TuningRow* r : rows)
      if (s <= 0 ? r->read_gbps <= 0 : same_read_speed(r->read_gbps, s)) {
        const double d = distance(r->read_gbps), b = best ? distance(best->read_gbps) : 0;
        if (!best || d < b || (d == b && r->measured_at > best->measured_at)) best = r;
      }
    return best;
  };
  std::stable_sort(speeds.begin(), speeds.end(), [&](double a, double b) { return distance(a) < distance(b); });
  for (const double s : speeds) {
    std::vector<const TuningRow*> chosen;
    for (const auto& rows : by_kernel)
      if (const TuningRow* r = nearest(rows, s)) chosen.push_back(r);
    if (chosen.size() == by_kernel.size()) return chosen;
  }
  return {};
}

std::string describe(const AutoMatvec& m) {
  std::string ops;
  for (const Op op : m.ops) ops += fmt::format("{}{}", ops.empty() ? "" : "+", to_string(op));
  return fmt::format("{} {} {}", ops, to_string(m.weight), to_string(m.shape));
}

// What the read speed of a plan is measured over: 256 MiB, eight times a 32 MiB
// last-level cache, or eight times a larger one.
std::size_t read_speed_buffer_bytes() {
  return std::max(std::size_t{256} << 20, 8 * static_cast<std::size_t>(machine_info().llc_bytes));
}

// Times `kernels` on one shape with `n` vectors per call, `reps` interleaved
// repetitions each. Cold, `read_loop` is timed among them, each row's peak_gbps then its
// median: the memory's speed while they ran.
std::vector<BenchRow> time_kernels(const std::vector<const KernelSpec*>& kernels, Shape shape, int n, int threads,
                                   bool warm, int reps, double min_time_s, double peak_gbps,
                                   const std::string& read_loop) {
  BenchConfig cfg;
  if (!warm && !read_loop.empty()) {
    cfg.peak_read_loops[threads] = {read_loop};
    cfg.peak_buffer_bytes = read_speed_buffer_bytes();
  }
  cfg.threads = {threads};
  cfg.vectors = {n};
  cfg.warm = warm;
  cfg.repetitions = reps;
  cfg.min_time_s = min_time_s;
  cfg.interleave = true;
  std::map<int, double> peaks;
  if (peak_gbps > 0) peaks[threads] = peak_gbps;
  return run_bench(kernels, {shape}, cfg, peaks).rows;
}

}  // namespace

ReadSpeedNow read_speed_now(int threads, std::string loop) {
  if (loop.empty()) {
    if (const auto p = TuningStore().peak(threads)) loop = p->kernel;
    const std::vector<ReadLoop> usable = usable_read_loops();
    const bool known = std::any_of(usable.begin(), usable.end(), [&](const ReadLoop& l) { return l.name == loop; });
    if (!known) loop = usable.front().name;
  }
  // A few passes, as a plan cannot wait a peak's minute, and the two speeds it tells
  // apart are far more than a pass's noise apart.
  const PeakResult p = measure_read_bandwidth(threads, 3, loop, read_speed_buffer_bytes());
  return {p.median_gbps, loop};
}

std::string model_cache_state(const ModelWeights& weights) {
  std::uint64_t bytes = 0;
  auto add = [&](const gguf::Tensor* t) { bytes += t ? t->bytes : 0; };
  for (const LayerWeights& l : weights.layers)
    for (const WeightMatvec& m : kLayerMatvecs) add(l.*m.weight);
  add(weights.output);
  return bytes * 2 < machine_info().llc_bytes ? "warm" : "cold";
}

std::string AutoPlanEvidence::summary() const {
  if (static_order) return "tuning: the static order throughout; the store is not read";
  if (matvecs == 0)
    return n > 1 ? fmt::format("tuning: no batch kernel of {} vectors for auto to weigh; nothing timed", n)
                 : "tuning: the plan names every kernel; nothing for auto to decide";
  const std::string batch = n > 1 ? fmt::format(" of a batch of {} (batch kernels)", n) : "";
  std::string s = backend == Backend::CUDA
                      ? fmt::format("tuning: {} matvec shape(s){} for auto on the GPU: ", matvecs, batch)
                      : fmt::format("tuning: {} matvec shape(s){} for auto, {} thread(s), weights {}{}: ", matvecs,
                                    batch, threads, cache == "cold" ? "from memory (cold)" : "in the cache (warm)",
                                    read_gbps > 0 ? fmt::format(", memory reading {:.1f} GB/s now{}", read_gbps,
                                                                read_loop.empty() ? "" : " (" + read_loop + ")")
                                                  : "");
  std::vector<std::string> parts;
  if (measured) parts.push_back(fmt::format("{} measured now in {:.0f} s", measured, seconds));
  if (from_store) parts.push_back(fmt::format("{} from the store", from_store));
  if (other_speed)
    parts.push_back(fmt::format("{} of them by rows measured at another or an unknown read speed", other_speed));
  if (unmeasured) parts.push_back(fmt::format("{} unmeasured (static order)", unmeasured));
  for (std::size_t i = 0; i < parts.size(); ++i) s += (i ? ", " : "") + parts[i];
  if (!measured) s += "; nothing timed";
  return s + fmt::format(" [{}]", store);
}

AutoPlanEvidence auto_plan_evidence(const KernelPlan& plan, const ModelWeights& weights,
                                    const AutoPlanOptions& options) {
  AutoPlanEvidence ev;
  const TuningStore store(options.store_path, options.backend);
  ev.store = store.path();
  const bool cpu = options.backend == Backend::CPU;
  // A GPU decode streams its weights from device memory whatever the CPU's caches hold.
  ev.cache = cpu ? model_cache_state(weights) : "cold";
  ev.threads = options.threads;
  ev.n = options.n;
  ev.backend = options.backend;
  ev.static_order = plan.uses_static_order();
  if (ev.static_order) return ev;
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  std::vector<AutoMatvec> matvecs = auto_matvecs(plan, weights);
  // A batch decode has batch kernels to weigh only where its weight type has them.
  if (options.n > 1)
    std::erase_if(matvecs, [&](const AutoMatvec& m) { return auto_candidates(m, options.backend, options.n).empty(); });
  ev.matvecs = static_cast<int>(matvecs.size());
  if (matvecs.empty()) return ev;

  const std::vector<TuningRow> rows = store.usable_rows(&ev.warning);
  if (!ev.warning.empty()) say(ev.warning);
  const bool streamed = cpu && ev.cache == "cold";
  if (options.read_gbps > 0) {
    ev.read_gbps = options.read_gbps;
  } else if (options.read_gbps < 0 && streamed) {
    const ReadSpeedNow now = read_speed_now(options.threads);
    ev.read_gbps = now.gbps;
    ev.read_loop = now.loop;
  }
  // The store's rows of a kernel at a matvec.
  auto stored = [&](const KernelSpec& k, const AutoMatvec& m) {
    std::vector<const TuningRow*> mine;
    for (const TuningRow& r : rows)
      if (r.kind == "kernel" && r.kernel == k.name && r.rows == m.shape.rows && r.cols == m.shape.cols &&
          r.n == options.n && (!cpu || (r.threads == options.threads && r.cache == ev.cache)))
        mine.push_back(&r);
    return mine;
  };
  double peak_gbps = 0;
  if (const auto p = store.peak(options.threads)) peak_gbps = p->gbps;
  const std::string read_loop = streamed ? ev.read_loop : "";

  auto use = [&](const std::vector<const TuningRow*>& chosen) {
    bool other = false;
    for (const TuningRow* r : chosen) {
      ev.speeds.push_back(speed_of(*r, store_source(*r)));
      other = other || other_speed(*r, ev.read_gbps);
    }
    if (other) ++ev.other_speed;
  };
  // A matvec is covered where every candidate has a row at one read speed.
  std::vector<const AutoMatvec*> missing;
  for (const AutoMatvec& m : matvecs) {
    const auto kernels = auto_candidates(m, options.backend, options.n);
    if (kernels.empty()) continue;
    std::vector<std::vector<const TuningRow*>> by_kernel;
    for (const KernelSpec* k : kernels) by_kernel.push_back(stored(*k, m));
    const std::vector<const TuningRow*> chosen = rows_at_one_speed(by_kernel, ev.read_gbps);
    if (chosen.empty()) {
      missing.push_back(&m);
      continue;
    }
    use(chosen);
    ++ev.from_store;
  }
  // Partly covered matvecs keep, when nothing is timed, the rows of the speed that
  // answers for the most kernels: those kernels are compared at one speed.
  auto keep_partial = [&](const AutoMatvec& m) {
    std::vector<std::vector<const TuningRow*>> by_kernel;
    for (const KernelSpec* k : auto_candidates(m, options.backend, options.n))
      if (auto mine = stored(*k, m); !mine.empty()) by_kernel.push_back(std::move(mine));
    std::vector<const TuningRow*> best;
    // Drop kernels, the fewest rows first, until the rest share a speed.
    std::stable_sort(by_kernel.begin(), by_kernel.end(),
                     [](const auto& a, const auto& b) { return a.size() > b.size(); });
    for (std::size_t keep = by_kernel.size(); keep > 0 && best.empty(); --keep)
      best = rows_at_one_speed({by_kernel.begin(), by_kernel.begin() + static_cast<std::ptrdiff_t>(keep)},
                               ev.read_gbps);
    use(best);
    best.empty() ? ++ev.unmeasured : ++ev.from_store;
  };
  if (!options.measure || missing.empty()) {
    for (const AutoMatvec* m : missing) keep_partial(*m);
    return ev;
  }

  const auto started = Clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - started).count(); };
  const bool warm = ev.cache == "warm";
  std::vector<TuningRow> fresh;
  for (std::size_t i = 0; i < missing.size(); ++i) {
    const AutoMatvec& m = *missing[i];
    if (options.spent_s + elapsed() >= options.budget_s) {
      say(fmt::format("auto: the {:.0f} s timing budget is spent; {} left to the static order", options.budget_s,
                      describe(m)));
      keep_partial(m);
      continue;
    }
    const auto kernels = auto_candidates(m, options.backend, options.n);
    const std::string kind = options.n > 1 ? fmt::format("{} (n = {})", op_kind_name(OpKind::MatVecBatch), options.n)
                                           : op_kind_name(m.kind);
    say(fmt::format("auto: timing {} {} kernel(s) for {} ({}/{}, {:.0f} s so far)", kernels.size(), kind, describe(m),
                    i + 1, missing.size(), options.spent_s + elapsed()));
    // Screening: one short repetition each; the slow ones are settled by it.
    std::vector<BenchRow> screened =
        time_kernels(kernels, m.shape, options.n, options.threads, warm, 1, options.screen_min_time_s, peak_gbps,
                     read_loop);
    double fastest = 0;
    for (const BenchRow& r : screened)
      if (r.time_median_us > 0 && (fastest == 0 || r.time_median_us < fastest)) fastest = r.time_median_us;
    std::vector<const KernelSpec*> finalists;
    for (const BenchRow& r : screened)
      if (r.time_median_us > 0 && r.time_median_us <= kFinalistRatio * fastest)
        finalists.push_back(global_registry().find(r.kernel));
    std::vector<BenchRow> final_rows;
    if (finalists.size() > 1)
      final_rows =
          time_kernels(finalists, m.shape, options.n, options.threads, warm, 3, options.final_min_time_s, peak_gbps,
                       read_loop);
    for (BenchRow& r : screened) {
      const auto again = std::find_if(final_rows.begin(), final_rows.end(),
                                      [&](const BenchRow& f) { return f.kernel == r.kernel; });
      if (again != final_rows.end()) r = *again;
      if (r.time_median_us <= 0) continue;
      fresh.push_back(tuning_row(r, "auto"));
      // The memory's speed while it ran: the loop timed beside it, else the plan's.
      fresh.back().read_gbps = !read_loop.empty() && r.peak_gbps > 0 ? r.peak_gbps : ev.read_gbps;
      ev.speeds.push_back(speed_of(fresh.back(), "measured now"));
    }
    ++ev.measured;
  }
  ev.seconds = elapsed();
  release_bench_read_buffer();  // what runs next (a decode) needs its memory
  if (const std::string error = store.add(fresh); !error.empty()) {
    ev.warning = "the tuning store was not updated: " + error;
    say(ev.warning);
  }
  return ev;
}

}  // namespace qmv
