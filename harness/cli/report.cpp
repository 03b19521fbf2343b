// `qmvlab report FILE...`: results CSVs (bench, check, peak or sweep) as tables, with
// the peer ratio where a bench or sweep CSV has ggml rows; `qmvlab report --summary DIR`:
// a machine's results folder on one screen, and as Markdown.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "harness/output_file.h"
#include "harness/cli/command.h"
#include "harness/cli/sweep.h"
#include "harness/cli/tables.h"
#include "harness/csv.h"
#include "harness/machine.h"
#include "harness/summary.h"

namespace qmv {
namespace {

class ReportCommand : public Command {
 public:
  explicit ReportCommand(CLI::App& app) {
    cmd_ = app.add_subcommand(
        "report", "Print a results CSV (bench, check, peak or sweep) as a table, or a results folder "
                  "summarised on one screen (--summary)");
    auto* files = cmd_->add_option("files", files_,
                                   "Results CSV files ({machine} expands to this machine's name); a bench or "
                                   "sweep CSV with ggml rows adds the peer ratio");
    auto* summary = cmd_->add_option(
        "--summary", summary_,
        "A results folder (results/{machine}): peak.csv, default.csv (else quick.csv), check.csv, decode-vs-llamacpp.csv and "
        "decode.csv where present, on one screen: per weight type and threads the best qmvlab kernel, its share "
        "of the peak, the best ggml kernel and the ratio; decode against llama.cpp; what was skipped and why");
    auto* md = cmd_->add_option("--markdown", markdown_,
                                "With --summary: write the report as Markdown here, with the kernels per shape "
                                "and the folder's plots embedded (default DIR/REPORT.md)");
    auto* no_md = cmd_->add_flag("--no-markdown", no_markdown_, "With --summary: print only, write no Markdown");
    summary->excludes(files);
    md->needs(summary);
    no_md->needs(summary);
    md->excludes(no_md);
  }

  bool chosen() const override { return cmd_->parsed(); }

  int run(const std::string&) override {
    if (!summary_.empty()) return run_summary();
    if (files_.empty()) throw UsageError("report: give results CSV files, or --summary DIR");
    for (const auto& file : files_) {
      const std::string f = expand_machine(file);
      if (files_.size() > 1) fmt::print("\n## {}\n\n", f);
      switch (detect_csv_kind(f)) {
        case CsvKind::Bench: {
          RunContext ctx;
          const auto rows = read_bench_csv(f, &ctx);
          fmt::print("machine {} ({}), commit {}\n\n", canonical_machine(ctx.machine), ctx.cpu_model, ctx.git_commit);
          print_bench_table(rows);
          print_peer_tables(timed_rows(rows));
          break;
        }
        case CsvKind::Check: print_check_table(read_check_csv(f)); break;
        case CsvKind::Peak: print_peak_table(read_peak_csv(f)); break;
        case CsvKind::Sweep:
          print_sweep_report(f);
          print_peer_tables(read_timed_csv(f).rows);
          break;
        case CsvKind::Unknown: throw UsageError(fmt::format("{}: not a qmvlab results CSV (unknown header)", f));
      }
    }
    return 0;
  }

 private:
  int run_summary() {
    const std::string dir = expand_machine(summary_);
    const ResultsSummary s = summarize_results(dir);
    fmt::print("{}", summary_text(s));
    if (no_markdown_) return 0;
    const std::string md = markdown_.empty() ? (std::filesystem::path(dir) / "REPORT.md").string()
                                             : expand_machine(markdown_);
    const std::string text = summary_markdown(s, md);
    write_file_atomically(md, text);
    fmt::print("\nwrote {}\n", md);
    return 0;
  }

  CLI::App* cmd_ = nullptr;
  std::vector<std::string> files_;
  std::string summary_, markdown_;
  bool no_markdown_ = false;
};

}  // namespace

std::unique_ptr<Command> report_command(CLI::App& app) { return std::make_unique<ReportCommand>(app); }

}  // namespace qmv
