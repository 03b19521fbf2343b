// One subcommand of `qmvlab`: it adds itself and its options to the parser, and runs
// once the parser has chosen it. run_cli (cli.cpp) is a table of these.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <stdexcept>
#include <string>

namespace qmv {

// Bad input from the user: printed as one line, exit code 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Command {
 public:
  virtual ~Command() = default;
  // True when the parsed command line chose this command (or one of its pair, as
  // `decode`/`logits` and `sweep`/`merge` share one).
  virtual bool chosen() const = 0;
  // Runs it; `command_line` is the whole invocation, recorded in the CSVs it writes.
  // Returns the exit code: 0 ok, 1 a check failed or nothing could be measured. Bad
  // input throws (UsageError or the error type of the layer that found it).
  virtual int run(const std::string& command_line) = 0;
};

// Each file of harness/cli/ defines one of these: it adds its subcommand to `app`.
using CommandFactory = std::unique_ptr<Command> (*)(CLI::App& app);

std::unique_ptr<Command> list_command(CLI::App& app);
std::unique_ptr<Command> check_command(CLI::App& app);
std::unique_ptr<Command> bench_command(CLI::App& app);
std::unique_ptr<Command> peak_command(CLI::App& app);
std::unique_ptr<Command> sweep_command(CLI::App& app);  // also `merge`
std::unique_ptr<Command> report_command(CLI::App& app);
std::unique_ptr<Command> compare_command(CLI::App& app);
std::unique_ptr<Command> gate_command(CLI::App& app);
std::unique_ptr<Command> accuracy_command(CLI::App& app);
std::unique_ptr<Command> tune_command(CLI::App& app);
std::unique_ptr<Command> gguf_command(CLI::App& app);
std::unique_ptr<Command> tokenize_command(CLI::App& app);
std::unique_ptr<Command> plan_command(CLI::App& app);
std::unique_ptr<Command> decode_command(CLI::App& app);  // also `logits`
std::unique_ptr<Command> make_model_command(CLI::App& app);

}  // namespace qmv
