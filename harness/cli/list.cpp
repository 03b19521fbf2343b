// `qmvlab list`: the registered kernels, what each needs and whether it runs here;
// `--shapes` the shape presets, `--machine` this machine's results folder name.
#include <fmt/format.h>

#include "harness/cli/command.h"
#include "harness/cli/options.h"
#include "harness/machine.h"
#include "harness/table.h"
#include "kernels/availability.h"
#include "kernels/cpu_features.h"
#include "kernels/registry.h"

namespace qmv {
namespace {

class ListCommand : public Command {
 public:
  explicit ListCommand(CLI::App& app) {
    cmd_ = app.add_subcommand("list", "List registered kernels, their requirements and availability here");
    cmd_->add_option("--kernels", kernels_, "Comma-separated globs of kernel names")->capture_default_str();
    cmd_->add_flag_callback("--machine", [] {
      fmt::print("{}\n", machine_info().machine);
      throw CLI::Success();
    }, "Print this machine's name (the results/<machine>/ folder) and exit");
    cmd_->add_flag_callback("--shapes", [] {
      for (const auto& p : shape_presets()) {
        std::string s;
        for (const TaggedShape& x : p.shapes)
          s += (s.empty() ? "" : ",") + to_string(x.shape) + (x.ops.empty() ? "" : "[" + x.ops + "]");
        fmt::print("{}: {}\n    {}\n", p.name, p.description, s);
      }
      throw CLI::Success();
    }, "List the shape presets and exit");
  }

  bool chosen() const override { return cmd_->parsed(); }

  int run(const std::string&) override {
    std::vector<std::vector<std::string>> rows;
    for (const KernelSpec* k : select_kernels(kernels_)) {
      const Availability av = availability(*k);
      const std::string needs = k->backend == Backend::CPU
                                    ? cpu_feature_names(k->cpu_features)
                                    : (k->min_sm ? fmt::format("sm_{}", k->min_sm) : std::string());
      rows.push_back({k->name, std::string(to_string(k->op)), std::string(to_string(k->weight)),
                      std::string(to_string(k->act)), std::string(to_string(k->backend)),
                      needs.empty() ? "-" : needs, av.available ? "yes" : "no: " + av.reason, k->description});
    }
    const MachineInfo& m = machine_info();
    std::string cpu = m.cpu_model;
    if (!m.uarch.empty()) cpu += ", " + m.uarch;
    if (!m.signature.empty()) cpu += ", " + m.signature;
    fmt::print("machine {} ({}, {} cores); {}\n", m.machine, cpu, m.cores, m.gpu_status);
    std::string peers;
    for (const PeerBuild& p : peer_builds()) peers += (peers.empty() ? "" : "; ") + p.name + ": " + p.version;
    fmt::print("peers: {}\n\n", peers.empty() ? "none built in (scripts/install-peers.sh, then rebuild)" : peers);
    print_table({"kernel", "op", "weights", "activations", "backend", "needs", "available", "description"}, rows);
    return 0;
  }

 private:
  CLI::App* cmd_ = nullptr;
  std::string kernels_ = "*";
};

}  // namespace

std::unique_ptr<Command> list_command(CLI::App& app) { return std::make_unique<ListCommand>(app); }

}  // namespace qmv
