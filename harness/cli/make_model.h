// `qmvlab make-model`: writes a synthetic GGUF model (model/synthetic.h).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "model/synthetic.h"

namespace qmv {

struct MakeModelArgs {
  SyntheticSpec spec;
  std::string out;
  bool tied = false, untied = false;
  bool dry_run = false;
};

// Adds the subcommand to `app`; its options are parsed into `args`.
CLI::App* add_make_model_command(CLI::App& app, MakeModelArgs& args);
// Runs it once parsed: prints the plan, writes the file with progress, returns 0.
// Bad input throws (SyntheticError, gguf::WriterError) with a one-line message.
int run_make_model(const MakeModelArgs& args);

}  // namespace qmv
