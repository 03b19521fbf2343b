// `qmvlab report FILE...`: results CSVs (bench, check, peak or sweep) as tables.
#include <fmt/format.h>

#include "harness/cli/command.h"
#include "harness/cli/sweep.h"
#include "harness/cli/tables.h"
#include "harness/csv.h"
#include "harness/machine.h"

namespace qmv {
namespace {

class ReportCommand : public Command {
 public:
  explicit ReportCommand(CLI::App& app) {
    cmd_ = app.add_subcommand("report", "Print a results CSV (bench, check, peak or sweep) as a table");
    cmd_->add_option("files", files_, "Results CSV files ({machine} expands to this machine's name)")->required();
  }

  bool chosen() const override { return cmd_->parsed(); }

  int run(const std::string&) override {
    for (const auto& file : files_) {
      const std::string f = expand_machine(file);
      if (files_.size() > 1) fmt::print("\n## {}\n\n", f);
      switch (detect_csv_kind(f)) {
        case CsvKind::Bench: {
          RunContext ctx;
          const auto rows = read_bench_csv(f, &ctx);
          fmt::print("machine {} ({}), commit {}\n\n", ctx.machine, ctx.cpu_model, ctx.git_commit);
          print_bench_table(rows);
          break;
        }
        case CsvKind::Check: print_check_table(read_check_csv(f)); break;
        case CsvKind::Peak: print_peak_table(read_peak_csv(f)); break;
        case CsvKind::Sweep: print_sweep_report(f); break;
        case CsvKind::Unknown: throw UsageError(fmt::format("{}: not a qmvlab results CSV (unknown header)", f));
      }
    }
    return 0;
  }

 private:
  CLI::App* cmd_ = nullptr;
  std::vector<std::string> files_;
};

}  // namespace

std::unique_ptr<Command> report_command(CLI::App& app) { return std::make_unique<ReportCommand>(app); }

}  // namespace qmv
