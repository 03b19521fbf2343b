// `qmvlab plan`: which kernel drives each matvec of a model under a plan, and why.
#include <fmt/format.h>

#include "harness/cli/command.h"
#include "harness/cli/options.h"
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
    cmd_->add_option("--plan", plan_, kPlanHelp)->capture_default_str();
    cmd_->add_option("--rules", rules_, "Rules OP.TYPE=KERNEL,... (after --plan; * for any; KERNEL may be auto)");
    add_auto_plan_options(cmd_, auto_);
    cmd_->add_option("--threads", threads_, "Threads the plan is for (matches measured rows)")
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
    AutoPlanEvidence evidence;
    const auto speeds = auto_plan_speeds(auto_, plan, m.weights, threads_, Backend::CPU, &evidence);
    const auto planned = resolve_plan(plan, m.weights, threads_, speeds);
    fmt::print("model {} ({}), plan {}, {} thread(s)\n", m.config.name, m.config.arch, plan.describe(), threads_);
    if (auto_.bench_csv.empty()) fmt::print("{}\n", evidence.summary());
    fmt::print("\n");
    print_plan(planned);
    return 0;
  }

 private:
  CLI::App* cmd_ = nullptr;
  CLI::Option* route_ = nullptr;
  std::string model_, plan_ = "auto", rules_, route_k_;
  AutoPlanChoice auto_;
  int threads_ = machine_info().cores;
};

}  // namespace

std::unique_ptr<Command> plan_command(CLI::App& app) { return std::make_unique<PlanCommand>(app); }

}  // namespace qmv
