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

// The store's rows of one kernel at one matvec, at whatever read speeds they were timed.
using KernelRows = std::vector<const TuningRow*>;

// The read speeds a matvec's candidates are ranked at, and each ranked kernel's row at
// each (its newest in the group; a row of unknown speed, from a file written before the
// column, answers in any): rows[k][g] is kernel k's at speed g, empty for a kernel left
// out. The known speeds are grouped from the slowest up, each group spanning
// kSameReadSpeed. The speeds at which every candidate has a row are always ranked at;
// so is one at which most of them have a row (the host moved the threads in the middle
// of a pass, and some kernels' repetitions all met the other speed), and the kernels
// without a row there are left out: a kernel not timed at a speed the memory runs at
// cannot be ranked there, and a decode may meet either speed. Where every kernel
// has rows of unknown speed alone, those form the one group. Empty when no group has a
// row of every kernel.
struct SpeedGroups {
  std::vector<double> speeds;                       // a group's slowest row's speed; 0: unknown
  std::vector<std::vector<const TuningRow*>> rows;  // [kernel][group]
  int left_out = 0;                                 // kernels without a row at a ranked speed
  // Every candidate's row at each ranked speed, null where it has none: [kernel][group].
  std::vector<std::vector<const TuningRow*>> at_each;
};
SpeedGroups speed_groups(const std::vector<KernelRows>& by_kernel) {
  std::vector<double> known;
  for (const KernelRows& rows : by_kernel) {
    if (rows.empty()) return {};
    for (const TuningRow* r : rows)
      if (r->read_gbps > 0) known.push_back(r->read_gbps);
  }
  std::sort(known.begin(), known.end());
  auto newest_where = [](const KernelRows& rows, auto&& keep) {
    const TuningRow* best = nullptr;
    for (const TuningRow* r : rows)
      if (keep(*r) && (!best || r->measured_at > best->measured_at)) best = r;
    return best;
  };
  // Each group's newest row of each kernel (null where it has none), and how many have one.
  struct Group {
    double speed;
    std::vector<const TuningRow*> rows;
    std::size_t kernels = 0;
  };
  std::vector<Group> groups;
  auto add_group = [&](double speed, auto&& keep) {
    Group g{speed, {}, 0};
    for (const KernelRows& rows : by_kernel) {
      g.rows.push_back(newest_where(rows, keep));
      if (g.rows.back()) ++g.kernels;
    }
    if (g.kernels > 0) groups.push_back(std::move(g));
  };
  for (const auto& [begin, end] : read_speed_groups(known)) {
    const double low = known[begin], high = known[end - 1];
    add_group(low, [&](const TuningRow& r) { return r.read_gbps <= 0 || (r.read_gbps >= low && r.read_gbps <= high); });
  }
  const std::size_t all = by_kernel.size();
  if (std::none_of(groups.begin(), groups.end(), [&](const Group& g) { return g.kernels == all; })) {
    groups.clear();
    add_group(0.0, [](const TuningRow& r) { return r.read_gbps <= 0; });
    if (groups.empty() || groups.front().kernels != all) return {};
  }
  // The groups of most kernels first; one joins while some kernel has a row in each so far.
  std::stable_sort(groups.begin(), groups.end(), [](const Group& a, const Group& b) { return a.kernels > b.kernels; });
  std::vector<bool> ranked(all, true);
  std::vector<const Group*> chosen;
  for (const Group& g : groups) {
    if (g.kernels < all && 2 * g.kernels <= all) break;
    std::vector<bool> still = ranked;
    for (std::size_t k = 0; k < all; ++k) still[k] = still[k] && g.rows[k];
    if (std::find(still.begin(), still.end(), true) == still.end()) continue;
    ranked = still;
    chosen.push_back(&g);
  }
  std::sort(chosen.begin(), chosen.end(), [](const Group* a, const Group* b) { return a->speed < b->speed; });
  SpeedGroups out;
  out.rows.resize(all);
  out.at_each.resize(all);
  for (const Group* g : chosen) {
    out.speeds.push_back(g->speed);
    for (std::size_t k = 0; k < all; ++k) {
      if (ranked[k]) out.rows[k].push_back(g->rows[k]);
      out.at_each[k].push_back(g->rows[k]);
    }
  }
  out.left_out = static_cast<int>(std::count(ranked.begin(), ranked.end(), false));
  return out;
}

// One kernel's figure over the speed groups: the geometric mean of its times (and of its
// GB/s) at each, so a kernel that ties at one speed and wins at the other ranks ahead,
// and where the figure came from.
KernelSpeed speed_over_groups(const std::vector<const TuningRow*>& rows, const std::vector<double>& speeds) {
  double log_time = 0, log_gbps = 0;
  const TuningRow* newest = rows.front();
  for (const TuningRow* r : rows) {
    log_time += std::log(r->time_median_us);
    log_gbps += std::log(r->gbps);
    if (r->measured_at > newest->measured_at) newest = r;
  }
  const double n = static_cast<double>(rows.size());
  std::string read;
  for (std::size_t g = 0; g < speeds.size(); ++g)
    if (rows[g]->read_gbps > 0)
      read += fmt::format("{}{:.0f}", read.empty() ? "" : (g + 1 == speeds.size() ? " and " : ", "), rows[g]->read_gbps);
  const std::string source =
      read.empty() ? "store, " + newest->date() : fmt::format("store, {} at {} GB/s read", newest->date(), read);
  KernelSpeed k = speed_of(*newest, source);
  k.time_median_us = std::exp(log_time / n);
  k.gbps_median = std::exp(log_gbps / n);
  return k;
}

// Each ranked speed's slowest and fastest read among its rows (0, 0 where none is known).
std::vector<std::pair<double, double>> group_ranges(const SpeedGroups& g) {
  std::vector<std::pair<double, double>> out(g.speeds.size(), {0.0, 0.0});
  for (const auto& rows_of_kernel : g.at_each)
    for (std::size_t i = 0; i < rows_of_kernel.size(); ++i)
      if (const TuningRow* row = rows_of_kernel[i]; row && row->read_gbps > 0) {
        const double r = row->read_gbps;
        out[i] = {out[i].first > 0 ? std::min(out[i].first, r) : r, std::max(out[i].second, r)};
      }
  return out;
}

// `g` ranked at its speed `i`: the kernels within kTieAtSpeedNow of the fastest there are
// ranked by their geometric mean over the speeds all of them have rows at (`i` among
// them), the slower ones drop out, and those with no row at `i` are left out.
SpeedGroups at_speed(const SpeedGroups& g, std::size_t i) {
  double fastest = 0;
  for (const auto& rows_of_kernel : g.at_each)
    if (const TuningRow* row = rows_of_kernel[i]; row && (fastest == 0 || row->time_median_us < fastest))
      fastest = row->time_median_us;
  const std::size_t kernels = g.at_each.size(), speeds = g.speeds.size();
  std::vector<bool> tied(kernels, false);
  int left_out = 0;
  for (std::size_t k = 0; k < kernels; ++k) {
    const TuningRow* row = g.at_each[k][i];
    left_out += row ? 0 : 1;
    tied[k] = row && row->time_median_us <= kTieAtSpeedNow * fastest;
  }
  std::vector<std::size_t> shared;  // the speeds every tied kernel has a row at
  for (std::size_t j = 0; j < speeds; ++j) {
    bool all = true;
    for (std::size_t k = 0; k < kernels; ++k) all = all && (!tied[k] || g.at_each[k][j]);
    if (all) shared.push_back(j);
  }
  SpeedGroups out;
  out.left_out = left_out;
  out.rows.resize(kernels);
  for (const std::size_t j : shared) out.speeds.push_back(g.speeds[j]);
  for (std::size_t k = 0; k < kernels; ++k)
    if (tied[k])
      for (const std::size_t j : shared) out.rows[k].push_back(g.at_each[k][j]);
  return out;
}

std::string describe(const AutoMatvec& m) {
  std::string ops;
  for (const Op op : m.ops) ops += fmt::format("{}{}", ops.empty() ? "" : "+", to_string(op));
  return fmt::format("{} {} {}", ops, to_string(m.weight), to_string(m.shape));
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
    // As cold as the kernels' rotations, not a bench's 1 GiB and more: a quicker read.
    cfg.peak_buffer_bytes = cold_rotation_bytes();
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

int group_at_speed(const std::vector<std::pair<double, double>>& group_ranges, double now_gbps) {
  if (now_gbps <= 0) return -1;
  int best = -1;
  double best_ratio = kSameReadSpeed;
  for (std::size_t i = 0; i < group_ranges.size(); ++i) {
    const auto [low, high] = group_ranges[i];
    if (low <= 0) continue;
    // 1 inside the range, else how far outside it, as a ratio.
    const double ratio = now_gbps < low ? low / now_gbps : now_gbps > high ? now_gbps / high : 1.0;
    if (ratio <= best_ratio) {
      best_ratio = ratio;
      best = static_cast<int>(i);
    }
  }
  return best;
}

bool passes_met_one_speed(const std::vector<BenchRow>& screened, const std::vector<BenchRow>& finals) {
  // Each pass's rows share the read loop timed among them (0 where none was: warm).
  if (screened.empty() || finals.empty()) return true;
  return same_read_speed(screened.front().peak_gbps, finals.front().peak_gbps);
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
                      : fmt::format("tuning: {} matvec shape(s){} for auto, {} thread(s), weights {}: ", matvecs, batch,
                                    threads, cache == "cold" ? "from memory (cold)" : "in the cache (warm)");
  std::vector<std::string> parts;
  if (measured) parts.push_back(fmt::format("{} measured now in {:.0f} s", measured, seconds));
  if (from_store) parts.push_back(fmt::format("{} from the store", from_store));
  const std::string left = left_out ? fmt::format(" ({} kernel(s) left out, not timed at each)", left_out) : "";
  if (at_speed_now)
    parts.push_back(fmt::format("{} of them ranked at the read speed now, {:.0f} GB/s{}", at_speed_now, read_gbps_now,
                                over_speeds ? "" : left));
  if (over_speeds) parts.push_back(fmt::format("{} of them ranked over two or more read speeds{}", over_speeds, left));
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
  // Only matvecs with a kernel of this backend to weigh are auto's: a batch decode has
  // batch kernels only for some weight types, and the GPU has no fused up+gate kernel
  // (its decode stacks the two matrices into one matvec instead).
  std::erase_if(matvecs, [&](const AutoMatvec& m) { return auto_candidates(m, options.backend, options.n).empty(); });
  ev.matvecs = static_cast<int>(matvecs.size());
  if (matvecs.empty()) return ev;

  const std::vector<TuningRow> rows = store.usable_rows(&ev.warning);
  if (!ev.warning.empty()) say(ev.warning);
  // Cold CPU timing keeps the memory's speed beside each row: the store peak's read loop.
  std::string read_loop;
  if (cpu && ev.cache == "cold") {
    const std::vector<ReadLoop> usable = usable_read_loops();
    if (const auto p = store.peak(options.threads))
      for (const ReadLoop& l : usable)
        if (l.name == p->kernel) read_loop = l.name;
    if (read_loop.empty() && !usable.empty()) read_loop = usable.front().name;
  }
  // The store's rows of a kernel at a matvec.
  auto stored = [&](const KernelSpec& k, const AutoMatvec& m) {
    KernelRows mine;
    for (const TuningRow& r : rows)
      if (r.kind == "kernel" && r.kernel == k.name && r.rows == m.shape.rows && r.cols == m.shape.cols &&
          r.n == options.n && (!cpu || (r.threads == options.threads && r.cache == ev.cache)))
        mine.push_back(&r);
    return mine;
  };
  double peak_gbps = 0;
  if (const auto p = store.peak(options.threads)) peak_gbps = p->gbps;

  // The memory's read speed now, read once, when a matvec first has rows at two speeds.
  bool now_known = options.read_gbps_now >= 0;
  double now_gbps = std::max(options.read_gbps_now, 0.0);
  auto speed_now = [&] {
    if (!now_known) {
      now_known = true;
      if (!read_loop.empty()) {
        const PeakResult p = measure_read_bandwidth(options.threads, 3, read_loop, cold_rotation_bytes());
        if (!p.loops.empty()) now_gbps = p.loops.front().median_gbps;
      }
    }
    return now_gbps;
  };
  // The speed group of `g` its kernels are ranked at, the one the memory reads at now,
  // where it has two or more and the speed now is near one; -1 otherwise.
  auto group_now = [&](const SpeedGroups& g) {
    return g.speeds.size() > 1 ? group_at_speed(group_ranges(g), speed_now()) : -1;
  };
  // The kernels' figures over the speed groups `g` (speed_groups), or at the one the
  // memory reads at now; false when there is none.
  auto use = [&](SpeedGroups g) {
    if (g.speeds.empty()) return false;
    bool now = false;
    if (const int i = group_now(g); i >= 0) {
      g = at_speed(g, static_cast<std::size_t>(i));
      now = true;
      ++ev.at_speed_now;
      ev.read_gbps_now = now_gbps;
    }
    for (const auto& rows_of_kernel : g.rows)
      if (!rows_of_kernel.empty()) ev.speeds.push_back(speed_over_groups(rows_of_kernel, g.speeds));
    if (!now && g.speeds.size() > 1) ++ev.over_speeds;
    ev.left_out += g.left_out;
    return true;
  };
  // A matvec is covered where every candidate has a row at one read speed at least.
  // Measuring, one ranked at the speed now is covered only where every candidate has a
  // row there: the one without may be the fastest at it (a kernel whose every
  // repetition met the other placement of the threads), so all are timed now, together.
  std::vector<const AutoMatvec*> missing;
  std::map<const AutoMatvec*, int> lacking_at_speed_now;
  for (const AutoMatvec& m : matvecs) {
    const auto kernels = auto_candidates(m, options.backend, options.n);
    if (kernels.empty()) continue;
    std::vector<KernelRows> by_kernel;
    for (const KernelSpec* k : kernels) by_kernel.push_back(stored(*k, m));
    SpeedGroups g = speed_groups(by_kernel);
    const int i = options.measure ? group_now(g) : -1;
    if (const int lacking = i < 0 ? 0 : at_speed(g, static_cast<std::size_t>(i)).left_out; lacking > 0) {
      lacking_at_speed_now[&m] = lacking;
      missing.push_back(&m);
    } else if (use(std::move(g))) {
      ++ev.from_store;
    } else {
      missing.push_back(&m);
    }
  }
  // Partly covered matvecs keep, when nothing is timed, the figures of the kernels that
  // share a speed: dropping those with the fewest rows first until the rest do.
  auto keep_partial = [&](const AutoMatvec& m) {
    std::vector<KernelRows> by_kernel;
    for (const KernelSpec* k : auto_candidates(m, options.backend, options.n))
      if (KernelRows mine = stored(*k, m); !mine.empty()) by_kernel.push_back(std::move(mine));
    std::stable_sort(by_kernel.begin(), by_kernel.end(),
                     [](const KernelRows& a, const KernelRows& b) { return a.size() > b.size(); });
    bool any = false;
    for (std::size_t keep = by_kernel.size(); keep > 0 && !any; --keep)
      any = use(speed_groups({by_kernel.begin(), by_kernel.begin() + static_cast<std::ptrdiff_t>(keep)}));
    any ? ++ev.from_store : ++ev.unmeasured;
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
    const auto lacking = lacking_at_speed_now.find(&m);
    const std::string why =
        lacking == lacking_at_speed_now.end()
            ? ""
            : fmt::format(", {} of them with no row at the read speed now, {:.0f} GB/s", lacking->second, now_gbps);
    say(fmt::format("auto: timing {} {} kernel(s) for {}{} ({}/{}, {:.0f} s so far)", kernels.size(), kind,
                    describe(m), why, i + 1, missing.size(), options.spent_s + elapsed()));
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
    // The memory changed speed between the passes (the host moved the threads, or a slow
    // spell): the finalists' rows would sit at one speed and the others' at another, no
    // speed would hold a row of every candidate, and the next run would time the matvec
    // again. So every candidate is timed once more, together.
    if (!passes_met_one_speed(screened, final_rows)) {
      say(fmt::format("auto: the memory read at {:.0f} GB/s, then {:.0f}: timing all {} kernel(s) again together",
                      screened.front().peak_gbps, final_rows.front().peak_gbps, kernels.size()));
      final_rows = time_kernels(kernels, m.shape, options.n, options.threads, warm, 3, options.final_min_time_s,
                                peak_gbps, read_loop);
    }
    for (BenchRow& r : screened) {
      const auto again = std::find_if(final_rows.begin(), final_rows.end(),
                                      [&](const BenchRow& f) { return f.kernel == r.kernel; });
      if (again != final_rows.end()) r = *again;
      if (r.time_median_us <= 0) continue;
      fresh.push_back(tuning_row(r, "auto"));
      // The loop timed beside it. One row at the run's speed, not one per speed its few
      // repetitions met (as bench keeps them): every candidate then has a row at one
      // speed, so the next run finds the matvec covered.
      if (!read_loop.empty()) fresh.back().read_gbps = r.peak_gbps;
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
