// The qmvlab command line: list, check, bench, peak, report, gguf, plan, tokenize,
// decode, logits.
#pragma once

namespace qmv {

// Runs the command line; returns the process exit code (0 ok, 1 a check failed,
// 2 bad usage or input).
int run_cli(int argc, char** argv);

}  // namespace qmv
