// `qmvlab plan`: which kernel drives each matvec of a model under a plan, and why.
#include <fmt/format.h>

#include "harness/cli/command.h"
#include "harness/csv.h"
#include "harness/machine.h"
#include "harness/table.h"
#include "model/config.h"
#include "model/plan.h"

namespace qmv {
namespace {

class PlanCommand : public Command {
 public:
  explicit PlanCommand(CLI::App& app) {
    cmd_ = app.add_subcommand("plan", "Resolve a kernel plan against a model: which kernel drives each matvec, and why");
    cmd_->add_option("--model", model_, "GGUF model")->required();
    cmd_->add_option("--plan", plan_,
                     "auto, a TOML plan file ([default] / [OP] tables of TYPE = \"KERNEL\") or OP.TYPE=KERNEL rules");
    cmd_->add_option("--rules", rules_, "Rules OP.TYPE=KERNEL,... (after --plan; * for any; KERNEL may be auto)");
    cmd_->add_option("--bench-csv", bench_csv_, "Bench results for `auto` to pick the fastest kernel from");
    cmd_->add_option("--threads", threads_, "Threads the plan is for (matches bench rows)")
        ->check(CLI::PositiveNumber)->capture_default_str();
    route_ = cmd_->add_option("--route-outliers", route_k_,
                              "Route int8-activation matvecs to their f32 siblings on vectors with "
                              "max|x| > K rms (--route-outliers[=K]; K from the plan, else 8)")
                 ->expected(0, 1);
  }

  bool chosen() const override { return cmd_->parsed(); }

  int run(const std::string&) override {
    const LoadedModel m(model_);
    KernelPlan plan = load_plan(plan_);
    if (!rules_.empty()) plan.merge(KernelPlan::parse_rules(rules_));
    if (route_->count() > 0) route_outliers_option(plan, route_k_);
    const auto bench = bench_csv_.empty() ? std::vector<KernelSpeed>{} : kernel_speeds(read_bench_csv(bench_csv_));
    const auto planned = resolve_plan(plan, m.weights, threads_, bench);
    fmt::print("model {} ({}), plan {}, {} thread(s)\n\n", m.config.name, m.config.arch, plan.describe(), threads_);
    print_plan(planned);
    return 0;
  }

 private:
  CLI::App* cmd_ = nullptr;
  CLI::Option* route_ = nullptr;
  std::string model_, plan_, rules_, bench_csv_, route_k_;
  int threads_ = machine_info().cores;
};

}  // namespace

std::unique_ptr<Command> plan_command(CLI::App& app) { return std::make_unique<PlanCommand>(app); }

}  // namespace qmv
