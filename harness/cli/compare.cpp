// `qmvlab compare A.csv B.csv`: two results CSVs side by side, the ratio per matched
// row and their geometric mean, then where both have ggml rows the peer ratio of each.

#include <string>

#include "harness/cli/command.h"
#include "harness/compare.h"

namespace qmv {

namespace {

class CompareCommand : public Command {
 public:
  explicit CompareCommand(CLI::App& app);
  bool chosen() const override;
  int run(const std::string& command_line) override;

 private:
  struct Options {
    CLI::App* cmd = nullptr;
    std::string a, b, by = "kernel", metric = "gbps";
  };
  Options o_;
};

}  // namespace

CompareCommand::CompareCommand(CLI::App& app) {
  o_.cmd = app.add_subcommand(
      "compare",
      "Compare two results CSVs (bench, or sweep with status ok): per matched row A's and B's "
      "values and the ratio (>1: B better), then the geometric mean; where both have ggml rows, "
      "where qmvlab stands against ggml on each side (ggml time / qmvlab time per weight type)");
  o_.cmd->add_option("a", o_.a, "Results CSV A (the baseline)")->required();
  o_.cmd->add_option("b", o_.b, "Results CSV B")->required();
  o_.cmd->add_option("--by", o_.by,
                      "kernel: same kernel, shape, threads and cache; shape: each side's fastest "
                      "qmvlab row per shape, weight type, op and cache, whatever the kernel (across "
                      "machines and backends; ggml's rows are left to the peer table)")
      ->capture_default_str();
  o_.cmd->add_option("--metric", o_.metric,
                      "gbps (B/A), time (median us, A/B) or peak_pct (share of measured peak, B/A)")
      ->capture_default_str();
}

bool CompareCommand::chosen() const { return o_.cmd->parsed(); }

int CompareCommand::run(const std::string&) {
  const CompareBy by = parse_compare_by(o_.by);
  const Metric metric = parse_metric(o_.metric);
  const ResultsFile a = read_results_csv(o_.a);
  const ResultsFile b = read_results_csv(o_.b);
  print_comparison(a, b, compare_results(a, b, by, metric));
  print_peer_comparison(compare_peers(a, b));
  return 0;
}

std::unique_ptr<Command> compare_command(CLI::App& app) { return std::make_unique<CompareCommand>(app); }

}  // namespace qmv
