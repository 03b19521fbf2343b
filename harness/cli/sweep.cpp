// `qmvlab sweep` (run an experiment file, one CSV row per point, resumable and
// shardable) and `qmvlab merge` (join shard CSVs into one).
#include "harness/cli/sweep.h"

#include <new>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <stdexcept>
#include <tuple>

#include "harness/bench.h"
#include "harness/check.h"
#include "harness/cli/command.h"
#include "harness/cli/tables.h"
#include "harness/csv.h"
#include "harness/tuning_store.h"
#include "harness/experiment.h"
#include "harness/machine.h"
#include "harness/peak.h"
#include "harness/table.h"

namespace qmv {

namespace {

class SweepCommand : public Command {
 public:
  explicit SweepCommand(CLI::App& app);
  bool chosen() const override;
  int run(const std::string& command_line) override;

 private:
  struct Options {
    CLI::App* sweep = nullptr;
    CLI::App* merge = nullptr;
    // sweep
    std::string experiment, out, shard;
    bool resume = false, dry_run = false;
    int peak_reps = 5;
    bool peak_once = false;
    int peak_buffer_mib = 0;  // 0: the cold size
    std::uint64_t seed = 0;
    // merge
    std::string merge_out;
    std::vector<std::string> merge_in;
  };
  Options o_;
};

}  // namespace

namespace {

using Clock = std::chrono::steady_clock;

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (std::size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size())) s.replace(p, from.size(), to);
  return s;
}

std::string duration(double s) {
  if (s < 90) return fmt::format("{:.0f} s", s);
  if (s < 5400) return fmt::format("{:.1f} min", s / 60);
  return fmt::format("{:.1f} h", s / 3600);
}

SweepCheck summarize(const CheckResult& r) {
  SweepCheck c;
  if (!r.skipped.empty() || !r.not_run.empty()) {
    c.failure = r.skipped.empty() ? "not run: " + r.not_run : r.skipped;
    return c;
  }
  c.ran = true;
  c.passed = r.passed();
  for (const CaseResult& k : r.cases) {
    c.nmse_kernel = std::max(c.nmse_kernel, k.kernel.nmse);
    (k.activation == "outliers" ? c.nmse_e2e_outliers : c.nmse_e2e_gaussian) = k.end_to_end.nmse;
    if (!k.passed && c.failure.empty()) c.failure = k.activation + ": " + k.failure;
  }
  return c;
}

// Writes the rows of an existing CSV again, minus a cut-short last line, under the
// current header.
void rewrite(const std::string& path, const CsvTable& t) {
  CsvWriter w(path, t.header, false);
  for (const auto& r : t.rows) w.write(r);
}

int run_merge(const std::string& out, const std::vector<std::string>& in) {
  std::vector<std::string> duplicates;
  std::vector<std::string> paths;
  for (const auto& p : in) paths.push_back(expand_machine(p));
  const CsvTable t = merge_sweeps(paths, &duplicates);
  for (const auto& d : duplicates) fmt::print(stderr, "qmvlab: warning: duplicate point {} dropped\n", d);
  CsvWriter w(expand_machine(out), t.header, false);
  for (const auto& r : t.rows) w.write(r);
  fmt::print("merged {} file(s), {} point(s){} into {}\n", paths.size(), t.rows.size(),
             duplicates.empty() ? "" : fmt::format(" ({} duplicate(s) dropped)", duplicates.size()), w.path());
  return 0;
}

}  // namespace

SweepCommand::SweepCommand(CLI::App& app) {
  Options& o = o_;
  o.sweep = app.add_subcommand(
      "sweep", "Run an experiment (experiments/*.toml): check and time every kernel x shape x threads x cache "
               "point, one CSV row per point as it finishes");
  o.sweep->add_option("experiment", o.experiment, "Experiment TOML file")->required();
  o.sweep->add_option("--out", o.out,
                      "CSV to write (default results/{machine}/{experiment}.csv; {machine} and {experiment} expand)");
  o.sweep->add_flag("--resume", o.resume, "Keep the points already in --out and run only the missing ones");
  o.sweep->add_option("--shard", o.shard,
                      "Run the I-th of N slices of the points (by each point's key, the same on every machine); "
                      "the default --out becomes {experiment}.shard-I-of-N.csv");
  o.sweep->add_flag("--dry-run", o.dry_run, "List the points (and what would be skipped) without running them");
  o.sweep->add_option("--peak-reps", o.peak_reps, "Repetitions of the peak bandwidth read per thread count")
      ->check(CLI::Range(1, 100))->capture_default_str();
  o.sweep->add_option("--peak-buffer-mib", o.peak_buffer_mib,
                      "CPU: read a buffer of this many MiB for the peak instead of the cold size (4x the last-level "
                      "cache, at least 1 GiB): seconds quicker, but not the roofline (a smoke run's option)")
      ->check(CLI::Range(1, 1 << 20));
  o.sweep->add_flag(
      "--peak-once", o.peak_once,
      "CPU, cold: rows' % of peak against the peak measured up front (best pass, raised by later "
      "re-measurements), not against the highest median of the read loops timed among each group's points");
  o.sweep->add_option("--seed", o.seed, "Check seed (0: a fresh one, printed)");
  o.sweep->footer("On a Slurm cluster, scripts/slurm_sweep.py runs the shards as one job array per machine type "
                  "and merges each machine's (experiments/README.md).");

  o.merge = app.add_subcommand("merge", "Join sweep CSVs (shards) into one, sorted by point");
  o.merge->add_option("out", o.merge_out, "Merged CSV to write")->required();
  o.merge->add_option("shards", o.merge_in, "Sweep CSVs to join (same header)")->required();
}

bool SweepCommand::chosen() const { return o_.sweep->parsed() || o_.merge->parsed(); }

int SweepCommand::run(const std::string& command_line) {
  const Options& o = o_;
  if (o.merge->parsed()) return run_merge(o.merge_out, o.merge_in);

  const Experiment exp = load_experiment(o.experiment);
  std::vector<SweepPoint> points = expand_points(exp);
  const std::size_t all_points = points.size();
  Shard shard;
  if (!o.shard.empty()) shard = parse_shard(o.shard);
  std::string out = o.out;
  if (out.empty())
    out = shard.count > 1 || !o.shard.empty()
              ? fmt::format("results/{{machine}}/{}.shard-{}-of-{}.csv", exp.name, shard.index, shard.count)
              : fmt::format("results/{{machine}}/{}.csv", exp.name);
  out = replace_all(expand_machine(out), "{experiment}", exp.name);
  std::erase_if(points, [&](const SweepPoint& p) { return !in_shard(point_key(p), shard); });
  const std::size_t shard_points = points.size();

  std::size_t already = 0;
  if (o.resume && std::filesystem::exists(out)) {
    bool partial = false;
    const CsvTable done = read_sweep_csv(out, &partial);
    std::set<std::string> keys;
    const std::size_t exp_col = done.column("experiment");
    for (std::size_t i = 0; i < done.rows.size(); ++i) {
      if (done.rows[i][exp_col] != exp.name)
        throw std::runtime_error(fmt::format("{}: row {} belongs to experiment '{}', not '{}'", out, i + 2,
                                             done.rows[i][exp_col], exp.name));
      keys.insert(done.key(i));
    }
    if (partial) fmt::print("{}: dropping a cut-short last line\n", out);
    // Rows are appended in the current columns: a file from before some of them is
    // written again first, the columns its rows lack left empty.
    if (done.older_header)
      fmt::print("{}: {} its rows with the current columns\n", out, o.dry_run ? "would rewrite" : "rewriting");
    if ((partial || done.older_header) && !o.dry_run) rewrite(out, done);
    std::erase_if(points, [&](const SweepPoint& p) { return keys.count(point_key(p)) > 0; });
    already = shard_points - points.size();
  }

  std::size_t skipped = 0;
  for (const auto& p : points) skipped += !p.skip_reason.empty();
  const std::size_t to_run = points.size() - skipped;
  fmt::print("experiment {} ({}): {} point(s){}{}; {} to run, {} skipped here -> {}\n", exp.name, exp.source,
             all_points, shard.count > 1 ? fmt::format(", {} in shard {}/{}", shard_points, shard.index, shard.count) : "",
             o.resume ? fmt::format(", {} already in the CSV", already) : "", to_run, skipped, out);
  if (o.dry_run) {
    for (const auto& p : points)
      fmt::print("  {} {}{}\n", point_key(p), p.shape.ops.empty() ? "" : "[" + p.shape.ops + "] ",
                 p.skip_reason.empty() ? "run" : "skip: " + p.skip_reason);
    return 0;
  }

  const RunContext ctx = current_context(command_line);
  CsvWriter csv(out, sweep_header(), o.resume);
  std::map<std::string, std::size_t> skip_reasons;
  for (const auto& p : points)
    if (!p.skip_reason.empty()) {
      csv.write(sweep_fields(ctx, exp.name, p, nullptr, {}, "skipped", p.skip_reason));
      ++skip_reasons[p.skip_reason.substr(0, p.skip_reason.find(" ("))];
    }
  for (const auto& [reason, n] : skip_reasons) fmt::print("skipped {} point(s): {}\n", n, reason);

  // The roofline per thread count, before any kernel runs: it names the read loops that
  // each cold CPU group times among its points (the rows' peak), and it is the peak of
  // the other rows, re-measured during the sweep (below): on a shared machine one
  // measurement can land in a busy moment, and every row's share would then read high.
  const std::size_t peak_buffer = static_cast<std::size_t>(o.peak_buffer_mib) << 20;
  std::map<int, double> peaks;
  std::map<int, Clock::time_point> peak_measured;
  std::map<int, std::string> peak_loop;                  // the read loop that won; the re-measurements time it alone
  std::map<int, std::vector<std::string>> in_run_loops;  // the finalists, timed among each cold group
  for (const auto& p : points)
    if (p.skip_reason.empty() && !peaks.count(p.threads)) {
      const PeakResult r = measure_read_bandwidth(p.threads, o.peak_reps, {}, peak_buffer);
      peaks[p.threads] = r.best_gbps;
      peak_measured[p.threads] = Clock::now();
      peak_loop[p.threads] = r.read_loop;
      in_run_loops[p.threads] = r.finalists;
      fmt::print("peak read bandwidth, {} thread(s): {:.2f} GB/s ({})\n", p.threads, r.best_gbps, r.read_loop);
    }
  const auto remeasure_peak = [&](int threads) {
    if (Clock::now() - peak_measured[threads] < std::chrono::seconds(60)) return;
    const PeakResult r = measure_read_bandwidth(threads, 2, peak_loop[threads], peak_buffer);
    peak_measured[threads] = Clock::now();
    if (r.best_gbps > peaks[threads]) {
      fmt::print("peak read bandwidth, {} thread(s): {:.2f} GB/s, above the {:.2f} measured before; later rows use "
                 "it\n", threads, r.best_gbps, peaks[threads]);
      peaks[threads] = r.best_gbps;
    }
  };
  const std::uint64_t seed =
      o.seed ? o.seed : std::random_device{}() | (std::uint64_t(std::random_device{}()) << 32);
  if (exp.check) fmt::print("check seed {} (rerun with --seed {})\n", seed, seed);
  std::fflush(stdout);

  // One bench call per group. CPU: every kernel of one weight type with one thread count
  // and cache, ggml's included, their points' repetitions interleaved in random order and,
  // when cold, the peak's finalist read loops timed among them: each row's share of the
  // peak, and each kernel against the peer, are medians of the same stretch of time,
  // however the machine's bandwidth drifts. CUDA: one kernel's points, back to back.
  using GroupKey = std::tuple<std::string, int, std::string>;
  std::map<GroupKey, std::vector<const SweepPoint*>> groups;
  std::vector<GroupKey> order;
  for (const auto& p : points) {
    if (!p.skip_reason.empty()) continue;
    const std::string who = p.kernel->backend == Backend::CPU
                                ? fmt::format("{} CPU kernels", to_string(p.kernel->weight))
                                : p.kernel->name;
    const GroupKey g{who, p.threads, p.cache};
    if (!groups.count(g)) order.push_back(g);
    groups[g].push_back(&p);
  }

  std::map<std::string, SweepCheck> checks;  // by kernel|shape|threads: cache does not matter
  int done = 0, failed = 0;
  const auto started = Clock::now();
  for (const auto& g : order) {
    const auto& group = groups.at(g);
    const int threads = std::get<1>(g);
    const bool cpu = group.front()->kernel->backend == Backend::CPU;
    std::vector<const KernelSpec*> kernels;
    std::vector<Shape> shapes;
    std::vector<int> vectors;                          // the counts of the group's points
    std::map<std::string, const SweepPoint*> wanted;  // by kernel|ROWSxCOLS|n
    auto key_of = [](const std::string& kernel, Shape s, int n) {
      return fmt::format("{}|{}|{}", kernel, to_string(s), n);
    };
    for (const SweepPoint* p : group) {
      if (std::find(kernels.begin(), kernels.end(), p->kernel) == kernels.end()) kernels.push_back(p->kernel);
      if (std::find(shapes.begin(), shapes.end(), p->shape.shape) == shapes.end()) shapes.push_back(p->shape.shape);
      if (std::find(vectors.begin(), vectors.end(), p->n) == vectors.end()) vectors.push_back(p->n);
      wanted[key_of(p->kernel->name, p->shape.shape, p->n)] = p;
    }
    std::sort(vectors.begin(), vectors.end());
    auto check_key = [&](const std::string& kernel, Shape s) {
      return fmt::format("{}|{}|{}", kernel, to_string(s), threads);
    };

    // A group that throws (an allocation that fails, a kernel's error) ends in a failed
    // row for each of its points not yet written, naming the error; the sweep goes on.
    std::set<const SweepPoint*> written;
    std::vector<BenchRow> measured;  // for the tuning store: the points that passed their check
    std::map<int, double> read_speeds;  // the read loops timed among them: the memory's speed then
    auto progress = [&](const SweepPoint& p, const std::string& result) {
      ++done;
      const double s = std::chrono::duration<double>(Clock::now() - started).count();
      fmt::print("[{}/{}] {} {} {} {}{}: {} | {}, ETA {}\n", done, to_run, p.kernel->name, to_string(p.shape.shape),
                 p.threads, p.cache, p.n != 1 ? fmt::format(" n={}", p.n) : "", result, duration(s),
                 duration(s / done * static_cast<double>(to_run - done)));
      std::fflush(stdout);
    };
    try {
      if (exp.check)
        for (const KernelSpec* k : kernels) {
          std::vector<Shape> unchecked;
          for (const SweepPoint* p : group)
            if (p->kernel == k && !checks.count(check_key(k->name, p->shape.shape))) unchecked.push_back(p->shape.shape);
          if (unchecked.empty()) continue;
          CheckConfig cc;
          cc.seed = seed;
          cc.threads = threads;
          run_check({k}, unchecked, cc,
                    [&](const CheckResult& r) { checks[check_key(k->name, r.shape)] = summarize(r); });
        }

      BenchConfig bc;
      bc.threads = {threads};
      bc.vectors = vectors;
      bc.warm = std::get<2>(g) == "warm";
      bc.repetitions = exp.repetitions;
      bc.min_time_s = exp.min_time_s;
      bc.interleave = cpu;
      bc.peak_buffer_bytes = peak_buffer;
      if (cpu && !bc.warm && !o.peak_once) bc.peak_read_loops = {{threads, in_run_loops.at(threads)}};
      if (cpu) {
        remeasure_peak(threads);
        // A group's rows come when all its repetitions are done: say what is running.
        fmt::print("timing {}: {} kernel(s) x {} shape(s), {} thread(s), {}{}, interleaved\n", std::get<0>(g),
                   kernels.size(), shapes.size(), threads, std::get<2>(g),
                   bc.peak_read_loops.empty()
                       ? ""
                       : fmt::format(", with the read loops {}", fmt::join(in_run_loops.at(threads), ", ")));
        std::fflush(stdout);
      }
      // The bench times kernels x shapes; a pair the group does not hold (a shape the
      // kernel's rule excludes, a point already in the CSV) is timed or refused there and
      // dropped here.
      const BenchOutcome res = run_bench(kernels, shapes, bc, peaks, [&](const BenchRow& row, int, int) {
        const auto w = wanted.find(key_of(row.kernel, {row.rows, row.cols}, row.n));
        if (w == wanted.end()) return;
        const SweepPoint& p = *w->second;
        const SweepCheck c = exp.check ? checks.at(check_key(row.kernel, p.shape.shape)) : SweepCheck{};
        const bool ok = !exp.check || c.passed;
        failed += !ok;
        if (ok) measured.push_back(row);
        csv.write(sweep_fields(ctx, exp.name, p, &row, c, ok ? "ok" : "failed",
                               ok ? "" : "check failed: " + c.failure));
        written.insert(&p);
        progress(p, fmt::format("{:.2f} GB/s, {:.1f}% of peak, check {}", row.gbps_median, row.peak_pct,
                                !exp.check ? "off" : fmt::format("{} NMSE {:.1e}", c.passed ? "pass" : "FAIL", c.nmse_kernel)));
      });
      // A skip names a kernel and shape: it fails that pair's points of every count.
      for (const BenchSkip& sk : res.skipped)
        for (int n : vectors) {
          if (sk.n != 0 && sk.n != n) continue;
          const auto w = wanted.find(key_of(sk.kernel, sk.shape, n));
          if (w == wanted.end() || written.count(w->second)) continue;
          const SweepPoint& p = *w->second;
          const SweepCheck c = exp.check ? checks.at(check_key(sk.kernel, p.shape.shape)) : SweepCheck{};
          ++failed;
          csv.write(sweep_fields(ctx, exp.name, p, nullptr, c, "failed", sk.reason));
          written.insert(&p);
          progress(p, "FAILED: " + sk.reason);
        }

      print_interleaved_peaks(res);
      read_speeds = res.interleaved_peak_gbps;
    } catch (const std::exception& e) {
      const std::string reason = fmt::format("the run of this group failed: {}",
                                             dynamic_cast<const std::bad_alloc*>(&e) ? "out of memory (std::bad_alloc)"
                                                                                     : e.what());
      for (const SweepPoint* p : group) {
        if (written.count(p)) continue;
        ++failed;
        csv.write(sweep_fields(ctx, exp.name, *p, nullptr, SweepCheck{}, "failed", reason));
        progress(*p, "FAILED: " + reason);
      }
    }
    record_in_store(measured, "sweep", read_speeds);
  }
  const double s = std::chrono::duration<double>(Clock::now() - started).count();
  fmt::print("sweep {}: {} point(s) run, {} failed, {} skipped, in {}; wrote {}\n", exp.name, done, failed, skipped,
             duration(s), csv.path());
  return failed ? 1 : 0;
}

void print_sweep_report(const std::string& path) {
  const CsvTable t = read_sweep_csv(path);
  std::vector<std::vector<std::string>> rows;
  auto col = [&](const std::vector<std::string>& r, const char* name) { return r[t.column(name)]; };
  unsigned line = 1;  // a sweep row is one line: its fields hold no newline
  auto fixed = [&](const std::vector<std::string>& r, const char* name, const char* fmtspec) {
    const std::string& v = col(r, name);
    return v.empty() ? std::string("-") : fmt::format(fmt::runtime(fmtspec), csv_number<double>(v, path, line, name));
  };
  for (const auto& r : t.rows) {
    ++line;
    const std::string passed = col(r, "check_passed");
    rows.push_back({col(r, "kernel"), col(r, "rows") + "x" + col(r, "cols"), col(r, "model_op"),
                    col(r, "threads"), col(r, "cache"), col(r, "status"), fixed(r, "gbps_median", "{:.2f}"),
                    fixed(r, "peak_pct", "{:.1f}%"),
                    passed.empty() ? "-" : (passed == "1" ? "pass" : "FAIL"),
                    fixed(r, "nmse_kernel", "{:.1e}"), fixed(r, "nmse_e2e_gaussian", "{:.1e}"),
                    col(r, "reason")});
  }
  if (!t.rows.empty())
    fmt::print("experiment {}, machine {} ({}), commit {}\n\n", col(t.rows.front(), "experiment"),
               canonical_machine(col(t.rows.front(), "machine")), col(t.rows.front(), "cpu_model"),
               col(t.rows.front(), "git_commit"));
  print_table({"kernel", "shape", "model op", "threads", "cache", "status", "GB/s", "% of peak", "check",
               "NMSE kernel", "NMSE e2e", "reason"},
              rows);
}

std::unique_ptr<Command> sweep_command(CLI::App& app) { return std::make_unique<SweepCommand>(app); }

}  // namespace qmv
