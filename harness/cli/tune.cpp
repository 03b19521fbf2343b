// `qmvlab tune`: the fastest kernel plan for a model within an accuracy budget, and
// its decode speed against the default plan, measured in the same run.

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "harness/output_file.h"
#include "harness/cli/command.h"
#include "harness/cli/options.h"
#include "harness/machine.h"
#include "harness/peak.h"
#include "harness/table.h"
#include "harness/tune.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/gguf.h"

namespace qmv {

namespace {

class TuneCommand : public Command {
 public:
  explicit TuneCommand(CLI::App& app);
  bool chosen() const override;
  int run(const std::string& command_line) override;

 private:
  struct Options {
    CLI::App* cmd = nullptr;
    std::string model, out;
    TuneConfig config;
    int decode_tokens = 32;
    int rounds = 3;
    bool no_decode = false;
  };
  Options o_;
};

}  // namespace

namespace {

// Greedy decode of `tokens` steps after a short prompt, its weights resident and its
// trials in the run as `decode` makes them; tokens/s after the first.
double decode_tok_s(const LoadedModel& m, const std::vector<PlannedMatvec>& planned, int threads, int tokens) {
  const int prompt = std::min(8, m.config.vocab_size);
  CpuForward fwd(m, planned, threads, prompt + tokens, WeightResidence::Resident);
  fwd.set_kernel_trials(true);
  std::span<const float> logits;
  for (int i = 0; i < prompt; ++i) logits = fwd.step(i);
  auto argmax = [](std::span<const float> l) {
    return static_cast<int>(std::max_element(l.begin(), l.end()) - l.begin());
  };
  int next = argmax(logits);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i < tokens; ++i) next = argmax(fwd.step(next));
  return (tokens - 1) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

TuneCommand::TuneCommand(CLI::App& app) {
  Options& o = o_;
  o.config.threads = machine_info().cores;
  o.cmd = app.add_subcommand("tune",
                             "Time every kernel that can run each matvec of a model, keep those within an accuracy "
                             "budget, write the fastest as a plan, and compare its decode speed with the default plan");
  o.cmd->add_option("--model", o.model, "GGUF model")->required();
  o.cmd->add_option("--threads", o.config.threads, "Threads to tune for")->check(CLI::PositiveNumber)
      ->capture_default_str();
  o.cmd->add_option("--budget-nmse", o.config.budget_nmse,
                    "Largest end-to-end NMSE a kernel may lose (Gaussian and outlier activations)")
      ->check(CLI::PositiveNumber)->capture_default_str();
  o.cmd->add_option("--kernels", o.config.kernels, "Comma-separated globs limiting the candidates")
      ->capture_default_str();
  o.cmd->add_option("--reps", o.config.repetitions, "Timed repetitions per kernel and shape")
      ->check(CLI::Range(1, 100))->capture_default_str();
  o.cmd->add_option("--min-time", o.config.min_time_s, "Minimum seconds per repetition")
      ->check(CLI::Range(0.001, 10.0))->capture_default_str();
  o.cmd->add_option("--seed", o.config.seed, "Seed of the check's random data")->capture_default_str();
  o.cmd->add_option("--out", o.out, "Plan file to write (default results/{machine}/tune-<model>.toml)");
  o.cmd->add_option("--decode-tokens", o.decode_tokens, "Tokens per decode round of the comparison")
      ->check(CLI::Range(2, 4096))->capture_default_str();
  o.cmd->add_option("--rounds", o.rounds,
                    "Decode rounds of the comparison, each the default plan, the tuned plan twice, the default again "
                    "(the median of the rounds' ratios is reported, of those whose runs met one placement of the "
                    "threads)")
      ->check(CLI::Range(1, 50))->capture_default_str();
  o.cmd->add_flag("--no-decode", o.no_decode, "Skip the decode comparison");
}

bool TuneCommand::chosen() const { return o_.cmd->parsed(); }

int TuneCommand::run(const std::string&) {
  const Options& o = o_;
  select_kernels(o.config.kernels);  // refuses globs that select nothing, and misspelt exclusions, before the load
  // Mapped: the decode comparison's forwards make their weights resident as `decode` does.
  const LoadedModel m(o.model);
  const ModelConfig& c = m.config;
  const ModelWeights& w = m.weights;
  const std::string stem = std::filesystem::path(o.model).stem().string();
  fmt::print("tuning {} ({}, {} layers) for {} thread(s), NMSE budget {:.1e}\n", c.name, c.arch, c.n_layers,
             o.config.threads, o.config.budget_nmse);
  const TuneResult r = tune_model(w, c.name, o.config, [](const std::string& s) {
    fmt::print("  {}\n", s);
    std::fflush(stdout);
  });

  std::vector<std::vector<std::string>> rows;
  for (const TuneCandidate& t : r.candidates)
    rows.push_back({std::string(to_string(t.op)), std::string(to_string(t.weight)), to_string(t.shape), t.kernel->name,
                    fmt::format("{:.1e}", t.nmse_gaussian), fmt::format("{:.1e}", t.nmse_outliers),
                    t.within_budget ? "yes" : (t.check_passed ? "no" : "check failed"),
                    t.time_us > 0 ? fmt::format("{:.1f}", t.time_us) : "-",
                    t.time_us > 0 ? fmt::format("{:.2f}", t.gbps) : "-",
                    t.time_us > 0 ? fmt::format("{:.0f}%", t.peak_pct) : "-", t.chosen ? "<- plan" : ""});
  fmt::print("\n");
  print_table({"op", "weights", "shape", "kernel", "NMSE gaussian", "NMSE outliers", "in budget", "median us",
               "GB/s", "of peak", ""},
              rows);

  const std::string out = expand_machine(o.out.empty() ? "results/{machine}/tune-" + stem + ".toml" : o.out);
  write_file_atomically(out, r.plan_toml);
  fmt::print("\nwrote the plan to {} (qmvlab decode --model {} --plan {})\n", out, o.model, out);

  if (o.no_decode) return 0;
  const auto tuned = resolve_plan(KernelPlan::load_toml(out), w, o.config.threads);
  // The default plan as `decode` resolves it: auto from the tuning store, which the
  // timings above have just filled.
  AutoPlanEvidence evidence;
  const auto speeds = auto_plan_speeds({}, KernelPlan{}, w, o.config.threads, Backend::CPU, &evidence);
  const auto standard = resolve_plan(KernelPlan{}, w, o.config.threads, speeds);
  fmt::print("\nthe default plan ({}):\n", evidence.summary());
  print_plan(standard);
  const bool two_threads = o.config.threads >= 2;
  std::vector<PlanRound> rounds;
  for (int i = 0; i < o.rounds; ++i) {
    PlanRound r;
    // Each run, then where the host had the threads (a few microseconds).
    auto run = [&](const std::vector<PlannedMatvec>& plan, double& tok_s, int order) {
      tok_s = decode_tok_s(m, plan, o.config.threads, o.decode_tokens);
      if (two_threads) r.round_trip_ns[order] = thread_round_trip_ns();
    };
    run(standard, r.default_tok_s[0], 0);
    run(tuned, r.tuned_tok_s[0], 1);
    run(tuned, r.tuned_tok_s[1], 2);
    run(standard, r.default_tok_s[1], 3);
    std::string threads;
    if (two_threads)
      threads = fmt::format("; threads {:.0f}, {:.0f}, {:.0f}, {:.0f} ns{}", r.round_trip_ns[0], r.round_trip_ns[1],
                            r.round_trip_ns[2], r.round_trip_ns[3],
                            r.one_placement() ? "" : ": the host moved them within the round");
    fmt::print("round {}/{}: default {:.2f}, {:.2f} tok/s; tuned {:.2f}, {:.2f} tok/s; default/tuned {:.3f}{}\n", i + 1,
               o.rounds, r.default_tok_s[0], r.default_tok_s[1], r.tuned_tok_s[0], r.tuned_tok_s[1],
               r.default_over_tuned(), threads);
    std::fflush(stdout);
    rounds.push_back(r);
  }
  const std::vector<PlanRound> weighed = rounds_to_weigh(rounds);
  std::vector<double> ratios, standard_s, tuned_s;
  for (const PlanRound& r : weighed) ratios.push_back(r.default_over_tuned());
  for (const PlanRound& r : rounds) {
    standard_s.insert(standard_s.end(), std::begin(r.default_tok_s), std::end(r.default_tok_s));
    tuned_s.insert(tuned_s.end(), std::begin(r.tuned_tok_s), std::end(r.tuned_tok_s));
  }
  const auto [low, high] = std::minmax_element(ratios.begin(), ratios.end());
  const std::string which =
      weighed.size() == rounds.size()
          ? "the rounds' ratios"
          : fmt::format("the ratios of the {} of {} rounds whose runs met one placement of the threads",
                        weighed.size(), rounds.size());
  fmt::print("\ndecode, {} thread(s), {} tokens, {} round(s) of default, tuned, tuned, default: the default plan "
             "reaches {:.1f}% of the tuned plan's tok/s (median of {}, range {:.1f}-{:.1f}%); "
             "medians of the runs: default plan {:.2f} tok/s, tuned plan {:.2f} tok/s\n",
             o.config.threads, o.decode_tokens, o.rounds, 100 * default_share_of_tuned(rounds), which, 100 * *low,
             100 * *high, median(standard_s), median(tuned_s));
  if (two_threads && std::none_of(rounds.begin(), rounds.end(), [](const PlanRound& r) { return r.one_placement(); }))
    fmt::print("every round met two placements of the threads; the median is of them all\n");
  return 0;
}

std::unique_ptr<Command> tune_command(CLI::App& app) { return std::make_unique<TuneCommand>(app); }

}  // namespace qmv
