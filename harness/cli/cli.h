// The qmvlab command line: list, check, bench, peak, report, gguf, plan, tokenize,
// decode, logits.
#pragma once

#include <string>

namespace qmv {

// Runs the command line; returns the process exit code (0 ok, 1 a check failed,
// 2 bad usage or input).
int run_cli(int argc, char** argv);

// Parses the command line as run_cli does and runs nothing (the option fuzzer): 0 when
// it parses or asks for --help or --version, 2 when it is refused, with the one line
// run_cli would print in `error`.
int parse_cli_only(int argc, char** argv, std::string* error);

}  // namespace qmv
