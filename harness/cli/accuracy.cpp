// `qmvlab accuracy`: every kernel's end-to-end NMSE on Gaussian activations and on
// activations with outlier channels, with and without outlier routing, as a CSV and
// tables; `--cost`: what routing costs (the outlier test against the matvec it
// guards, the f32 sibling against the int8 kernel, false positives on Gaussian
// vectors). See harness/accuracy.h.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <stdexcept>

#include "harness/accuracy.h"
#include "harness/cli/command.h"
#include "harness/cli/options.h"
#include "harness/csv.h"
#include "harness/machine.h"
#include "harness/shapes.h"
#include "harness/table.h"
#include "kernels/availability.h"
#include "kernels/registry.h"

namespace qmv {

namespace {

class AccuracyCommand : public Command {
 public:
  explicit AccuracyCommand(CLI::App& app);
  bool chosen() const override;
  int run(const std::string& command_line) override;

 private:
  struct Options {
    CLI::App* cmd = nullptr;
    std::string kernels = "*", shapes, channels = "1,2,3,4", scales = "10,25,50", out, by = "kernel";
    AccuracyConfig config;
    std::uint64_t seed = 0;
    bool append = false, cost = false;
    int reps = 15;
    std::int64_t fp_vectors = 10000;
  };
  Options o_;
};

}  // namespace

namespace {

// Shapes of the NMSE table: the row lengths of TinyLlama-1.1B (2048, 5632) and
// Llama-2-7B (4096, 11008) and Llama-3-8B's FFN (14336); the rows only narrow the spread.
constexpr const char* kAccuracyShapes = "1024x2048,1024x4096,1024x5632,1024x11008,1024x14336";
// Shapes of the cost table: every matvec of the two models.
constexpr const char* kCostShapes = "tinyllama-1.1b,llama-2-7b";

template <class T>
std::vector<T> parse_list(const std::string& text, const std::string& option, T min, const std::string& what) {
  std::vector<T> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    start = end + 1;
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    const bool whole = std::is_floating_point_v<T> || v == std::floor(v);
    if (item.empty() || used != item.size() || !std::isfinite(v) || v < double(min) || !whole)
      throw std::invalid_argument(fmt::format("{}: '{}' is not {}", option, item, what));
    if (std::find(out.begin(), out.end(), static_cast<T>(v)) == out.end()) out.push_back(static_cast<T>(v));
  }
  return out;
}

std::string sci(double v) { return std::isfinite(v) ? fmt::format("{:.1e}", v) : "inf"; }

std::vector<std::string> accuracy_header() {
  return {"machine", "cpu_model", "gpu", "compiler", "git_commit", "kernel", "op", "weight_type", "act_format",
          "backend", "rows", "cols", "threads", "activation", "outlier_channels", "outlier_x_rms", "trials",
          "nmse_e2e_median", "nmse_e2e_min", "nmse_e2e_max", "peak_to_rms_median", "k", "tripped_share",
          "routed_to", "nmse_e2e_routed_median", "seed", "command"};
}

std::vector<std::string> cost_header() {
  return {"machine", "cpu_model", "gpu", "compiler", "git_commit", "kernel", "weight_type", "act_format", "rows",
          "cols", "threads", "repetitions", "k", "test_us_median", "quantize_us_median", "kernel_us_median",
          "test_pct_of_kernel", "sibling", "sibling_us_median", "sibling_over_kernel", "fp_vectors", "fp_tripped",
          "fp_max_peak_to_rms", "seed", "command"};
}

double share(const std::vector<bool>& v) {
  return v.empty() ? 0.0 : double(std::count(v.begin(), v.end(), true)) / double(v.size());
}

// The label a result is pooled under: its kernel, or its weight type and activation
// format (kernels of one format see the same quantized activations).
std::string group_of(const AccuracyResult& r, bool by_format) {
  return by_format ? fmt::format("{} weights, {} activations", to_string(r.spec->weight), to_string(r.spec->act))
                   : r.spec->name;
}

// Median NMSE per group and case over every shape and trial.
void print_nmse_table(const std::vector<AccuracyResult>& results, const std::vector<OutlierCase>& cases,
                      bool by_format) {
  std::vector<std::string> groups;
  std::map<std::pair<std::string, std::string>, std::vector<double>> pooled;
  for (const auto& r : results) {
    const std::string g = group_of(r, by_format);
    if (std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
    auto& v = pooled[{g, to_string(r.outlier_case)}];
    v.insert(v.end(), r.nmse.begin(), r.nmse.end());
  }
  std::vector<std::string> header = {by_format ? "weights, activations" : "kernel"};
  for (const auto& c : cases) header.push_back(to_string(c));
  std::vector<std::vector<std::string>> rows;
  for (const auto& g : groups) {
    rows.push_back({g});
    for (const auto& c : cases) rows.back().push_back(sci(median_of(pooled[{g, to_string(c)}])));
  }
  print_table(header, rows);
}

// Int8 kernels with and without routing: Gaussian vectors (how often they trip, the
// NMSE either way) and outlier vectors (all cases pooled, and the worst case).
void print_routing_table(const std::vector<AccuracyResult>& results, const std::vector<OutlierCase>& cases,
                         bool by_format, double k) {
  struct Pool {
    std::vector<double> g, g_routed, o, o_routed;
    std::vector<bool> g_trip, o_trip;
    std::map<std::string, std::vector<double>> by_case, by_case_routed;
    std::string sibling;
  };
  std::vector<std::string> groups;
  std::map<std::string, Pool> pools;
  for (const auto& r : results) {
    if (!r.sibling) continue;
    const std::string g = group_of(r, by_format);
    if (std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
    Pool& p = pools[g];
    if (p.sibling.find(r.sibling->name) == std::string::npos)
      p.sibling += (p.sibling.empty() ? "" : ", ") + r.sibling->name;
    auto add = [](std::vector<double>& to, const std::vector<double>& from) { to.insert(to.end(), from.begin(), from.end()); };
    if (r.outlier_case.gaussian()) {
      add(p.g, r.nmse);
      add(p.g_routed, r.routed_nmse);
      p.g_trip.insert(p.g_trip.end(), r.tripped.begin(), r.tripped.end());
    } else {
      add(p.o, r.nmse);
      add(p.o_routed, r.routed_nmse);
      p.o_trip.insert(p.o_trip.end(), r.tripped.begin(), r.tripped.end());
      add(p.by_case[to_string(r.outlier_case)], r.nmse);
      add(p.by_case_routed[to_string(r.outlier_case)], r.routed_nmse);
    }
  }
  if (groups.empty()) return;
  std::vector<std::vector<std::string>> rows;
  for (const auto& g : groups) {
    Pool& p = pools[g];
    std::string worst;
    double worst_nmse = -1;
    for (const auto& c : cases)
      if (!c.gaussian() && median_of(p.by_case[to_string(c)]) > worst_nmse) {
        worst_nmse = median_of(p.by_case[to_string(c)]);
        worst = to_string(c);
      }
    rows.push_back({g, p.sibling, fmt::format("{:.1f}%", 100 * share(p.g_trip)), sci(median_of(p.g)),
                    sci(median_of(p.g_routed)), fmt::format("{:.1f}%", 100 * share(p.o_trip)), sci(median_of(p.o)),
                    sci(median_of(p.o_routed)),
                    worst.empty() ? "-" : fmt::format("{} {} -> {}", worst, sci(worst_nmse),
                                                      sci(median_of(p.by_case_routed[worst])))});
  }
  fmt::print("\nwith outlier routing at k = {:g} (vectors with max|x| > k rms run the f32 sibling):\n\n", k);
  print_table({by_format ? "weights, activations" : "kernel", "f32 sibling", "gaussian tripped", "gaussian NMSE",
               "routed", "outliers tripped", "outliers NMSE", "routed", "worst case: NMSE -> routed"},
              rows);
}

struct CostOptions {
  std::string kernels, out;
  bool append = false;
  int reps = 0;
  std::int64_t fp_vectors = 0;
  AccuracyConfig config;
};

int run_cost(const CostOptions& o, const std::vector<const KernelSpec*>& selected, const std::vector<Shape>& shapes,
             const std::string& command_line) {
  std::vector<const KernelSpec*> int8;
  for (const KernelSpec* k : selected)
    if (k->act != ActFormat::F32 && availability(*k).available) int8.push_back(k);
  if (int8.empty())
    throw std::invalid_argument(fmt::format("accuracy --cost: no available int8-activation kernel matches '{}'",
                                            o.kernels));
  CostConfig cfg;
  cfg.repetitions = o.reps;
  cfg.threads = o.config.threads;
  cfg.k = o.config.k;
  cfg.seed = o.config.seed;
  fmt::print("routing cost: {} int8 kernel(s) x {} shape(s), {} thread(s), {} interleaved repetitions (medians), "
             "cold weights; false positives over {} Gaussian vectors per row length, k = {:g}\n",
             int8.size(), shapes.size(), cfg.threads, cfg.repetitions, o.fp_vectors, cfg.k);
  std::fflush(stdout);
  std::map<std::int64_t, FalsePositives> fp;
  for (Shape s : shapes)
    if (!fp.count(s.cols) && o.fp_vectors > 0) {
      fp[s.cols] = count_false_positives(s.cols, o.fp_vectors, cfg.k, cfg.seed);
      fmt::print("false positives, n = {}: {} of {} Gaussian vectors tripped max|x| > {:g} rms (largest max|x|/rms "
                 "{:.2f})\n",
                 s.cols, fp[s.cols].tripped, fp[s.cols].vectors, cfg.k, fp[s.cols].max_peak_to_rms);
      std::fflush(stdout);
    }
  const RunContext ctx = current_context(command_line);
  std::unique_ptr<CsvWriter> csv;
  if (!o.out.empty()) csv = std::make_unique<CsvWriter>(expand_machine(o.out), cost_header(), o.append);
  std::vector<std::vector<std::string>> rows;
  const auto results = measure_routing_cost(int8, shapes, cfg, [&](const RoutingCost& r) {
    fmt::print("{} {}: test {:.2f} us, quantize {:.2f} us, kernel {:.1f} us (test = {:.2f}% of it); {} {:.1f} us "
               "({:.2f}x)\n",
               r.spec->name, to_string(r.shape), r.test_us, r.quantize_us, r.kernel_us, 100 * r.test_us / r.kernel_us,
               r.sibling->name, r.sibling_us, r.sibling_us / r.kernel_us);
    std::fflush(stdout);
    const FalsePositives f = fp.count(r.shape.cols) ? fp[r.shape.cols] : FalsePositives{};
    if (csv)
      csv->write({ctx.machine, ctx.cpu_model, ctx.gpu, ctx.compiler, ctx.git_commit, r.spec->name,
                  std::string(to_string(r.spec->weight)), std::string(to_string(r.spec->act)),
                  std::to_string(r.shape.rows), std::to_string(r.shape.cols), std::to_string(cfg.threads),
                  std::to_string(r.repetitions), fmt::format("{:g}", cfg.k), fmt::format("{:.4f}", r.test_us),
                  fmt::format("{:.4f}", r.quantize_us), fmt::format("{:.3f}", r.kernel_us),
                  fmt::format("{:.4f}", 100 * r.test_us / r.kernel_us), r.sibling->name,
                  fmt::format("{:.3f}", r.sibling_us), fmt::format("{:.4f}", r.sibling_us / r.kernel_us),
                  std::to_string(f.vectors), std::to_string(f.tripped), fmt::format("{:.4f}", f.max_peak_to_rms),
                  std::to_string(cfg.seed), ctx.command});
    rows.push_back({r.spec->name, to_string(r.shape), fmt::format("{:.2f}", r.test_us),
                    fmt::format("{:.2f}", r.quantize_us), fmt::format("{:.1f}", r.kernel_us),
                    fmt::format("{:.2f}%", 100 * r.test_us / r.kernel_us), r.sibling->name,
                    fmt::format("{:.1f}", r.sibling_us), fmt::format("{:.2f}x", r.sibling_us / r.kernel_us)});
  });
  fmt::print("\n");
  print_table({"kernel", "shape", "test us", "quantize us", "kernel us", "test / kernel", "f32 sibling",
               "sibling us", "sibling / kernel"},
              rows);
  if (csv) fmt::print("\nwrote {}\n", csv->path());
  return results.empty() ? 1 : 0;
}

}  // namespace

AccuracyCommand::AccuracyCommand(CLI::App& app) {
  Options& o = o_;
  o.config.threads = machine_info().cores;
  o.cmd = app.add_subcommand(
      "accuracy",
      "The int8 accuracy question: each kernel's end-to-end NMSE on Gaussian activations and on activations with "
      "outlier channels at exact multiples of the rms, with and without routing outlier vectors to the f32 "
      "sibling; --cost: what the routing costs");
  o.cmd->add_option("--kernels", o.kernels, "Comma-separated globs of kernel names")->capture_default_str();
  o.cmd->add_option("--shapes", o.shapes,
                    fmt::format("ROWSxCOLS list or preset (default: {}; with --cost: {})", kAccuracyShapes,
                                kCostShapes));
  o.cmd->add_option("--channels", o.channels, "Outlier channel counts (the Gaussian case is always measured)")
      ->capture_default_str();
  o.cmd->add_option("--scales", o.scales, "Outlier sizes, in multiples of the Gaussian channels' rms")
      ->capture_default_str();
  o.cmd->add_option("--trials", o.config.trials, "Trials (fresh weights and vectors); medians are reported")
      ->check(CLI::Range(1, 1000))->capture_default_str();
  o.cmd->add_option("--k", o.config.k, "Outlier threshold: a vector with max|x| > k rms routes to the f32 sibling")
      ->check(CLI::Range(0.0, 1e6))->capture_default_str();
  o.cmd->add_option("--threads", o.config.threads, "Threads for the kernels")->check(CLI::PositiveNumber)
      ->capture_default_str();
  o.cmd->add_option("--seed", o.seed, "Random seed (0: a fresh one, printed)");
  o.cmd->add_option("--by", o.by, "Tables by kernel, or by format (weight type and activation format)")
      ->check(CLI::IsMember({"kernel", "format"}))->capture_default_str();
  o.cmd->add_option("--out", o.out, "Write a CSV ({machine} expands to this machine's name)");
  o.cmd->add_flag("--append", o.append, "Append to --out instead of replacing it");
  o.cmd->add_flag("--cost", o.cost,
                  "Instead: time the outlier test, the activation quantization, each int8 kernel and its f32 "
                  "sibling (interleaved, cold weights), and count false positives on Gaussian vectors");
  o.cmd->add_option("--reps", o.reps, "--cost: interleaved repetitions")->check(CLI::Range(3, 1000))
      ->capture_default_str();
  o.cmd->add_option("--fp-vectors", o.fp_vectors, "--cost: Gaussian vectors per row length for the false positives")
      ->check(CLI::Range(0, 100000000))->capture_default_str();
}

bool AccuracyCommand::chosen() const { return o_.cmd->parsed(); }

int AccuracyCommand::run(const std::string& command_line) {
  Options o = o_;
  const auto selected = select_kernels(o.kernels);
  const std::vector<Shape> shapes =
      shapes_or_throw(o.shapes.empty() ? (o.cost ? kCostShapes : kAccuracyShapes) : o.shapes);
  require_supported(selected, shapes);
  o.config.seed = o.seed ? o.seed : std::random_device{}() | (std::uint64_t(std::random_device{}()) << 32);
  if (o.cost) return run_cost({o.kernels, o.out, o.append, o.reps, o.fp_vectors, o.config}, selected, shapes, command_line);

  o.config.channels = parse_list<int>(o.channels, "--channels", 1, "a whole number >= 1");
  o.config.multipliers = parse_list<float>(o.scales, "--scales", std::numeric_limits<float>::min(), "a number > 0");
  const int most_channels = *std::max_element(o.config.channels.begin(), o.config.channels.end());
  for (Shape s : shapes)
    if (most_channels > s.cols)
      throw std::invalid_argument(
          fmt::format("accuracy: {} outlier channels do not fit in shape {} ({} values)", most_channels, to_string(s),
                      s.cols));
  const auto cases = o.config.cases();
  fmt::print("accuracy: {} kernel(s) x {} shape(s) x {} case(s) x {} trial(s), {} thread(s), k = {:g}, seed {} "
             "(rerun with --seed {})\n",
             selected.size(), shapes.size(), cases.size(), o.config.trials, o.config.threads, o.config.k,
             o.config.seed, o.config.seed);
  std::fflush(stdout);

  const RunContext ctx = current_context(command_line);
  std::unique_ptr<CsvWriter> csv;
  if (!o.out.empty()) csv = std::make_unique<CsvWriter>(expand_machine(o.out), accuracy_header(), o.append);
  int done = 0;
  const AccuracyOutcome outcome = run_accuracy(
      selected, shapes, o.config,
      [&](const std::vector<AccuracyResult>& rows) {
        ++done;
        std::string line;
        const AccuracyResult* worst = nullptr;
        for (const auto& r : rows) {
          if (!r.outlier_case.gaussian() && (!worst || median_of(r.nmse) > median_of(worst->nmse))) worst = &r;
          if (csv)
            csv->write({ctx.machine, ctx.cpu_model, ctx.gpu, ctx.compiler, ctx.git_commit, r.spec->name,
                        std::string(to_string(r.spec->op)), std::string(to_string(r.spec->weight)),
                        std::string(to_string(r.spec->act)), std::string(to_string(r.spec->backend)),
                        std::to_string(r.shape.rows), std::to_string(r.shape.cols), std::to_string(o.config.threads),
                        r.outlier_case.gaussian() ? "gaussian" : "outliers", std::to_string(r.outlier_case.channels),
                        fmt::format("{:g}", r.outlier_case.multiplier), std::to_string(r.nmse.size()),
                        fmt::format("{:.6e}", median_of(r.nmse)),
                        fmt::format("{:.6e}", *std::min_element(r.nmse.begin(), r.nmse.end())),
                        fmt::format("{:.6e}", *std::max_element(r.nmse.begin(), r.nmse.end())),
                        fmt::format("{:.4f}", median_of(r.peak_to_rms)), fmt::format("{:g}", o.config.k),
                        fmt::format("{:.4f}", share(r.tripped)), r.sibling ? r.sibling->name : "",
                        r.sibling ? fmt::format("{:.6e}", median_of(r.routed_nmse)) : "",
                        std::to_string(o.config.seed), ctx.command});
        }
        const AccuracyResult& g = rows.front();
        line = fmt::format("[{}] {} {}: gaussian {}", done, g.spec->name, to_string(g.shape), sci(median_of(g.nmse)));
        if (worst)
          line += fmt::format(", worst {} {}", to_string(worst->outlier_case), sci(median_of(worst->nmse)));
        if (worst && worst->sibling)
          line += fmt::format(" (routed to {}: {})", worst->sibling->name, sci(median_of(worst->routed_nmse)));
        if (!g.note.empty()) line += " (no routing: " + g.note + ")";
        fmt::print("{}\n", line);
        std::fflush(stdout);
      },
      [&](const AccuracySkip& s) {
        fmt::print("SKIP {} {}: {}\n", s.spec->name, to_string(s.shape), s.reason);
        std::fflush(stdout);
      },
      [&](const std::string& progress) {
        fmt::print("  {}\n", progress);
        std::fflush(stdout);
      });
  if (outcome.results.empty()) {
    fmt::print("accuracy: nothing measured (every kernel skipped)\n");
    return 1;
  }
  fmt::print("\nend-to-end NMSE, median over {} trial(s) x {} shape(s) (cases: outlier channels @ multiple of the rms):\n\n",
             o.config.trials, shapes.size());
  print_nmse_table(outcome.results, cases, o.by == "format");
  print_routing_table(outcome.results, cases, o.by == "format", o.config.k);
  if (csv) fmt::print("\nwrote {}\n", csv->path());
  return 0;
}

std::unique_ptr<Command> accuracy_command(CLI::App& app) { return std::make_unique<AccuracyCommand>(app); }

}  // namespace qmv
