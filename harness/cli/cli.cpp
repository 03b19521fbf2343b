#include "harness/cli/cli.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "harness/cli/command.h"
#include "harness/machine.h"

namespace qmv {
namespace {

// The subcommands, in the order `qmvlab --help` lists them.
constexpr CommandFactory kCommands[] = {
    list_command,   check_command,  bench_command,    peak_command,    gguf_command,
    plan_command,   tokenize_command, decode_command, tune_command,    gate_command,
    accuracy_command, compare_command, sweep_command, report_command,  make_model_command,
};

// The command line as typed, quoted where a shell would need it (the CSVs record it).
std::string command_line(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) {
    if (i) s += ' ';
    const std::string arg = argv[i];
    s += arg.find_first_of(" *?,'\"") == std::string::npos ? arg : "'" + arg + "'";
  }
  return s;
}

}  // namespace

int run_cli(int argc, char** argv) {
  CLI::App app{
      "qmvlab: which quantized GEMV kernel is fastest and accurate enough, on this machine.\n"
      "Kernels are GGUF K-quant matvec plugins; every subcommand reads the registry."};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("qmvlab ") + machine_info().git_commit);
  std::vector<std::unique_ptr<Command>> commands;
  for (CommandFactory make : kCommands) commands.push_back(make(app));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    for (const auto& c : commands)
      if (c->chosen()) return c->run(command_line(argc, argv));
  } catch (const std::exception& e) {
    // Every error below the command line is bad input or an unusable machine, with a
    // message that says which: one line, exit 2.
    fmt::print(stderr, "qmvlab: {}\n", e.what());
    return 2;
  }
  return 0;
}

}  // namespace qmv
